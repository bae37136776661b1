"""Clustered federated distillation of Yang & Tae (2023): participants grouped by the label
counts their models predict on a public set (agglomerative clustering), then distillation
per group (``protocol.maths.distillation``)."""

from __future__ import annotations

from fedclust.protocol.algorithms import AlgorithmSpec

SPECS = (
    AlgorithmSpec(
        name="fed-distill",
        title="Clustered federated distillation (Yang & Tae 2023)",
        family="model",
        params_block="distill",
        tasks=frozenset(
            {"declare", "distill_train", "distill_counts", "distill_soft", "distill_step"}
        ),
        procedure_path="fedclust.coordinator.distill_job:procedure",
        plain_notes=(
            "fed-distill (clustered federated distillation): each participant's label-count "
            "vector on the public set is revealed to the coordinator in the clear (the "
            "grouping needs every one), and so are its softmax probabilities on the public set."
        ),
        protected_notes=(
            "fed-distill, protected: each participant's label-count vector on the public set "
            "is revealed to the coordinator in the clear (the grouping needs every one); its "
            "softmax probabilities on the public set are summed masked within each group of at "
            "least 3 members, so the coordinator learns only each such group's teacher. A "
            "group of 1 or 2 members is asked in the clear (see the result's notes and "
            "unprotected_groups)."
        ),
    ),
)
