"""Federated k-means of Garst & Reinders (2023, Alg. 1): local k-means at every participant,
the server's weighted k-means over the local means from summed statistics
(``protocol.maths.center_kmeans``), empty clusters dropped, no cluster under p points sent."""

from __future__ import annotations

from fedclust.protocol.algorithms import SWEEP_STATISTICS, SWEEP_TASKS, AlgorithmSpec

SPECS = (
    AlgorithmSpec(
        name="fkm",
        title="Federated k-means (Garst & Reinders 2023)",
        family="sweep",
        tasks=SWEEP_TASKS | {"hold_kmeans_init", "hold_kmeans_step"},
        statistics=SWEEP_STATISTICS | {"center_sums", "center_scatter"},
        procedure_path="fedclust.coordinator.federated_kmeans:procedure",
        plain_notes=(
            "fkm (federated k-means): local means and counts stay with the participants, but "
            "each participant's own sums over them reach the coordinator in the clear, per "
            "k-means iteration: per global cluster Σ count·mean, Σ count (the counts sum to its "
            "row count) and a 0/1 indicator, the inertia, and its scatter matrices and removal "
            "costs; a global cluster holding one local mean reveals that mean (S_k / W_k)."
        ),
        protected_notes=(
            "fkm (federated k-means), protected: local means and counts stay with the "
            "participants; the coordinator learns per k-means iteration only the sums over all "
            "participants of count·mean and count per global cluster, the number of "
            "participants holding them and the inertia, and to split or swap clusters the "
            "summed scatter matrices and removal costs."
        ),
        local_clustering=True,
        counts_contributors=True,
        takes_init=True,
    ),
)
