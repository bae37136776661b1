"""Exact federated fuzzy c-means (Corcuera Bárcena, Marcelloni, Renda, Bechini & Ducange
2021): each round the participants' Σu^m and Σu^m·x per cluster, summed, give the centers of
central FCM on the pooled data (``protocol.maths.exact_fcm``)."""

from __future__ import annotations

from fedclust.protocol.algorithms import SWEEP_STATISTICS, SWEEP_TASKS, AlgorithmSpec

SPECS = (
    AlgorithmSpec(
        name="ffcm",
        title="Exact federated FCM by local sums (Corcuera Bárcena et al. 2021)",
        family="sweep",
        tasks=SWEEP_TASKS,
        statistics=SWEEP_STATISTICS | {"fcm_sums"},
        procedure_path="fedclust.coordinator.exact_fcm:procedure",
        plain_notes=(
            "ffcm (exact federated FCM): each participant's local sums Σu^m and Σu^m·x per "
            "cluster reach the coordinator in the clear, every round."
        ),
        protected_notes=(
            "ffcm (exact federated FCM), protected: the coordinator learns only ΣU_c and ΣWS_c "
            "over each round's participants, hence the global centers."
        ),
        fuzzy=True,
        fcm_rule=True,
        counts_contributors=True,
        takes_init=True,
    ),
)
