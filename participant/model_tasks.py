"""The model-based tasks of one job at a participant: fed-distill and FedCRef.

:class:`ModelTasks` routes each task to the job's :class:`~participant.distill_tasks.
DistillTasks` or :class:`~participant.fedcref_tasks.FedCRefTasks`; neither imports torch
before its first task arrives. With a ``state`` path (the agent's per-job state file
``jobs/<job id>.json``), each keeps its trained models beside it (``jobs/<job id>.distill.npz``,
``jobs/<job id>.fedcref.npz``), so an agent restarted mid-job resumes with them; the FedCRef
file also holds the participant's latest assignment of its rows to local clusters. ``device``
(the agent's ``[model] device``) is where both train (``participant.deep.device``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from fedclust.core.validation import FloatArray
from fedclust.participant.distill_tasks import DISTILL_TASKS, DistillTasks
from fedclust.participant.fedcref_tasks import FEDCREF_TASKS, FedCRefTasks
from fedclust.protocol.wire import messages as msg

__all__ = ["MODEL_TASKS", "ModelTasks"]

#: The task specs answered by :class:`ModelTasks`.
MODEL_TASKS = (*DISTILL_TASKS, *FEDCREF_TASKS)


class ModelTasks:
    """One job's model-based computations over the participant's rows and labels."""

    def __init__(
        self, X: FloatArray, y: NDArray[np.int64] | None, *, name: str,
        state: Path | None = None, device: str = "auto",
    ) -> None:
        def beside(suffix: str) -> Path | None:
            return None if state is None else state.with_suffix(suffix)

        self._distill = DistillTasks(X, y, name=name, store=beside(".distill.npz"),
                                     device=device)
        self._fedcref = FedCRefTasks(X, y, name=name, store=beside(".fedcref.npz"),
                                     device=device)

    def answer(self, spec: msg.TaskSpec) -> msg.Reply:
        """The reply to one model-based task; RefusedError when it cannot be computed."""
        if isinstance(spec, FEDCREF_TASKS):
            return self._fedcref.answer(spec)
        return self._distill.answer(spec)
