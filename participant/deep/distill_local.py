"""The participant side of clustered federated distillation (Yang & Tae 2023).

A :class:`DistillParticipant` holds one organisation's labelled rows and a classifier; the
coordinator driver's tasks (``coordinator.distillation.run_fed_distill``, answered by
``participant.distill_tasks.DistillTasks``) call, in order:

1. ``train_local(seed=...)``: (re)initialise and train the classifier on the local rows;
2. ``predict_counts(public_X)``: the count vector of its predictions on the public set
   (disclosed per client; the grouping needs it);
3. ``predict_soft(public_X)``: its softmax probabilities on the public set and a count of 1,
   a sum-type contribution the driver sums within each group (securely where possible);
4. ``distill(teacher, public_X, temperature=..., epochs=..., seed=...)``: distil towards the
   group's teacher;

and, in simulations only, ``evaluate(X, y)`` for the accuracy on held-out labelled rows.
Contributions are dictionaries of named float64 arrays (keys from ``protocol.maths.distillation``).

Input rules (clear ``ValueError`` at construction or call, never mid-job):
- X must be finite, 2-D, of the spec's width; y integer labels in [0, n_classes);
- the public set must have the same width and at least one row; the teacher must be a
  probability matrix of shape (n_public, n_classes);
- a client whose rows hold ONE class is accepted (documented fallback): its classifier learns
  to predict that class, its count vector puts all mass on it and the grouping treats it like
  any other client; it cannot be refused without revealing that it has one class.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch
from numpy.typing import ArrayLike, NDArray
from torch import nn

from fedclust.core.validation import FloatArray, check_data, check_float, check_int
from fedclust.participant.deep.classifier import (
    ClassifierSpec,
    accuracy,
    build_classifier,
    distill_towards,
    predict_proba,
    train_supervised,
)
from fedclust.participant.deep.device import resolve_device
from fedclust.protocol.maths import distillation

__all__ = ["DistillParticipant"]


def _check_labels(y: ArrayLike, *, n_rows: int, n_classes: int, name: str) -> NDArray[np.int64]:
    arr = np.asarray(y)
    if arr.ndim != 1 or arr.shape[0] != n_rows:
        raise ValueError(f"{name} must be 1-D with {n_rows} labels; got shape {arr.shape}.")
    whole = arr.dtype.kind == "f" and bool(np.isfinite(arr).all())
    integral = arr.dtype.kind in "iu" or (whole and bool((arr == np.round(arr)).all()))
    if not integral:
        raise ValueError(f"{name} must hold integer class labels; got dtype {arr.dtype}.")
    labels = arr.astype(np.int64)
    if labels.size and (labels.min() < 0 or labels.max() >= n_classes):
        raise ValueError(f"{name} must hold labels in [0, {n_classes}); a label is outside.")
    return labels


class DistillParticipant:
    """One organisation's labelled rows and classifier; only the statistics below leave.

    Args:
        X: the participant's features, shape (n_samples, n_features), scaled as the public
            set is (e.g. pixels / 255).
        y: integer labels in [0, n_classes).
        name: a label for reports.
        spec: the architecture (input width, number of classes, "mlp" or "cnn").
        device: where the classifier trains (``participant.deep.device``: auto, cpu,
            cuda[:N]); ValueError when a GPU is named and torch sees none.
    """

    def __init__(
        self, X: ArrayLike, y: ArrayLike, *, name: str, spec: ClassifierSpec,
        device: str = "auto",
    ) -> None:
        self.device = resolve_device(device, where=f"device of participant {name!r}")
        self._X = check_data(X, name=f"data of participant {name!r}", min_samples=2)
        if self._X.shape[1] != spec.n_features:
            raise ValueError(
                f"data of participant {name!r} must have n_features={spec.n_features} columns "
                f"(the classifier's input); got shape {self._X.shape}."
            )
        self._y = _check_labels(
            y, n_rows=self._X.shape[0], n_classes=spec.n_classes, name=f"labels of {name!r}"
        )
        self.name = name
        self.spec = spec
        self._model: nn.Module | None = None

    @property
    def n_features(self) -> int:
        """The input width, a public part of the job's schema."""
        return self.spec.n_features

    @property
    def n_classes_held(self) -> int:
        """How many distinct labels the local rows hold (a local fact, for simulations)."""
        return int(np.unique(self._y).size)

    def _trained(self) -> nn.Module:
        if self._model is None:
            raise RuntimeError(f"participant {self.name!r}: call train_local before predicting.")
        return self._model

    def _public(self, public_X: ArrayLike, name: str = "public_X") -> FloatArray:
        P = check_data(public_X, name=name)
        if P.shape[1] != self.spec.n_features:
            raise ValueError(
                f"{name} must have n_features={self.spec.n_features} columns; "
                f"got shape {P.shape}."
            )
        return P

    def train_local(
        self, *, seed: int, max_epochs: int = 30, lr: float = 1e-3, batch_size: int = 32
    ) -> None:
        """Initialise the classifier from ``seed`` and train it on the local rows (Adam,
        at most ``max_epochs`` with early stopping; see ``participant.deep.classifier``)."""
        owner = "train_local"
        seed = check_int(seed, name="seed", owner=owner, low=0)
        max_epochs = check_int(max_epochs, name="max_epochs", owner=owner, low=1)
        lr = check_float(lr, name="lr", owner=owner, low=0.0, low_open=True)
        batch_size = check_int(batch_size, name="batch_size", owner=owner, low=1)
        model = build_classifier(self.spec, seed=seed).to(self.device)
        train_supervised(model, self._X, self._y, seed=seed + 1, max_epochs=max_epochs,
                         lr=lr, batch_size=batch_size)
        self._model = model

    def weights(self) -> dict[str, NDArray[np.float32]]:
        """The trained classifier's parameters by name (the agent saves them between tasks)."""
        return {
            name: value.detach().cpu().numpy().copy()
            for name, value in self._trained().state_dict().items()
        }

    def load_weights(self, weights: Mapping[str, ArrayLike]) -> None:
        """Restore a classifier saved with :meth:`weights`; ValueError when the names or
        shapes do not fit the spec."""
        model = build_classifier(self.spec, seed=0)
        state = model.state_dict()
        if set(weights) != set(state) or any(
            np.shape(weights[name]) != tuple(value.shape) for name, value in state.items()
        ):
            raise ValueError(
                f"the saved classifier of participant {self.name!r} does not fit its "
                f"{self.spec.kind} architecture."
            )
        model.load_state_dict(
            {name: torch.as_tensor(np.asarray(weights[name], dtype=np.float32)) for name in state}
        )
        self._model = model.to(self.device)

    def predict_counts(self, public_X: ArrayLike) -> dict[str, FloatArray]:
        """``{LABEL_COUNTS: c}``: how many public rows the model labels with each class."""
        public = self._public(public_X)
        probs = predict_proba(self._trained(), public)
        return distillation.participant_label_counts(probs)

    def predict_soft(self, public_X: ArrayLike) -> dict[str, FloatArray]:
        """``{SOFT_SUM: P, COUNT: [1]}``: softmax probabilities on the public set, to be summed
        within the group."""
        public = self._public(public_X)
        probs = predict_proba(self._trained(), public)
        return distillation.participant_soft_contribution(probs)

    def distill(
        self,
        teacher: ArrayLike,
        public_X: ArrayLike,
        *,
        temperature: float = 0.1,
        epochs: int = 50,
        lr: float = 1e-3,
        batch_size: int = 64,
        seed: int,
    ) -> None:
        """Distil the local classifier towards the teacher's mean probabilities on public_X
        (loss 0.5·KL(softmax(t/T) ‖ softmax(s/T)), Adam)."""
        owner = "distill"
        P = self._public(public_X)
        T = check_data(teacher, name="teacher")
        if T.shape != (P.shape[0], self.spec.n_classes):
            raise ValueError(
                f"teacher must have shape (n_public, n_classes) = "
                f"({P.shape[0]}, {self.spec.n_classes}); got {T.shape}."
            )
        if (T < 0.0).any() or not np.allclose(T.sum(axis=1), 1.0, atol=1e-3):
            raise ValueError("teacher must hold probabilities (non-negative rows summing to 1).")
        temperature = check_float(temperature, name="temperature", owner=owner, low=0.0,
                                  low_open=True)
        epochs = check_int(epochs, name="epochs", owner=owner, low=0)
        seed = check_int(seed, name="seed", owner=owner, low=0)
        lr = check_float(lr, name="lr", owner=owner, low=0.0, low_open=True)
        batch_size = check_int(batch_size, name="batch_size", owner=owner, low=1)
        distill_towards(self._trained(), P, T, seed=seed, temperature=temperature,
                        epochs=epochs, lr=lr, batch_size=batch_size)

    def evaluate(self, X: ArrayLike, y: ArrayLike) -> float:
        """Accuracy on labelled rows (simulator evaluation only; never asked over the wire)."""
        Xe = self._public(X, name="X")
        ye = _check_labels(y, n_rows=Xe.shape[0], n_classes=self.spec.n_classes, name="y")
        return accuracy(self._trained(), Xe, ye)
