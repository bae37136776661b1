"""FedFCM of Stallmann & Wilbik (2022, §2.2.1): local FCM at every participant, the server
merging the local centers by k-means over summed statistics ("fedfcm", k-means averaging,
``protocol.maths.center_kmeans``) or by averaging them in the clear ("fedfcm-avg")."""

from __future__ import annotations

from fedclust.protocol.algorithms import SWEEP_STATISTICS, SWEEP_TASKS, AlgorithmSpec

SPECS = (
    AlgorithmSpec(
        name="fedfcm",
        title="FedFCM with k-means averaging (Stallmann & Wilbik 2022)",
        family="sweep",
        tasks=SWEEP_TASKS | {"hold_local_fcm"},
        statistics=SWEEP_STATISTICS | {"center_sums", "center_scatter"},
        procedure_path="fedclust.coordinator.fedfcm:procedure_kmeans",
        plain_notes=(
            "fedfcm: local FCM centers stay with the participants, but each participant's own "
            "sums over them reach the coordinator in the clear, per k-means iteration: per "
            "global cluster Σ local centers, their number and a 0/1 indicator, the inertia, "
            "its J_m, and to split or swap clusters its scatter matrices and removal costs; a "
            "global cluster holding one local center of a participant reveals that center "
            "(S_k / W_k)."
        ),
        protected_notes=(
            "fedfcm, protected: local FCM centers stay with the participants; the coordinator "
            "learns per k-means iteration only the sums over all participants of the local "
            "centers nearest each global center, their number, the number of participants "
            "holding them, the inertia and the pooled J_m, and to split or swap clusters the "
            "summed scatter matrices and removal costs."
        ),
        fuzzy=True,
        local_clustering=True,
        counts_contributors=True,
        takes_init=True,
    ),
    AlgorithmSpec(
        name="fedfcm-avg",
        title="FedFCM with the local centers averaged (Stallmann & Wilbik 2022)",
        family="sweep",
        tasks=SWEEP_TASKS | {"local_fcm"},
        statistics=SWEEP_STATISTICS,
        procedure_path="fedclust.coordinator.fedfcm:procedure_average",
        plain_notes=(
            "fedfcm-avg: each participant's local FCM centers are revealed to the coordinator "
            "in the clear, with their membership weights Σu (which sum to the participant's "
            "row count)."
        ),
        protected_notes=None,
        fuzzy=True,
        local_clustering=True,
        takes_init=True,
    ),
)
