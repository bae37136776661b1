"""k-FED, the one-shot federated k-means baseline of Dennis, Li & Smith (2021), Algs. 1-2:
every participant's local k-means centers, clustered once by the server
(``protocol.maths.kfed``): "kfed", our stronger variant, and "kfed-dennis", as the paper
writes it (SVD projection and k-means++ seeding locally, one Lloyd step on the server; the
module docstring of ``protocol.maths.kfed`` lists the differences)."""

from __future__ import annotations

from fedclust.protocol.algorithms import SWEEP_STATISTICS, SWEEP_TASKS, AlgorithmSpec

SPECS = (
    AlgorithmSpec(
        name="kfed",
        title="k-FED one-shot federated k-means (Dennis, Li & Smith 2021)",
        family="sweep",
        tasks=SWEEP_TASKS | {"kfed_centers"},
        statistics=SWEEP_STATISTICS,
        procedure_path="fedclust.coordinator.federated_kmeans:procedure_kfed",
        plain_notes=(
            "kfed: each participant's local k-means centers are revealed to the coordinator in "
            "the clear."
        ),
        protected_notes=None,
        local_clustering=True,
    ),
    AlgorithmSpec(
        name="kfed-dennis",
        title="k-FED as Dennis, Li & Smith (2021) write it (SVD, k-means++, one Lloyd step)",
        family="sweep",
        tasks=SWEEP_TASKS | {"kfed_dennis_centers"},
        statistics=SWEEP_STATISTICS,
        procedure_path="fedclust.coordinator.federated_kmeans:procedure_kfed_dennis",
        plain_notes=(
            "kfed-dennis: each participant's local k-means centers are revealed to the "
            "coordinator in the clear."
        ),
        protected_notes=None,
        local_clustering=True,
    ),
)
