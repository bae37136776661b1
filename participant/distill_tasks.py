"""The participant side of a "fed-distill" job over the wire (coordinator.distill_job).

:class:`DistillTasks` answers the distillation tasks of ``protocol.wire.messages`` with a
``participant.deep.distill_local.DistillParticipant`` built lazily on the first
``distill_train`` task: torch is imported only then, so an agent without the ``fedclust[deep]``
extra still answers every other job, and refuses these tasks with a clear reason. A
participant without labels (no ``label_column`` in its ``[data]``) refuses them too.

With a ``store`` file the trained classifier is saved after every task that changes it
(``participant.model_store``) and reloaded when the agent restarts mid-job.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from fedclust.core.errors import RefusedError
from fedclust.core.validation import FloatArray
from fedclust.participant.model_store import load_arrays, save_arrays
from fedclust.protocol.maths import distillation as dist
from fedclust.protocol.wire import messages as msg

__all__ = ["DISTILL_TASKS", "DistillTasks"]

#: The task specs this module answers.
DISTILL_TASKS = (msg.DistillTrainTask, msg.DistillCountsTask, msg.DistillSoftTask,
                 msg.DistillStepTask)


class DistillTasks:
    """One job's classifier over the participant's labelled rows.

    Its soft predictions leave it once per job, before any distillation step, for one group
    that names it (``distill_soft``; the same task may be asked again, e.g. by a resumed
    coordinator): the driver asks no more, and a coordinator asking again, for another
    claimed group or after the classifier changed, is refused. So is a second training once
    they have left (it would give new predictions to ask for).

    Args:
        X: the participant's rows (n_samples, n_features), as the public set is scaled.
        y: its integer labels, or None when the data has no label column (every task is
            then refused).
        name: the participant's id (for messages).
        store: the file that keeps the trained classifier between tasks (None: memory only).
        device: where the classifier trains (``participant.deep.device``; the agent's
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
        self._model: Any = None  # DistillParticipant once trained
        self._soft_group: tuple[str, ...] = ()  # the group its soft predictions went to
        self._distilled = False  # a distillation step has changed the classifier

    def answer(self, spec: msg.TaskSpec) -> msg.Reply:
        """The reply to one distillation task; RefusedError when it cannot be computed."""
        match spec:
            case msg.DistillTrainTask():
                self._train(spec)
                return msg.AckReply()
            case msg.DistillCountsTask(public=public, n_classes=n_classes):
                counts = self._trained(n_classes).predict_counts(public.to_numpy())
                return msg.DistillCountsReply(
                    label_counts=msg.WireArray.of(counts[dist.LABEL_COUNTS])
                )
            case msg.DistillSoftTask(public=public, n_classes=n_classes, members=members):
                if self._name not in members:
                    raise RefusedError(
                        f"a 'distill_soft' task for a group without {self._name!r}: refused."
                    )
                model = self._trained(n_classes)
                self._claim_soft(tuple(members))
                soft = model.predict_soft(public.to_numpy())
                return msg.DistillSoftReply(
                    soft_sum=msg.WireArray.of(soft[dist.SOFT_SUM]),
                    members=msg.WireArray.of(soft[dist.COUNT]),
                )
            case msg.DistillStepTask(
                public=public, teacher=teacher, temperature=temperature, epochs=epochs,
                seed=seed, learning_rate=lr, batch_size=batch_size,
            ):
                model = self._trained(None)
                model.distill(
                    teacher.to_numpy(), public.to_numpy(), temperature=temperature,
                    epochs=epochs, seed=seed, lr=lr, batch_size=batch_size,
                )
                self._distilled = True
                self._save(model)
                return msg.AckReply()
        raise RefusedError(f"this participant does not answer {spec.kind!r} tasks")

    def _participant(self, n_classes: int, classifier: Literal["mlp", "cnn"]) -> Any:
        """A fresh DistillParticipant over the rows (refused without labels or torch)."""
        if self._y is None:
            raise RefusedError(
                f"participant {self._name!r} has no labels ([data] label_column) for "
                "'fed-distill'."
            )
        try:
            from fedclust.participant.deep.classifier import ClassifierSpec
            from fedclust.participant.deep.distill_local import DistillParticipant
        except ImportError:
            raise RefusedError(
                f"participant {self._name!r} cannot train classifiers: PyTorch is not "
                "installed (pip install 'fedclust[deep]')."
            ) from None
        try:
            return DistillParticipant(
                self._X, self._y, name=self._name,
                spec=ClassifierSpec(self._X.shape[1], n_classes, classifier),
                device=self._device,
            )
        except ValueError as exc:
            raise RefusedError(f"participant {self._name!r}: {exc}") from None

    def _train(self, spec: msg.DistillTrainTask) -> None:
        if self._model is None:
            self._model = self._restore()  # what this job's classifier has given already
        if self._soft_group or self._distilled:
            raise RefusedError(
                "a second 'distill_train' task after this job's soft predictions were given: "
                "the classifier is trained once per job; refused."
            )
        model = self._participant(spec.n_classes, spec.classifier)
        model.train_local(seed=spec.seed, max_epochs=spec.max_epochs, lr=spec.learning_rate,
                          batch_size=spec.batch_size)
        self._soft_group, self._distilled = (), False
        self._save(model)
        self._model = model

    def _claim_soft(self, group: tuple[str, ...]) -> None:
        """Refuse soft predictions after a distillation step or for a group other than the
        one they went to (see the class doc); remember the group of the first."""
        if self._distilled:
            raise RefusedError(
                "a 'distill_soft' task after this job's distillation step: the soft "
                "predictions are given once, before it; refused."
            )
        if self._soft_group and set(self._soft_group) != set(group):
            raise RefusedError(
                "a second 'distill_soft' task for another group: the soft predictions are "
                "given once, to one group; refused."
            )
        if not self._soft_group:
            self._soft_group = group
            self._save(self._model)

    def _save(self, model: Any) -> None:
        if self._store is not None:
            save_arrays(
                self._store,
                {"n_classes": np.array([model.spec.n_classes]),
                 "cnn": np.array([model.spec.kind == "cnn"]),
                 "soft_group": np.array(self._soft_group, dtype=np.str_),
                 "distilled": np.array([self._distilled])},
                model.weights(),
            )

    def _restore(self) -> Any:
        """The classifier saved before an agent restart (None when there is none)."""
        saved = None if self._store is None else load_arrays(self._store)
        if saved is None:
            return None
        facts, weights = saved
        kind: Literal["mlp", "cnn"] = "cnn" if bool(facts["cnn"][0]) else "mlp"
        self._soft_group = tuple(str(n) for n in facts.get("soft_group", ()))
        self._distilled = bool(facts["distilled"][0]) if "distilled" in facts else False
        model = self._participant(int(facts["n_classes"][0]), kind)
        try:
            model.load_weights(weights)
        except ValueError as exc:
            raise RefusedError(str(exc)) from None
        return model

    def _trained(self, n_classes: int | None) -> Any:
        if self._model is None:
            self._model = self._restore()
        if self._model is None:
            raise RefusedError(
                f"participant {self._name!r} has no trained classifier in this job."
            )
        if n_classes is not None and self._model.spec.n_classes != n_classes:
            raise RefusedError("the task's n_classes differs from the trained classifier's.")
        return self._model
