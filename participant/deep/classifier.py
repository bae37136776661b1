"""Small classifiers for clustered federated distillation (Yang & Tae 2023), in PyTorch.

:class:`ClassifierSpec`: ``"cnn"`` for square images of side s divisible by 4
(conv5×5(1→16, stride 2)-ReLU, conv5×5(16→32, stride 2)-ReLU, linear(32·(s/4)² → 100)-ReLU,
linear(100 → n_classes)) or ``"mlp"`` (linear(d → 100)-ReLU, linear(100 → n_classes)).
:func:`train_supervised`: Adam (lr 1e-3), cross-entropy, batch 32, at most 30 epochs with
early stopping (patience 3) on a 20 % hold-out (none under 10 rows). :func:`distill_towards`
matches the student's logits s to the teacher's mean softmax probabilities t with

    loss = 0.5 · KL( softmax(t / T) ‖ softmax(s / T) )      (averaged over the batch)

T = 0.1 by default (applied to t's probabilities, as the authors' code does), Adam (lr 1e-3),
50 epochs, batch 64 (learning rate, batch size and epochs are arguments: the job's
``distill`` parameters). Every random choice draws from a CPU ``torch.Generator`` seeded by
the caller, never torch's global one, so concurrent threads stay reproducible. The model is
built on the CPU and may then be moved (``model.to(device)``, ``participant.deep.device``);
every function here runs on the device the model's parameters are on and returns numpy
results on the CPU.

Design notes: ``docs/fed-distill.md`` (§ The classifiers: choices, timings).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from numpy.typing import NDArray
from torch import nn
from torch.nn import functional

__all__ = [
    "ClassifierSpec",
    "accuracy",
    "build_classifier",
    "distill_towards",
    "predict_proba",
    "train_supervised",
]

Kind = Literal["mlp", "cnn"]


@dataclass(frozen=True)
class ClassifierSpec:
    """The architecture, a public part of the job: input width, classes, kind, hidden width."""

    n_features: int
    n_classes: int
    kind: Kind = "mlp"
    hidden: int = 100

    def __post_init__(self) -> None:
        if self.n_features < 1 or self.n_classes < 2 or self.hidden < 1:
            raise ValueError(
                "ClassifierSpec needs n_features >= 1, n_classes >= 2 and hidden >= 1; got "
                f"n_features={self.n_features}, n_classes={self.n_classes}, "
                f"hidden={self.hidden}."
            )
        if self.kind not in ("mlp", "cnn"):
            raise ValueError(f"ClassifierSpec kind must be 'mlp' or 'cnn'; got {self.kind!r}.")
        if self.kind == "cnn":
            side = math.isqrt(self.n_features)
            if side * side != self.n_features or side % 4 != 0:
                raise ValueError(
                    "a 'cnn' classifier needs square images whose side is divisible by 4 "
                    f"(n_features = side²); got n_features={self.n_features}."
                )

    @property
    def side(self) -> int:
        """Image side for the CNN."""
        return math.isqrt(self.n_features)


class _CNN(nn.Module):
    def __init__(self, spec: ClassifierSpec) -> None:
        super().__init__()
        self.side = spec.side
        self.conv1 = nn.Conv2d(1, 16, 5, stride=2, padding=2)
        self.conv2 = nn.Conv2d(16, 32, 5, stride=2, padding=2)
        self.fc = nn.Linear(32 * (spec.side // 4) ** 2, spec.hidden)
        self.out = nn.Linear(spec.hidden, spec.n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.view(-1, 1, self.side, self.side)
        h = functional.relu(self.conv1(h))
        h = functional.relu(self.conv2(h))
        h = functional.relu(self.fc(h.flatten(1)))
        return self.out(h)  # type: ignore[no-any-return]


class _MLP(nn.Module):
    def __init__(self, spec: ClassifierSpec) -> None:
        super().__init__()
        self.fc = nn.Linear(spec.n_features, spec.hidden)
        self.out = nn.Linear(spec.hidden, spec.n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(functional.relu(self.fc(x)))  # type: ignore[no-any-return]


def _generator(seed: int) -> torch.Generator:
    g = torch.Generator()
    g.manual_seed(int(seed))
    return g


def build_classifier(spec: ClassifierSpec, *, seed: int) -> nn.Module:
    """A freshly initialised classifier; weights drawn as PyTorch's defaults for Linear and
    Conv2d (Kaiming-uniform with a = √5, bias uniform ±1/√fan_in) from a seeded generator."""
    model: nn.Module = _CNN(spec) if spec.kind == "cnn" else _MLP(spec)
    g = _generator(seed)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, (nn.Linear, nn.Conv2d)):
                nn.init.kaiming_uniform_(module.weight, a=math.sqrt(5), generator=g)
                fan_in = module.weight[0].numel()
                bound = 1.0 / math.sqrt(fan_in)
                if module.bias is not None:
                    nn.init.uniform_(module.bias, -bound, bound, generator=g)
    return model


def _device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


def _tensor(X: NDArray[np.float64], device: torch.device) -> torch.Tensor:
    return torch.as_tensor(np.ascontiguousarray(X, dtype=np.float32)).to(device)


def _batches(
    n: int, batch_size: int, g: torch.Generator, device: torch.device
) -> Iterator[torch.Tensor]:
    order = torch.randperm(n, generator=g).to(device)
    for start in range(0, n, batch_size):
        yield order[start : start + batch_size]


def train_supervised(
    model: nn.Module,
    X: NDArray[np.float64],
    y: NDArray[np.int64],
    *,
    seed: int,
    max_epochs: int = 30,
    patience: int = 3,
    batch_size: int = 32,
    lr: float = 1e-3,
    holdout: float = 0.2,
) -> int:
    """Cross-entropy training with Adam and early stopping; returns the epochs run.

    The best weights on the hold-out (lowest cross-entropy) are restored at the end.
    Inputs are trusted (validated by the caller).
    """
    g = _generator(seed)
    device = _device(model)
    Xt, yt = _tensor(X, device), torch.as_tensor(y, dtype=torch.long).to(device)
    n = Xt.shape[0]
    n_val = round(holdout * n) if n >= 10 else 0
    perm = torch.randperm(n, generator=g).to(device)
    val_idx, train_idx = perm[:n_val], perm[n_val:]
    X_tr, y_tr, X_val, y_val = Xt[train_idx], yt[train_idx], Xt[val_idx], yt[val_idx]
    optimiser = torch.optim.Adam(model.parameters(), lr=lr)
    best_loss, best_state, stale, epochs = math.inf, copy.deepcopy(model.state_dict()), 0, 0
    for _ in range(max_epochs):
        epochs += 1
        model.train()
        for idx in _batches(X_tr.shape[0], batch_size, g, device):
            optimiser.zero_grad()
            loss = functional.cross_entropy(model(X_tr[idx]), y_tr[idx])
            loss.backward()  # type: ignore[no-untyped-call]
            optimiser.step()
        if n_val == 0:
            continue
        model.eval()
        with torch.no_grad():
            val_loss = float(functional.cross_entropy(model(X_val), y_val))
        if val_loss < best_loss:
            best_loss, best_state, stale = val_loss, copy.deepcopy(model.state_dict()), 0
        else:
            stale += 1
            if stale >= patience:
                break
    if n_val > 0:
        model.load_state_dict(best_state)
    model.eval()
    return epochs


def predict_proba(model: nn.Module, X: NDArray[np.float64]) -> NDArray[np.float64]:
    """Softmax probabilities, shape (n_rows, n_classes), float64 (rows sum to 1)."""
    model.eval()
    with torch.no_grad():
        probs = functional.softmax(model(_tensor(X, _device(model))).double(), dim=1)
    return probs.cpu().numpy().astype(np.float64)


def distill_towards(
    model: nn.Module,
    X_public: NDArray[np.float64],
    teacher: NDArray[np.float64],
    *,
    seed: int,
    temperature: float = 0.1,
    epochs: int = 50,
    batch_size: int = 64,
    lr: float = 1e-3,
) -> float:
    """Distil the model towards the teacher's mean probabilities (module docstring's loss).

    Returns the mean loss of the last epoch.
    """
    g = _generator(seed)
    device = _device(model)
    Xt = _tensor(X_public, device)
    target = functional.softmax(_tensor(teacher, device) / temperature, dim=1)
    optimiser = torch.optim.Adam(model.parameters(), lr=lr)
    last = 0.0
    for _ in range(epochs):
        model.train()
        total = 0.0
        for idx in _batches(Xt.shape[0], batch_size, g, device):
            optimiser.zero_grad()
            log_q = functional.log_softmax(model(Xt[idx]) / temperature, dim=1)
            loss = 0.5 * functional.kl_div(log_q, target[idx], reduction="batchmean")
            loss.backward()  # type: ignore[no-untyped-call]
            optimiser.step()
            total += float(loss.detach()) * idx.shape[0]
        last = total / Xt.shape[0]
    model.eval()
    return last


def accuracy(model: nn.Module, X: NDArray[np.float64], y: NDArray[np.int64]) -> float:
    """Fraction of rows whose argmax prediction equals the label."""
    model.eval()
    with torch.no_grad():
        pred = model(_tensor(X, _device(model))).argmax(dim=1).cpu().numpy()
    return float(np.mean(pred == y))
