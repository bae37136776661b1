"""The parameters of a "fedcref" job (``protocol.algorithms.fedcref``'s ``params_path``): a
module of its own, imported when first used, so that the registry imports no pydantic (the
command line's first line comes before it)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from fedclust.core.models import Flag, Strict

#: Encoder widths (the decoder mirrors them): 1 to 8 layers.
Hidden = Annotated[
    tuple[Annotated[int, Field(ge=1, le=100_000)], ...], Field(min_length=1, max_length=8)
]


class FedCRefParams(Strict):
    """The parameters of a "fedcref" job (Nardi, Valerio & Passarella; coordinator.fedcref).

    Every participant's rows must be scaled to [0, 1] (the autoencoders' sigmoid output).
    """

    hidden: Annotated[Hidden, Flag(metavar="H")] = Field(
        default=(100, 64, 32), description="Encoder widths; the decoder mirrors them."
    )
    initial: Literal["kmeans", "labels"] = Field(
        default="kmeans",
        description="Initial local clustering: 'kmeans' (k-means on an autoencoder code) or "
        "'labels' (each participant's own [data] label_column).",
    )
    local_k: int | None = Field(
        default=None, ge=1, le=1000,
        description="K_i of every participant's k-means; absent: chosen by the silhouette.",
    )
    k_max: int = Field(default=6, ge=2, le=1000, description="Largest K_i the silhouette tries.")
    epochs: Annotated[int, Flag(aliases=("--local-epochs",))] = Field(
        default=20, ge=0, le=10_000,
        description="Local training epochs (early stopping); the paper's 20 (clusters of 500 "
        "images); clusters of tens of rows need ~60.",
    )
    alpha: float = Field(default=75.0, ge=0.0, le=100.0, description="Eq. 2 percentile.")
    theta: float = Field(
        default=0.2, ge=0.0, le=1.0,
        description="Eq. 2 threshold; scores fall as clusters grow, so clusters of tens of "
        "rows need a larger one (~0.55).",
    )
    tau: float = Field(
        default=0.8, ge=0.0, le=1.0,
        description="A participant freezes when consecutive assignments agree >= tau.",
    )
    fedavg_rounds: int = Field(default=15, ge=0, le=10_000, description="FedAvg rounds per group.")
    fedavg_epochs: int = Field(default=2, ge=1, le=10_000, description="Epochs per FedAvg round.")
    max_iterations: int = Field(default=10, ge=1, le=1000, description="The most iterations.")
    refine_with: Literal["groups", "all"] = Field(
        default="all",
        description="The federated models a participant refines with: every group's (the "
        "authors' code) or only its own groups'.",
    )
