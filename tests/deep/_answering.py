"""In-process participants as the model-based drivers ask them: the agent's task handlers
(``participant.distill_tasks``, ``participant.fedcref_tasks``; over a prepared model:
``fedclust.deep_simulate.PreparedDistillTasks`` / ``PreparedFedCRefTasks``) answering the
driver's task specs, routed by ``LocalParticipant.answer``."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from fedclust.deep_simulate import PreparedDistillTasks, PreparedFedCRefTasks
from fedclust.participant.local import LocalParticipant


def answering(tasks: Any, X: NDArray[np.float64], name: str) -> LocalParticipant:
    """The rows ``X`` of participant ``name`` whose model tasks ``tasks`` answers."""
    local = LocalParticipant(X, name=name)
    local.model_tasks = tasks
    return local


def distilling(
    model: Any, X: NDArray[np.float64], y: NDArray[np.int64]
) -> LocalParticipant:
    """``model`` (a ``DistillParticipant`` over the rows ``X``, ``y``) as a participant."""
    return answering(PreparedDistillTasks(model, X, y), X, model.name)


def clustering(local: Any, X: NDArray[np.float64]) -> LocalParticipant:
    """``local`` (a ``FedCRefLocal`` over the rows ``X``) as a participant."""
    return answering(PreparedFedCRefTasks(local, X, None), X, local.name)
