"""Driver of FedFCM (Stallmann & Wilbik 2022, §2.2.1): local FCM to convergence, then combine.

:func:`run_fedfcm`: each round broadcasts the global centers; every participant runs a complete
local FCM from them (``protocol.maths.fedfcm.participant_local_fcm``) and the coordinator
combines the local centers by k-means averaging (``aggregation="kmeans"``, the paper's method:
:func:`protocol.maths.center_kmeans.center_kmeans` over sums of the held centers, any
protection) or support-weighted averaging per cluster index (``"average"``, the paper's
baseline). Without ``init`` the centers start uniform in [0, 1]^D, which presumes scaled data;
round 1's k-means averaging is seeded by k-means++ as the authors' code does, or, with
``warm_start`` (the analyst's ``init``), from the initial centers, which keeps their order.
Stops ("converged") when Σ_k ||c_k^t − c_k^{t−1}|| < ``eps``, at ``max_rounds``, with
"empty_clusters", or ("cycle", not in the paper) when the states repeat with a period P >= 2,
keeping the cycle's state of lowest pooled J_m = Σ_l J_m(X_l; C). A participant that refuses
is left out of that round and named in ``notes``; if all refuse, the run ends with that error.

Design notes: ``docs/fcm.md`` (§ The FedFCM driver: the cycle guard, the authors' choices).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal, Protocol

import numpy as np
from numpy.typing import ArrayLike

from fedclust.coordinator._rounds import Gatherer, RoundLog, expect, resolve_init
from fedclust.coordinator.center_kmeans import center_kmeans_of
from fedclust.coordinator.result import FederatedResult, RoundRecord, RunOptions, StopReason
from fedclust.coordinator.secure_sum import Summation
from fedclust.core.validation import (
    FloatArray,
    check_float,
    check_fuzzifier,
    check_int,
    rng_from,
)
from fedclust.protocol.maths.fedfcm import combine_federated_average
from fedclust.protocol.wire import messages as msg

__all__ = ["FedFCMParticipant", "run_fedfcm"]

Aggregation = Literal["kmeans", "average"]


class FedFCMParticipant(Protocol):
    """What the driver needs from a participant (``participant.local.LocalParticipant``)."""

    name: str

    @property
    def n_features(self) -> int:
        """The number of columns (public schema), used to draw default initial centers."""
        ...

    def answer(self, spec: msg.TaskSpec) -> msg.Reply:
        """The reply to a ``local_fcm`` task (local FCM from the centers to local
        convergence, answered: federated averaging) or a ``hold_local_fcm`` task (the same,
        the local centers kept at the participant: k-means averaging, whose center sums of
        ``protocol.maths.center_kmeans`` follow)."""
        ...


def _distance(a: FloatArray, b: FloatArray) -> float:
    """Σ_k ||a_k - b_k||, the shift between two center sets with the same cluster order."""
    return float(np.linalg.norm(a - b, axis=1).sum())


def _cycle_period(states: Sequence[FloatArray], tol: float) -> int | None:
    """The smallest period P >= 2 with which the last P states repeat the P before them.

    States t and t - P must agree within ``tol`` (Σ_k ||·||) for all of the last P states t,
    so one revisit alone (e.g. a damped oscillation passing near an old state) is not enough.
    """
    n = len(states)
    for period in range(2, n // 2 + 1):
        if all(
            _distance(states[n - 1 - j], states[n - 1 - j - period]) < tol
            for j in range(period)
        ):
            return period
    return None


def run_fedfcm(
    participants: Sequence[FedFCMParticipant],
    k: int,
    *,
    aggregation: Aggregation = "kmeans",
    m: float = 2.0,
    eps: float = 1e-3,
    max_rounds: int = 100,
    local_tol: float = 1e-4,
    local_max_iter: int = 1000,
    init: ArrayLike | None = None,
    warm_start: bool = False,
    seed: int | np.random.Generator | None = None,
    on_round: Callable[[RoundRecord], None] | None = None,
    summation: Summation | None = None,
) -> FederatedResult:
    """Run FedFCM over ``participants`` (Stallmann & Wilbik 2022, §2.2.1).

    Args:
        participants: the federation; each answers ``local_fcm``.
        k: number of clusters K.
        aggregation: ``"kmeans"`` (k-means averaging) or ``"average"`` (federated averaging).
        m: fuzzifier, > 1.
        eps: stop when Σ_k ||c_k^t - c_k^{t-1}|| < eps; also the cycle guard's tolerance.
        max_rounds: the most rounds.
        local_tol: local FCM stops when ||U_t - U_{t-1}||_F < local_tol.
        local_max_iter: the most local center updates per round.
        init: (K, D) initial centers; None draws them uniformly in [0, 1]^D.
        warm_start: round 1's k-means averaging starts from ``init`` (else k-means++).
        seed: seed or Generator for the initial centers.
        summation: how the k-means averaging's sums are added (None: in the clear; see
            the module docstring); federated averaging sends local centers and takes none.

    Returns:
        FederatedResult with one RoundRecord per round; stop_reason "converged",
        "max_rounds", "cycle" or "empty_clusters" (see the module docstring).
    """
    owner = "run_fedfcm"
    if len(participants) == 0:
        raise ValueError(f"participants of {owner} must be a non-empty sequence; got none.")
    if aggregation not in ("kmeans", "average"):
        raise ValueError(
            f"The 'aggregation' parameter of {owner} must be 'kmeans' or 'average'. "
            f"Got {aggregation!r} instead."
        )
    if summation is not None and summation.protected and aggregation != "kmeans":
        raise ValueError(
            "federated averaging sends every local center by design; only k-means averaging "
            "runs with protected sums."
        )
    k = check_int(k, name="k", owner=owner, low=1)
    m = check_fuzzifier(m, owner=owner)
    eps = check_float(eps, name="eps", owner=owner, low=0.0)
    max_rounds = check_int(max_rounds, name="max_rounds", owner=owner, low=1)
    local_tol = check_float(local_tol, name="local_tol", owner=owner, low=0.0)
    local_max_iter = check_int(local_max_iter, name="local_max_iter", owner=owner, low=1)
    n_features = participants[0].n_features
    rng = rng_from(seed)

    centers = resolve_init(init, k, n_features, rng)

    states: list[FloatArray] = [centers]  # states[t] = centers broadcast in round t + 1
    objectives: list[float] = []  # objectives[t] = pooled J_m of states[t]
    support: list[FloatArray | None] = [None]  # support[t] = contributors behind states[t]
    new_support: FloatArray | None = None
    log = RoundLog(on_round)
    gatherer = Gatherer()
    notes = gatherer.notes
    stop: StopReason = "max_rounds"
    cycle_tol = max(eps, float(np.finfo(np.float64).tiny))
    for round_number in range(1, max_rounds + 1):
        wire_centers = msg.WireArray.of(centers)
        if aggregation == "kmeans":
            hold = msg.HoldLocalFcmTask(
                centers=wire_centers, m=m, tol=local_tol, max_iter=local_max_iter
            )
            _, names = gatherer.gather_replies(
                round_number, participants, lambda _, p: hold,  # noqa: B023
                expect(hold, msg.AckReply),
            )
            found, holders = center_kmeans_of(
                [p for p in participants if p.name in names], summation, k, n_features,
                init=None if round_number == 1 and not warm_start else centers, seed=rng,
                weight_bound=float(k),
            )
            names = tuple(p.name for p in holders)
            objectives.append(found.objective)
            new_centers, new_support = found.centers, found.contributors
            if found.empty:
                log.add(
                    RoundRecord(
                        round=round_number, shift=float("inf"), responders=names,
                        objective=objectives[-1],
                    )
                )
                notes.append(
                    f"stopped: the participants' local centers fill only {k - found.empty} "
                    f"of K={k} clusters (fewer distinct local centers than K); the "
                    f"{k - found.empty} centers with support are reported."
                )
                centers, stop = new_centers, "empty_clusters"
                support.append(new_support)
                break
        else:
            ask = msg.LocalFcmTask(
                centers=wire_centers, m=m, tol=local_tol, max_iter=local_max_iter
            )
            replies, names = gatherer.gather_replies(
                round_number, participants, lambda _, p: ask,  # noqa: B023
                expect(ask, msg.LocalFcmReply),
            )
            answers = [reply.to_result() for reply in replies]
            objectives.append(float(sum(a.global_objective for a in answers)))
            new_centers = combine_federated_average(answers, centers)
        shift = _distance(new_centers, centers)
        log.add(
            RoundRecord(
                round=round_number, shift=shift, responders=names, objective=objectives[-1]
            )
        )
        if shift < eps:
            centers = new_centers
            support.append(new_support)
            stop = "converged"
            break

        period = _cycle_period([*states, new_centers], cycle_tol)
        if period is not None:
            first = len(states) - period  # the cycle's states are states[first:]
            best = min(range(first, len(states)), key=lambda t: objectives[t])
            centers = states[best]
            support.append(support[best])
            stop = "cycle"
            notes.append(
                f"stopped: cycle of period {period} detected at round {round_number}; kept the "
                f"state with the lowest pooled FCM objective J_m = {objectives[best]:.6g} "
                f"(the centers broadcast in round {best + 1})."
            )
            break
        centers = new_centers
        states.append(centers)
        support.append(new_support)

    return FederatedResult(
        centers=centers,
        n_rounds=len(log.records),
        stop_reason=stop,
        history=tuple(log.records),
        notes=tuple(notes),
        contributors=support[-1],
    )


def procedure_kmeans(
    participants: Sequence[FedFCMParticipant], k: int, options: RunOptions
) -> FederatedResult:
    """The registered procedure of "fedfcm" (``protocol.algorithms.fedfcm``)."""
    return _procedure(participants, k, options, "kmeans")


def procedure_average(
    participants: Sequence[FedFCMParticipant], k: int, options: RunOptions
) -> FederatedResult:
    """The registered procedure of "fedfcm-avg" (``protocol.algorithms.fedfcm``)."""
    return _procedure(participants, k, options, "average")


def _procedure(
    participants: Sequence[FedFCMParticipant], k: int, options: RunOptions,
    aggregation: Aggregation,
) -> FederatedResult:
    o = options
    return run_fedfcm(
        participants, k, aggregation=aggregation, m=o.m, eps=o.eps, max_rounds=o.max_rounds,
        init=o.init, warm_start=o.init_given, seed=o.rng, on_round=o.on_round,
        summation=o.summation,
    )
