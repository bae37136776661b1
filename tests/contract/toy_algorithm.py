"""A toy algorithm written as a newcomer would add one: this module and nothing else.

"toy-damped-fcm" is exact federated FCM with a damped combine step: each round the
participants' summed Σu^m and Σu^m·x give the FCM target centers T (Corcuera Bárcena et al.,
Alg. 1), and the centers move half way, C ← C + (T − C)/2. It asks an existing statistic
(``fcm_sums``) and adds a new combine step; every sum goes through the job's summation
(plain, masked, Paillier), which also leaves out a participant that stops answering.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fedclust.coordinator._rounds import iterate_centers, resolve_init
from fedclust.coordinator.exact_fcm import summed_fcm_sums
from fedclust.coordinator.result import FederatedResult, RunOptions
from fedclust.core.validation import FloatArray
from fedclust.protocol.algorithms import SWEEP_STATISTICS, SWEEP_TASKS, AlgorithmSpec
from fedclust.protocol.maths.exact_fcm import combine_sums

#: The fraction of the way to the FCM target centers taken each round.
DAMPING = 0.5

SPEC = AlgorithmSpec(
    name="toy-damped-fcm",
    title="Exact federated FCM with a damped combine step (a test's toy)",
    family="sweep",
    tasks=SWEEP_TASKS,
    statistics=SWEEP_STATISTICS | {"fcm_sums"},
    procedure_path=f"{__name__}:procedure",
    plain_notes=(
        "toy-damped-fcm: each participant's local sums Σu^m and Σu^m·x per cluster reach the "
        "coordinator in the clear, every round."
    ),
    protected_notes=(
        "toy-damped-fcm, protected: the coordinator learns only ΣU_c and ΣWS_c over each "
        "round's participants, hence the damped global centers."
    ),
    fuzzy=True,
)


def procedure(participants: Sequence[Any], k: int, options: RunOptions) -> FederatedResult:
    """Damped exact FCM for one K, the fraction :data:`DAMPING`."""
    return damped_fcm(participants, k, options, DAMPING)


def damped_fcm(
    participants: Sequence[Any], k: int, options: RunOptions, damping: float
) -> FederatedResult:
    """C ← C + damping·(T − C), T = ΣWS_c / ΣU_c, until the centers move less than eps."""
    o = options

    def step(_: int, C: FloatArray) -> tuple[FloatArray, tuple[str, ...]]:
        sums, names = summed_fcm_sums(o.summation, participants, C, m=o.m)
        return C + damping * (combine_sums([sums], C) - C), names

    init = resolve_init(o.init, k, participants[0].n_features, o.rng)
    return iterate_centers(init, step, max_rounds=o.max_rounds, eps=o.eps, on_round=o.on_round)
