"""Round loops of federated k-means (Garst & Reinders 2023, Alg. 1) and of k-FED (Dennis et al.).

``run_federated_kmeans``: round 1 asks every participant to seed locally
(``hold_kmeans_init``, a distinct seed each), later rounds send the global centers and ask for
the local step (``hold_kmeans_step``); with ``init`` (the analyst's global centers) every
round, the first included, is a local step from the global centers. The server's weighted
k-means over the held local means is :func:`protocol.maths.center_kmeans.center_kmeans`,
asking only for sums (``coordinator.center_kmeans.FederatedCenters``: plain with
``summation=None``, masked or encrypted otherwise), seeded from sums in round 1 (from
``init`` where given) and warm-started after. It stops when the
matched global centers move less than ``eps`` (Frobenius norm), after ``max_rounds``, or with
"empty_clusters" when the local means cannot fill K clusters.
``run_kfed``: one round of local k-means centers (``kfed_centers`` tasks, k_local = k by
default) and the k-FED server step; with ``faithful``, k-FED as Dennis et al. write it
(``kfed_dennis_centers``, ``protocol.maths.kfed``'s module docstring says how they differ).
Only the participants' replies reach the coordinator.

Design notes: ``docs/center-kmeans.md`` (§ Round loops of federated k-means and k-FED).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np
from numpy.typing import ArrayLike

from fedclust.coordinator._rounds import Gatherer, RoundLog, expect, resolve_init
from fedclust.coordinator.center_kmeans import center_kmeans_of
from fedclust.coordinator.result import FederatedResult, RoundRecord, RunOptions, StopReason
from fedclust.coordinator.secure_sum import Summation
from fedclust.core.validation import FloatArray, check_float, check_int, rng_from
from fedclust.protocol.maths.federated_kmeans import match_order
from fedclust.protocol.maths.kfed import combine_kfed, combine_kfed_dennis
from fedclust.protocol.wire import messages as msg

__all__ = ["FKMParticipant", "KFedParticipant", "run_federated_kmeans", "run_kfed"]

_SEED_BOUND = 2**31 - 1


class FKMParticipant(Protocol):
    """What federated k-means asks of a participant (and ``center_sums``/``center_scatter``
    or the stages of secure sums, see ``coordinator.center_kmeans``)."""

    name: str

    @property
    def n_features(self) -> int: ...

    def answer(self, spec: msg.TaskSpec) -> msg.Reply:
        """The acknowledgement of a ``hold_kmeans_init`` or ``hold_kmeans_step`` task (the
        participant keeps its local cluster means for the server k-means)."""
        ...


class KFedParticipant(Protocol):
    """What k-FED asks of a participant."""

    name: str

    def answer(self, spec: msg.TaskSpec) -> msg.Reply:
        """The local centers of a ``kfed_centers`` or ``kfed_dennis_centers`` task."""
        ...


def _participant_seeds(rng: np.random.Generator, n: int) -> list[int]:
    """One seed per participant, each from its own child stream of ``rng``."""
    return [int(child.integers(_SEED_BOUND)) for child in rng.spawn(n)]


def run_federated_kmeans(
    participants: Sequence[FKMParticipant],
    k: int,
    *,
    max_rounds: int = 20,
    eps: float = 1e-3,
    init: ArrayLike | None = None,
    seed: int | np.random.Generator | None = None,
    on_round: Callable[[RoundRecord], None] | None = None,
    summation: Summation | None = None,
) -> FederatedResult:
    """Federated k-means (Garst & Reinders 2023, Alg. 1).

    Args:
        participants: the organisations taking part (at least one).
        k: the number of global clusters.
        max_rounds: the most rounds, round 1 (initialisation) included.
        eps: stop when the matched center shift ||C_t - C_{t-1}||_F < eps.
        init: (K, D) global centers to start from: round 1 is then a local step from them
            and the server's k-means starts from them; None: local k-means++ seeding.
        seed: the participants' local seeding and the server's perturbations.
        summation: how the server k-means' sums are added (None: in the clear).

    Returns:
        The global centers and the round history (round 1 has shift = inf without
        ``init``).
    """
    owner = "run_federated_kmeans"
    k = check_int(k, name="k", owner=owner, low=1)
    max_rounds = check_int(max_rounds, name="max_rounds", owner=owner, low=1)
    eps = check_float(eps, name="eps", owner=owner, low=0.0)
    if len(participants) == 0:
        raise ValueError("run_federated_kmeans needs at least one participant; got none.")
    rng = rng_from(seed)
    seeds = _participant_seeds(rng, len(participants))
    n_features = participants[0].n_features
    gatherer = Gatherer()
    log = RoundLog(on_round)
    centers: FloatArray | None = None
    if init is not None:
        centers = resolve_init(init, k, n_features, rng)
    contributors: FloatArray | None = None
    stop: StopReason = "max_rounds"
    for t in range(1, max_rounds + 1):
        if centers is None:
            inits = [msg.HoldKmeansInitTask(k=k, seed=seed) for seed in seeds]
            _, names = gatherer.gather_replies(
                t, participants, lambda i, p: inits[i],  # noqa: B023
                expect(inits[0], msg.AckReply),
            )
        else:
            step = msg.HoldKmeansStepTask(centers=msg.WireArray.of(centers))
            _, names = gatherer.gather_replies(
                t, participants, lambda _, p: step, expect(step, msg.AckReply)  # noqa: B023
            )
        found, holders = center_kmeans_of(
            [p for p in participants if p.name in names], summation, k, n_features,
            init=centers, seed=rng,
        )
        names = tuple(p.name for p in holders)
        contributors = found.contributors
        if found.empty:
            log.add(RoundRecord(round=t, shift=float("inf"), responders=names))
            gatherer.notes.append(
                f"stopped: the participants' local means fill only {k - found.empty} of K={k} "
                f"clusters (fewer distinct local means than K); the {k - found.empty} "
                "centers with support are reported."
            )
            centers, stop = found.centers, "empty_clusters"
            break
        if centers is None:
            shift = float("inf")
            centers = found.centers
        else:
            order = match_order(found.centers, centers)
            shift = float(np.linalg.norm(found.centers[order] - centers))
            centers, contributors = found.centers[order], contributors[order]
        log.add(RoundRecord(round=t, shift=shift, responders=names))
        if shift < eps:
            stop = "converged"
            break
    assert centers is not None  # max_rounds >= 1
    return FederatedResult(
        centers, len(log.records), stop, tuple(log.records), tuple(gatherer.notes),
        contributors,
    )


def run_kfed(
    participants: Sequence[KFedParticipant],
    k: int,
    *,
    k_local: int | None = None,
    seed: int | np.random.Generator | None = None,
    on_round: Callable[[RoundRecord], None] | None = None,
    faithful: bool = False,
) -> FederatedResult:
    """One-shot k-FED (Dennis et al. 2021): local centers once, then the server step.

    Args:
        participants: the organisations taking part (at least one).
        k: the number of global clusters.
        k_local: local clusters per participant; default k.
        seed: algorithmic randomness (local seeding, choice of the starting participant).
        faithful: Dennis et al.'s local and server steps ("kfed-dennis") instead of ours
            ("kfed").

    Returns:
        The global centers; ``stop_reason`` is ``"one_shot"``.
    """
    owner = "run_kfed"
    k = check_int(k, name="k", owner=owner, low=1)
    k_local = k if k_local is None else check_int(k_local, name="k_local", owner=owner, low=1)
    if len(participants) == 0:
        raise ValueError("run_kfed needs at least one participant; got none.")
    rng = rng_from(seed)
    seeds = _participant_seeds(rng, len(participants))
    gatherer = Gatherer()
    task = msg.KfedDennisCentersTask if faithful else msg.KfedCentersTask
    asks = [task(k_local=k_local, seed=s) for s in seeds]
    replies, names = gatherer.gather_replies(
        1, participants, lambda i, _: asks[i], expect(asks[0], msg.KfedCentersReply)
    )
    local = [r.centers.to_numpy() for r in replies]
    combine = combine_kfed_dennis if faithful else combine_kfed
    centers = combine(local, k, seed=int(rng.integers(_SEED_BOUND)))
    log = RoundLog(on_round)
    log.add(RoundRecord(round=1, shift=0.0, responders=names))
    return FederatedResult(
        centers,
        1,
        "one_shot",
        tuple(log.records),
        (f"k-FED{' (Dennis et al.)' if faithful else ''} with k_local={k_local}",
         *gatherer.notes),
    )


def procedure(
    participants: Sequence[FKMParticipant], k: int, options: RunOptions
) -> FederatedResult:
    """The registered procedure of "fkm" (``protocol.algorithms.fkm``)."""
    o = options
    return run_federated_kmeans(
        participants, k, max_rounds=o.max_rounds, eps=o.eps, init=o.init, seed=o.rng,
        on_round=o.on_round, summation=o.summation,
    )


def procedure_kfed(
    participants: Sequence[KFedParticipant], k: int, options: RunOptions
) -> FederatedResult:
    """The registered procedure of "kfed" (``protocol.algorithms.kfed``): one shot, in the
    clear by design."""
    return run_kfed(participants, k, seed=options.rng, on_round=options.on_round)


def procedure_kfed_dennis(
    participants: Sequence[KFedParticipant], k: int, options: RunOptions
) -> FederatedResult:
    """The registered procedure of "kfed-dennis" (``protocol.algorithms.kfed``)."""
    return run_kfed(
        participants, k, seed=options.rng, on_round=options.on_round, faithful=True
    )
