"""Federations to simulate: the built-in synthetic setups, the shared datasets, user files.

A federation is a list of participant datasets (with ground-truth labels where known, used
only to evaluate). Built-in names: ``motivational`` (Stallmann & Wilbik §3.2.1) and
``garst-grid`` (Garst & Reinders), plus the shared datasets by name (``xclara``,
``g2-2-30``, ``bank``, ...), split into participants.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from fedclust.data import loaders, splits, synthetic

SplitKind = Literal["uniform", "iid", "dirichlet"]


@dataclass(frozen=True)
class Federation:
    """Participant datasets, optionally with ground-truth labels (for evaluation only) and
    the features' names (the file's header; None for generated data)."""

    name: str
    parts: tuple[NDArray[np.float64], ...]
    labels: tuple[NDArray[Any], ...] | None = None
    feature_names: tuple[str, ...] | None = None

    @classmethod
    def from_pairs(cls, name: str, pairs: Sequence[tuple[Any, Any]]) -> Federation:
        """From a list of (X, y) pairs; y may be None for all participants."""
        parts = tuple(np.asarray(X, dtype=np.float64) for X, _ in pairs)
        if all(y is not None for _, y in pairs):
            return cls(name, parts, tuple(np.asarray(y) for _, y in pairs))
        return cls(name, parts, None)


def _split(
    X: NDArray[np.float64],
    y: NDArray[Any] | None,
    *,
    participants: int,
    split: SplitKind,
    alpha: float,
    seed: int | None,
) -> list[tuple[Any, Any]]:
    if split == "dirichlet":
        if y is None:
            raise ValueError("--split dirichlet needs labels (a label column) to skew by.")
        return list(splits.split_dirichlet(X, y, participants, alpha=alpha, seed=seed))
    if split == "iid":
        return list(splits.split_iid(X, y, participants, seed=seed))
    return list(splits.split_uniform(X, y, participants, seed=seed))


def build_federation(
    *,
    dataset: str | None = None,
    data: str | None = None,
    columns: Sequence[str] | None = None,
    split_by: str | None = None,
    label_column: str | None = None,
    participants: int | None = None,
    split: SplitKind = "uniform",
    alpha: float = 0.5,
    beta: float = 1.0,
    seed: int | None = None,
    missing: loaders.Missing = "fail",
    decimal: Literal[".", ","] = ".",
    encoding: str = "utf-8",
) -> Federation:
    """Resolve the CLI's data options into a :class:`Federation`.

    Exactly one of ``dataset`` (a built-in or shared dataset name) and ``data`` (a CSV,
    gzip CSV or ARFF file, read as ``missing``, ``decimal`` and ``encoding`` say; see
    :func:`loaders.load_dataset`) is given. A table is split by ``split_by`` (one participant
    per value of that column) or else into ``participants`` parts (default 3).
    """
    if (dataset is None) == (data is None):
        raise ValueError("Give exactly one of --dataset NAME and --data PATH.")
    if participants is not None and participants < 1:
        raise ValueError(f"--participants must be at least 1; got {participants}.")
    if dataset == "motivational":
        if participants not in (None, 3):
            raise ValueError(
                "--dataset motivational has 3 participants by construction: leave out "
                "--participants."
            )
        return Federation.from_pairs(dataset, synthetic.motivational(seed=seed))
    if dataset == "garst-grid":
        # Five clients as in the authors' experiments; with a small beta a client far from
        # every point may observe none: it has nothing to contribute and does not take part.
        pairs = synthetic.garst_grid(beta, participants or 5, seed=seed)
        pairs = [(X, y) for X, y in pairs if len(X) > 0]
        return Federation.from_pairs(f"{dataset} (beta={beta})", pairs)
    if dataset is not None:
        loaded = loaders.builtin(dataset)
        name = dataset
    else:
        assert data is not None
        loaded = loaders.load_dataset(
            data, columns=columns, split_by=split_by, label_column=label_column,
            missing=missing, decimal=decimal, encoding=encoding,
        )
        name = data
    if loaded.groups is not None and (split_by is not None or participants is None):
        federation = Federation.from_pairs(
            name, splits.split_by_groups(loaded.X, loaded.y, loaded.groups)
        )
    else:
        n_rows = loaded.X.shape[0]
        if (participants or 3) > n_rows:
            raise ValueError(
                f"{name} has {n_rows} rows, fewer than {participants or 3} participants: "
                f"give --participants {n_rows} or fewer."
            )
        federation = Federation.from_pairs(
            name,
            _split(loaded.X, loaded.y, participants=participants or 3, split=split,
                   alpha=alpha, seed=seed),
        )
    names = tuple(loaded.feature_names)
    return dataclasses.replace(federation, feature_names=names or None)
