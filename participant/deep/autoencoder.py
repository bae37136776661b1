"""The FedCRef autoencoder (Nardi, Valerio & Passarella): training and reconstruction errors.

Fully connected d-100-64-32 encoder with a mirrored decoder, ReLU activations, sigmoid output,
trained with Adam on the mean squared error (the paper; the authors' code: 20 epochs, early
stopping with patience 4, batch 32). The architecture is described by
:class:`protocol.maths.fedcref.AutoencoderSpec`; parameters travel as one flat float32 numpy vector
in the layout documented there (:func:`flatten`, :func:`unflatten`).

Determinism: every random draw (initial weights, validation split, batch order) comes from a
numpy Generator seeded by the caller; torch's global RNG is never used, so concurrent
participants in one process cannot disturb each other. Thread settings are left alone.
Every function takes a ``device`` (``participant.deep.device``; default the CPU): the model and
the rows move there, results come back to the CPU as numpy arrays.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from numpy.typing import NDArray
from torch import nn

from fedclust.core.validation import FloatArray, check_float, check_int, rng_from
from fedclust.protocol.maths.fedcref import AutoencoderSpec

__all__ = [
    "TrainConfig",
    "build",
    "embed",
    "flatten",
    "init_params",
    "reconstruction_errors",
    "train",
    "unflatten",
]

_EVAL_BATCH = 2048
_CPU = torch.device("cpu")


@dataclass(frozen=True)
class TrainConfig:
    """Local training settings (defaults: the authors' code).

    ``patience`` = 0 disables early stopping; otherwise ``val_fraction`` of the rows (when that
    leaves at least ``min_val`` rows) is held out and training stops after ``patience`` epochs
    without a validation improvement, restoring the best weights. With too few rows the
    training loss is monitored instead.
    """

    epochs: int = 20
    batch_size: int = 32
    learning_rate: float = 1e-3
    patience: int = 4
    val_fraction: float = 0.1
    min_val: int = 10

    def __post_init__(self) -> None:
        owner = "TrainConfig"
        check_int(self.epochs, name="epochs", owner=owner, low=0)
        check_int(self.batch_size, name="batch_size", owner=owner, low=1)
        check_float(self.learning_rate, name="learning_rate", owner=owner, low=0.0, low_open=True)
        check_int(self.patience, name="patience", owner=owner, low=0)
        check_float(self.val_fraction, name="val_fraction", owner=owner, low=0.0, high=0.5)
        check_int(self.min_val, name="min_val", owner=owner, low=1)


def build(spec: AutoencoderSpec) -> nn.Sequential:
    """The torch module for ``spec`` (parameters uninitialised: load them with unflatten)."""
    layers: list[nn.Module] = []
    dims = spec.layer_dims
    for i, (n_in, n_out) in enumerate(dims):
        layers.append(nn.Linear(n_in, n_out))
        layers.append(nn.Sigmoid() if i == len(dims) - 1 else nn.ReLU())
    return nn.Sequential(*layers)


def _linears(model: nn.Sequential) -> list[nn.Linear]:
    return [m for m in model if isinstance(m, nn.Linear)]


def init_params(
    spec: AutoencoderSpec, *, seed: int | np.random.Generator | None = None
) -> NDArray[np.float32]:
    """PyTorch's default Linear initialisation, U(−1/√fan_in, 1/√fan_in) for weights and
    biases, drawn from a seeded numpy Generator."""
    rng = rng_from(seed)
    parts: list[NDArray[np.float64]] = []
    for n_in, n_out in spec.layer_dims:
        bound = 1.0 / np.sqrt(n_in)
        parts.append(rng.uniform(-bound, bound, size=n_in * n_out + n_out))
    return np.concatenate(parts).astype(np.float32)


def flatten(model: nn.Sequential) -> NDArray[np.float32]:
    """All parameters as one float32 vector (per layer: weight row-major, then bias)."""
    with torch.no_grad():
        parts = [
            t.detach().reshape(-1).cpu().numpy()
            for lin in _linears(model)
            for t in (lin.weight, lin.bias)
        ]
    return np.concatenate(parts).astype(np.float32)


def unflatten(
    spec: AutoencoderSpec, params: NDArray[np.float32], device: torch.device = _CPU
) -> nn.Sequential:
    """A module for ``spec`` holding ``params`` (checked with ``spec.check_params``), on
    ``device``."""
    flat = spec.check_params(params)
    model = build(spec)
    offset = 0
    with torch.no_grad():
        for lin in _linears(model):
            for t in (lin.weight, lin.bias):
                size = t.numel()
                t.copy_(torch.from_numpy(flat[offset : offset + size].copy()).reshape(t.shape))
                offset += size
    return model.to(device)


def _tensor(X: FloatArray, device: torch.device) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(X, dtype=np.float32)).to(device)


def _mean_loss(model: nn.Sequential, X: torch.Tensor) -> float:
    with torch.no_grad():
        total = 0.0
        for start in range(0, X.shape[0], _EVAL_BATCH):
            xb = X[start : start + _EVAL_BATCH]
            total += float(((model(xb) - xb) ** 2).mean(dim=1).sum())
    return total / max(1, X.shape[0])


def train(
    spec: AutoencoderSpec,
    params: NDArray[np.float32],
    X: FloatArray,
    *,
    config: TrainConfig | None = None,
    epochs: int | None = None,
    seed: int | np.random.Generator | None = None,
    device: torch.device = _CPU,
) -> NDArray[np.float32]:
    """Train from ``params`` on the rows X (in [0, 1]) with Adam and MSE on ``device``;
    return new params.

    ``epochs`` overrides ``config.epochs`` (FedAvg local steps). An empty X returns the
    parameters unchanged.
    """
    cfg = config if config is not None else TrainConfig()
    n_epochs = cfg.epochs if epochs is None else epochs
    if X.shape[0] == 0 or n_epochs == 0:
        return spec.check_params(params).copy()
    rng = rng_from(seed)
    model = unflatten(spec, params, device)
    order = rng.permutation(X.shape[0])
    n_val = int(X.shape[0] * cfg.val_fraction) if cfg.patience > 0 else 0
    if n_val < cfg.min_val:
        n_val = 0
    val = _tensor(X[order[:n_val]], device) if n_val else None
    fit = _tensor(X[order[n_val:]], device)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.learning_rate)
    loss_fn = nn.MSELoss()
    best = float("inf")
    best_params: NDArray[np.float32] | None = None
    waited = 0
    for _ in range(n_epochs):
        perm = torch.from_numpy(rng.permutation(fit.shape[0])).to(device)
        running = 0.0
        for start in range(0, fit.shape[0], cfg.batch_size):
            xb = fit[perm[start : start + cfg.batch_size]]
            opt.zero_grad()
            loss = loss_fn(model(xb), xb)
            loss.backward()
            opt.step()
            running += float(loss.detach()) * xb.shape[0]
        if cfg.patience == 0:
            continue
        monitored = _mean_loss(model, val) if val is not None else running / fit.shape[0]
        if monitored < best - 1e-6:
            best, waited = monitored, 0
            best_params = flatten(model)
        else:
            waited += 1
            if waited >= cfg.patience:
                break
    if best_params is not None and val is not None:
        return best_params
    return flatten(model)


def reconstruction_errors(
    spec: AutoencoderSpec, params: NDArray[np.float32], X: FloatArray,
    device: torch.device = _CPU,
) -> FloatArray:
    """Per-sample mean squared reconstruction error, shape (n_samples,)."""
    model = unflatten(spec, params, device)
    Xt = _tensor(X, device)
    out = np.empty(X.shape[0], dtype=np.float64)
    with torch.no_grad():
        for start in range(0, X.shape[0], _EVAL_BATCH):
            xb = Xt[start : start + _EVAL_BATCH]
            out[start : start + xb.shape[0]] = (
                ((model(xb) - xb) ** 2).mean(dim=1).double().cpu().numpy()
            )
    return out


def embed(
    spec: AutoencoderSpec, params: NDArray[np.float32], X: FloatArray,
    device: torch.device = _CPU,
) -> FloatArray:
    """The code layer (output of the encoder, after its ReLU), shape (n_samples, hidden[-1])."""
    model = unflatten(spec, params, device)
    encoder = model[: 2 * len(spec.hidden)]
    Xt = _tensor(X, device)
    parts: list[FloatArray] = []
    with torch.no_grad():
        for start in range(0, X.shape[0], _EVAL_BATCH):
            parts.append(encoder(Xt[start : start + _EVAL_BATCH]).double().cpu().numpy())
    return np.concatenate(parts, axis=0) if parts else np.empty((0, spec.hidden[-1]))
