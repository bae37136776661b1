"""FedCRef, Federated Cluster-Wise Refinement (Nardi, Valerio & Passarella): per-cluster
autoencoders, association by reconstruction error, groups as connected components, FedAvg per
group and local refinement (``protocol.maths.fedcref``)."""

from __future__ import annotations

from fedclust.protocol.algorithms import AlgorithmSpec

SPECS = (
    AlgorithmSpec(
        name="fedcref",
        title="FedCRef, Federated Cluster-Wise Refinement (Nardi, Valerio & Passarella)",
        family="model",
        params_block="fedcref",
        params_path="fedclust.protocol.algorithms.fedcref_params:FedCRefParams",
        tasks=frozenset(
            {"declare", "fedcref_init", "fedcref_train", "fedcref_models", "fedcref_scores",
             "fedcref_fedavg", "fedcref_refine"}
        ),
        procedure_path="fedclust.coordinator.fedcref_job:procedure",
        # "paper": the values the paper states for its MNIST experiments (Nardi et al.,
        # Tables 3-4; docs/fedcref.md § Presets): 20 local epochs (early stopping, patience
        # 4), eq. 2 with alpha = 75 and theta = 0.2, FedAvg 15 rounds per group, tau = 0.8.
        # "code": where the authors' code differs and FedCRefParams has a field: eq. 2
        # threshold 0.25, freeze at agreement 0.85 (theirs: strictly above). Their FedAvg
        # trains 2 epochs in round 1 then 7; fedavg_epochs is one value for every round, so
        # it stays 2 (no field for the schedule).
        presets={
            "code": {"epochs": 20, "alpha": 75.0, "theta": 0.25, "tau": 0.85,
                     "fedavg_rounds": 15},
            "paper": {"epochs": 20, "alpha": 75.0, "theta": 0.2, "tau": 0.8, "fedavg_rounds": 15},
        },
        plain_notes=(
            "fedcref (Federated Cluster-Wise Refinement): each participant's number of local "
            "clusters, one autoencoder per local cluster (shared with the coordinator and the "
            "other participants: the association needs them, as in the paper; a model trained "
            "on a cluster can reveal features of its rows), its association scores, its FedAvg "
            "contributions n·θ and n per group, and the agreement of its consecutive "
            "assignments reach the coordinator in the clear."
        ),
        protected_notes=(
            "fedcref, protected: each participant's number of local clusters, its local "
            "autoencoders (shared by design: the association needs them; a model can reveal "
            "features of its cluster's rows), its association scores and its assignment "
            "agreement reach the coordinator in the clear; its FedAvg contributions n·θ and n "
            "are summed masked within each group of at least 3 participants, so the "
            "coordinator learns only each such group's average model. A group of 2 "
            "participants is asked in the clear (see the result's notes and "
            "unprotected_groups)."
        ),
    ),
)
