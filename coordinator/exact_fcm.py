"""Driver of the exact federated FCM of Corcuera Bárcena et al. (2021), Alg. 1.

Each round the coordinator samples a fraction ``gamma`` of the participants, sends them the
current centers, collects U_c = Σμ^m and WS_c = Σμ^m·x (``protocol.maths.exact_fcm``) and sets
c_i = Σ WS_c[i] / Σ U_c[i]. With ``gamma = 1`` the run equals central FCM on the union of the
rows from the same initial centers (§4.1).

Initial centers: the coordinator never sees data, so without ``init`` it draws them uniformly
in [0, 1]^D as the authors do; this presumes data scaled to [0, 1]. Callers should scale or
standardise first (federated standardisation), or pass explicit ``init`` centers.

Stopping: ||C_t - C_{t-1}||_F < ``eps`` ("converged") or ``max_rounds`` rounds ("max_rounds").
The authors' code runs a fixed number of rounds (default 10; its epsilon test is commented
out); ``eps=0`` reproduces that.

A participant that refuses (``RefusedError``, e.g. the N <= C(F+1)/F privacy rule) is left
out of that round and named in ``notes``; the result is then FCM on the others' rows. A round
in which every sampled participant refuses ends the run with that error.

With a ``summation`` (``coordinator.secure_sum``) the coordinator receives only ΣU_c and
ΣWS_c over the round's participants, never one participant's sums; a refusal is then a
dropout whose masks the survivors remove.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np
from numpy.typing import ArrayLike

from fedclust.coordinator._rounds import iterate_centers, resolve_init
from fedclust.coordinator.result import FederatedResult, RoundRecord, RunOptions
from fedclust.coordinator.secure_sum import PlainSummation, Summation
from fedclust.core.validation import FloatArray, check_float, check_fuzzifier, check_int, rng_from
from fedclust.protocol.maths.exact_fcm import FCMSums, combine_sums
from fedclust.protocol.wire import messages as msg

__all__ = ["ExactFCMParticipant", "run_exact_fcm", "summed_fcm_sums"]


class ExactFCMParticipant(Protocol):
    """What the driver needs from a participant (``participant.local.LocalParticipant``)."""

    name: str

    @property
    def n_features(self) -> int:
        """The number of columns (public schema), used to draw default initial centers."""
        ...

    def answer(self, spec: msg.TaskSpec) -> msg.Reply:
        """The reply to a task, here the ``fcm_sums`` statistic: U_c and WS_c of its rows
        (Alg. 2)."""
        ...


def _sample(n: int, gamma: float, rng: np.random.Generator) -> list[int]:
    """Indices of a random fraction gamma of n participants (at least one), in order."""
    if gamma >= 1.0:
        return list(range(n))
    size = max(1, int(np.floor(gamma * n + 1e-9)))
    return sorted(int(i) for i in rng.choice(n, size=size, replace=False))


def summed_fcm_sums(
    summation: Summation, participants: Sequence[Any], centers: FloatArray, *, m: float
) -> tuple[FCMSums, tuple[str, ...]]:
    """Σ over ``participants`` of the ``fcm_sums`` statistic, U_c and WS_c for ``centers``
    (Alg. 2), and who gave them."""
    task = msg.StatisticTask.of("fcm_sums", centers, m=m)
    total, names = summation.sum(participants, task, msg.StatisticReply)
    fields = msg.summands(total)
    return FCMSums(u_sum=fields["u_sum"], weighted_sum=fields["weighted_sum"]), names


def run_exact_fcm(
    participants: Sequence[ExactFCMParticipant],
    k: int,
    *,
    m: float = 2.0,
    eps: float = 1e-3,
    max_rounds: int = 100,
    gamma: float = 1.0,
    init: ArrayLike | None = None,
    seed: int | np.random.Generator | None = None,
    on_round: Callable[[RoundRecord], None] | None = None,
    summation: Summation | None = None,
) -> FederatedResult:
    """Run exact federated FCM (Alg. 1) over ``participants``.

    Args:
        participants: the federation; each answers the ``fcm_sums`` statistic.
        k: number of clusters K.
        m: fuzzifier, > 1.
        eps: stop when the Frobenius norm of the center change is below eps (0: fixed rounds).
        max_rounds: the most rounds.
        gamma: fraction of participants asked each round, in (0, 1]; at least one is asked.
        init: (K, D) initial centers; None draws them uniformly in [0, 1]^D (data must be
            scaled to [0, 1] for that to make sense).
        seed: seed or Generator for the initial centers and the participant sampling.
        summation: how each round's U_c and WS_c are summed (``coordinator.secure_sum``);
            None adds them in the clear (a :class:`PlainSummation`).

    Returns:
        FederatedResult with one RoundRecord per round (shift, names of the responders).
    """
    owner = "run_exact_fcm"
    if len(participants) == 0:
        raise ValueError(f"participants of {owner} must be a non-empty sequence; got none.")
    k = check_int(k, name="k", owner=owner, low=1)
    m = check_fuzzifier(m, owner=owner)
    eps = check_float(eps, name="eps", owner=owner, low=0.0)
    max_rounds = check_int(max_rounds, name="max_rounds", owner=owner, low=1)
    gamma = check_float(gamma, name="gamma", owner=owner, low=0.0, high=1.0, low_open=True)
    n_features = participants[0].n_features
    rng = rng_from(seed)

    centers = resolve_init(init, k, n_features, rng)

    summed = summation if summation is not None else PlainSummation()

    def step(_: int, C: FloatArray) -> tuple[FloatArray, tuple[str, ...]]:
        sampled = [participants[i] for i in _sample(len(participants), gamma, rng)]
        sums, names = summed_fcm_sums(summed, sampled, C, m=m)
        return combine_sums([sums], C), names

    result = iterate_centers(centers, step, max_rounds=max_rounds, eps=eps, on_round=on_round)
    return dataclasses.replace(
        result, contributors=np.full(k, float(len(result.history[-1].responders)))
    )


def procedure(
    participants: Sequence[ExactFCMParticipant], k: int, options: RunOptions
) -> FederatedResult:
    """The registered procedure of "ffcm" (``protocol.algorithms.ffcm``)."""
    o = options
    return run_exact_fcm(
        participants, k, m=o.m, eps=o.eps, max_rounds=o.max_rounds, gamma=o.gamma,
        init=o.init, seed=o.rng, on_round=o.on_round, summation=o.summation,
    )
