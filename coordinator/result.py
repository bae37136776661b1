"""What a coordinator driver returns: the global centers and how the rounds went."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import numpy as np
from numpy.typing import NDArray

if TYPE_CHECKING:
    from pydantic import BaseModel

    from fedclust.coordinator.secure_sum import Summation

StopReason = Literal["converged", "max_rounds", "cycle", "one_shot", "empty_clusters"]


@dataclass(frozen=True)
class RoundRecord:
    """One round as the coordinator saw it: the center shift, who answered and, where the
    algorithm reports it, the pooled objective of the centers sent out that round."""

    round: int
    shift: float
    responders: tuple[str, ...]
    objective: float | None = None


@dataclass(frozen=True)
class FederatedResult:
    """Global centers of one federated run and its round history.

    ``stop_reason`` is ``"converged"`` (shift below eps), ``"max_rounds"``, ``"cycle"``
    (the run revisited an earlier state and stopped with the better one; see ``notes``) or
    ``"one_shot"`` (single-round algorithms such as k-FED) or ``"empty_clusters"`` (the
    points could not fill K clusters: ``centers`` has fewer rows, each with support).

    ``contributors[k]``: how many participants stand behind center k — for the
    centers-based algorithms (FedFCM's k-means averaging, federated k-means) the number whose
    local centers are nearest to it, a sum of 0/1 indicators; for exact FCM every responding
    participant (each row has a membership in every cluster); None where the algorithm does
    not count them (federated averaging, k-FED: they send their local centers anyway).
    """

    centers: NDArray[np.float64]
    n_rounds: int
    stop_reason: StopReason
    history: tuple[RoundRecord, ...] = ()
    notes: tuple[str, ...] = field(default=())
    contributors: NDArray[np.float64] | None = None

    @property
    def converged(self) -> bool:
        return self.stop_reason in ("converged", "one_shot")


@dataclass(frozen=True)
class RunOptions:
    """What the sweep hands a sweep algorithm's procedure for one run of one K
    (``protocol.algorithms``): the run's random stream, the job's FCM and stopping
    parameters, the global centers the run starts from (the job's ``init``, or the sweep's
    draw for the fuzzy algorithms; None: the driver's own seeding; only for the algorithms
    that take it, ``takes_init``) and whether they are the analyst's (``init_given``: the
    drivers then start every step of round 1 from them), the round observer, the
    summation every sum goes through and the algorithm's own parameters (its registered
    ``params`` model, from the job's block: ``JobCreate.algorithm_params``; None: it has
    none)."""

    rng: np.random.Generator
    summation: Summation
    m: float = 2.0
    eps: float = 1e-3
    max_rounds: int = 100
    gamma: float = 1.0
    init: NDArray[np.float64] | None = None
    init_given: bool = False
    on_round: Callable[[RoundRecord], None] | None = None
    params: BaseModel | None = None


#: Observer of a running job: (stage, current K or None, the round just finished or None).
ProgressCallback = Callable[[str, "int | None", "RoundRecord | None"], None]
