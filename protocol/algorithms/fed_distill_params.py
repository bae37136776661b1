"""The parameters of a "fed-distill" job (``protocol.algorithms.fed_distill``'s
``params_path``): a module of its own, imported when first used, so that the registry
imports no pydantic (the command line's first line comes before it)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from fedclust.core.models import Flag, Strict, WireArray


class DistillParams(Strict):
    """The parameters of a "fed-distill" job (Yang & Tae 2023; coordinator.distillation)."""

    public: WireArray = Field(
        description="The public unlabelled set, float64 (n_public, n_features), scaled as the "
        "participants' rows; sent to every participant."
    )
    n_classes: int = Field(ge=2, le=10_000, description="Labels are 0..n_classes-1.")
    distance_threshold: float = Field(
        default=2.0, gt=0.0, description="Ward merge distance at which grouping stops."
    )
    temperature: float = Field(default=0.1, gt=0.0, le=1000.0, description="Distillation T.")
    epochs: Annotated[int, Flag("--distill-epochs")] = Field(
        default=30, ge=0, le=10_000, description="Distillation epochs."
    )
    local_epochs: int = Field(
        default=30, ge=1, le=10_000,
        description="Most local training epochs (early stopping, patience 3).",
    )
    learning_rate: float = Field(
        default=1e-3, gt=0.0, le=10.0, description="Adam's learning rate, local and distillation."
    )
    batch_size: int | None = Field(
        default=None, ge=1, le=100_000,
        description="Batch size of local training and distillation; absent: the authors' code's "
        "32 and 64.",
    )
    classifier: Literal["mlp", "cnn"] = Field(
        default="mlp", description="'cnn' needs square images (n_features a perfect square)."
    )
    mode: Literal["clustered", "global", "local"] = Field(
        default="clustered",
        description="'clustered' (the paper), 'global' (one teacher, FedDF-style) or "
        "'local' (no sharing).",
    )

    @model_validator(mode="after")
    def _public_shape(self) -> DistillParams:
        if self.public.dtype != "float64" or len(self.public.shape) != 2 or (
            self.public.shape[0] < 1 or self.public.shape[1] < 1
        ):
            raise ValueError("distill.public must be a non-empty float64 (n_public, n_features)")
        return self
