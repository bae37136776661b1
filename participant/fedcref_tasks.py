"""The participant side of a "fedcref" job over the wire (coordinator.fedcref_job).

:class:`FedCRefTasks` answers the FedCRef tasks of ``protocol.wire.messages`` with a
``participant.deep.fedcref_local.FedCRefLocal`` built on the ``fedcref_init`` task: torch is
imported only then, so an agent without the ``fedclust[deep]`` extra still answers every other
job and refuses these tasks with a clear reason. The rows must be scaled to [0, 1]; the
initial clustering "labels" needs the agent's ``[data] label_column``. Rows, labels and
per-row errors stay here: only K_i, models, scores, FedAvg sums and agreements leave.

With a ``store`` file the local assignment and models are saved after every task that changes
them (``participant.model_store``) and reloaded when the agent restarts mid-job.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from fedclust.core.errors import ProtocolError, RefusedError
from fedclust.core.validation import FloatArray
from fedclust.participant.model_store import load_arrays, save_arrays
from fedclust.protocol.wire import messages as msg

__all__ = ["FEDCREF_TASKS", "FedCRefTasks"]

#: The task specs this module answers.
FEDCREF_TASKS = (
    msg.FedCRefInitTask, msg.FedCRefTrainTask, msg.FedCRefModelsTask, msg.FedCRefScoresTask,
    msg.FedCRefFedavgTask, msg.FedCRefRefineTask,
)


def _models(array: msg.WireArray, what: str) -> list[NDArray[np.float32]]:
    if array.dtype != "float32" or len(array.shape) != 2:
        raise RefusedError(f"the task's {what} must be a float32 (M, n_params) array.")
    return [row for row in array.to_numpy()]


class FedCRefTasks:
    """One job's local clusters and autoencoders over the participant's rows.

    Args:
        X: the participant's rows (n_samples, n_features), scaled to [0, 1].
        y: its integer labels (its own local clustering for ``initial="labels"``), or None.
        name: the participant's id, as the coordinator names it in tasks.
        store: the file that keeps the assignment and models between tasks (None: memory).
        device: where the autoencoders train (``participant.deep.device``; the agent's
            ``[model] device``).
    """

    def __init__(
        self, X: FloatArray, y: NDArray[np.int64] | None, *, name: str,
        store: Path | None = None, device: str = "auto",
    ) -> None:
        self._device = device
        self._X = X
        self._y = y
        self._name = name
        self._store = store
        self._local: Any = None  # FedCRefLocal once initialised
        self._n_params = 0
        self._facts: dict[str, NDArray[np.generic]] = {}

    def answer(self, spec: msg.TaskSpec) -> msg.Reply:
        """The reply to one FedCRef task; RefusedError when it cannot be computed."""
        try:
            return self._answer(spec)
        except (ValueError, ProtocolError) as exc:
            raise RefusedError(f"participant {self._name!r}: {exc}") from None

    def _answer(self, spec: msg.TaskSpec) -> msg.Reply:
        match spec:
            case msg.FedCRefInitTask():
                k = self._init(spec)
                self._save()
                return msg.FedCRefInitReply(k=k)
            case msg.FedCRefTrainTask(seed=seed):
                self._ready().fedcref_train(seed=seed)
                self._save()
                return msg.AckReply()
            case msg.FedCRefModelsTask():
                return msg.FedCRefModelsReply(
                    models=msg.WireArray.of(np.stack(self._ready().fedcref_models()))
                )
            case msg.FedCRefScoresTask(models=models, alpha=alpha):
                scores = self._ready().fedcref_scores(_models(models, "models"), alpha=alpha)
                return msg.FedCRefScoresReply(scores=msg.WireArray.of(scores))
            case msg.FedCRefFedavgTask():
                return self._fedavg(spec)
            case msg.FedCRefRefineTask(models=models, seed=seed):
                agreement = self._ready().fedcref_refine(_models(models, "models"), seed=seed)
                self._save()
                return msg.FedCRefRefineReply(agreement=agreement)
        raise RefusedError(f"this participant does not answer {spec.kind!r} tasks")

    def _init(self, spec: msg.FedCRefInitTask) -> int:
        if spec.initial == "labels" and self._y is None:
            raise RefusedError(
                f"participant {self._name!r} has no labels ([data] label_column) for the "
                "initial clustering 'labels'."
            )
        local, architecture = self._new(spec.initial, spec.k, spec.k_max, spec.epochs,
                                        spec.hidden)
        k = int(local.fedcref_init(architecture, seed=spec.seed))
        self._local = local
        self._n_params = architecture.n_params
        self._facts = {"hidden": np.array(spec.hidden), "epochs": np.array([spec.epochs])}
        return k

    def _new(
        self, initial: Literal["kmeans", "labels"], k: int | None, k_max: int, epochs: int,
        hidden: tuple[int, ...],
    ) -> tuple[Any, Any]:
        """A FedCRefLocal over the rows and its architecture (refused without torch)."""
        try:
            from fedclust.participant.deep.autoencoder import TrainConfig
            from fedclust.participant.deep.fedcref_local import FedCRefLocal
            from fedclust.protocol.maths.fedcref import AutoencoderSpec
        except ImportError:
            raise RefusedError(
                f"participant {self._name!r} cannot train autoencoders: PyTorch is not "
                "installed (pip install 'fedclust[deep]')."
            ) from None
        local = FedCRefLocal(
            self._X, name=self._name, initial=initial, k=k, k_max=k_max,
            labels=self._y if initial == "labels" else None,
            config=TrainConfig(epochs=epochs), device=self._device,
        )
        return local, AutoencoderSpec(self._X.shape[1], hidden)

    def _save(self) -> None:
        if self._store is None:
            return
        local, facts = self._local, self._facts
        save_arrays(
            self._store,
            {**facts, "stale": np.array([local.needs_training])},
            {"labels": local.labels, "models": np.stack(local.fedcref_models())},
        )

    def _restore(self) -> None:
        """Rebuild the local state saved before an agent restart (if any)."""
        saved = None if self._store is None else load_arrays(self._store)
        if saved is None:
            return
        facts, arrays = saved
        try:
            local, architecture = self._new(
                "kmeans", None, 2, int(facts["epochs"][0]),
                tuple(int(h) for h in facts["hidden"]),
            )
            local.restore(
                architecture, arrays["labels"], list(arrays["models"]),
                stale=bool(facts["stale"][0]),
            )
        except (KeyError, IndexError):
            raise RefusedError(
                "the agent's saved models of this job are incomplete; its operator must "
                "remove them"
            ) from None
        self._local, self._facts = local, facts
        self._n_params = architecture.n_params

    def _ready(self) -> Any:
        if self._local is None:
            self._restore()
        if self._local is None:
            raise RefusedError(
                f"participant {self._name!r} has no FedCRef models in this job (fedcref_init "
                "comes first)."
            )
        return self._local

    def _fedavg(self, spec: msg.FedCRefFedavgTask) -> msg.FedCRefFedavgReply:
        local = self._ready()
        clusters = spec.members.get(self._name)
        if clusters is None:
            raise RefusedError(f"participant {self._name!r} is not a member of this group.")
        if spec.n_params != self._n_params:
            raise RefusedError(
                f"the task's n_params {spec.n_params} differs from this job's models "
                f"({self._n_params})."
            )
        model = None if spec.model is None else spec.model.to_numpy()
        out = local.fedcref_fedavg_step(
            model, clusters, epochs=spec.epochs, seed=spec.seeds[self._name]
        )
        return msg.FedCRefFedavgReply(
            weighted_params=msg.WireArray.of(out["weighted_params"]),
            rows=msg.WireArray.of(np.asarray(out["n"], dtype=np.float64)),
        )
