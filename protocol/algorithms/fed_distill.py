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
        params_path="fedclust.protocol.algorithms.fed_distill_params:DistillParams",
        params_required=True,
        tasks=frozenset(
            {"declare", "distill_train", "distill_counts", "distill_soft", "distill_step"}
        ),
        procedure_path="fedclust.coordinator.distill_job:procedure",
        # "code": DistillParams' defaults, the authors' code (lr 1e-3, batch 32 local / 64
        # distillation, <= 30 local epochs with early stopping, 30 distillation epochs; the
        # simulator uses 50 on MNIST). "paper": the hyper-parameters Yang & Tae (2023) state
        # for their experiments (as quoted in issue 22): Adam lr 1e-4, batch 128, 25 local
        # and 40 distillation epochs (early stopping, patience 3, kept: the paper is silent).
        presets={
            "code": {},
            "paper": {"learning_rate": 1e-4, "batch_size": 128, "local_epochs": 25,
                      "epochs": 40},
        },
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
