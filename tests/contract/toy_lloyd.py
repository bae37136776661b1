"""A toy algorithm that adds a statistic, written as a newcomer would: this module only.

"toy-lloyd" is Lloyd's k-means from exact sums. Its statistic "toy_lloyd_sums" gives, per
center c_k, the sum of the participant's rows nearest to it and their count,
S_k = Σ_{x: k(x)=k} x and n_k = |{x: k(x)=k}|; summed over participants they give the pooled
Lloyd step c_k ← S_k / n_k (Lloyd 1982), a cluster nobody's row is nearest to keeping its
center. The statistic travels in the generic ``statistic`` task, so it needs no wire class,
and is summed like any other (plain, masked, Paillier).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fedclust.coordinator._rounds import iterate_centers, resolve_init
from fedclust.coordinator.result import FederatedResult, RunOptions
from fedclust.core.validation import FloatArray
from fedclust.protocol.algorithms import (
    SWEEP_STATISTICS,
    SWEEP_TASKS,
    AlgorithmSpec,
    StatisticSpec,
)
from fedclust.protocol.maths.rows import RowSource, fold
from fedclust.protocol.wire import messages as msg


def _block(X: FloatArray, centers: FloatArray) -> tuple[FloatArray, FloatArray]:
    """S_k and n_k of one block of rows ``X`` (B, D) for ``centers`` (K, D)."""
    nearest = np.argmin(((X[:, None, :] - centers[None, :, :]) ** 2).sum(axis=2), axis=1)
    sums = np.zeros_like(centers)
    np.add.at(sums, nearest, X)
    counts = np.bincount(nearest, minlength=centers.shape[0]).astype(np.float64)
    return sums, counts


def lloyd_sums(rows: RowSource, centers: FloatArray) -> dict[str, FloatArray]:
    """S_k and n_k of the participant's ``rows`` for ``centers`` (K, D): the sum over its
    blocks of theirs (streamed, and on a Dask cluster's workers)."""
    sums, counts = fold(rows, lambda xb, _: _block(xb, centers))
    return {"sums": sums, "counts": counts}


def _shapes(n_features: int, centers: tuple[int, ...]) -> dict[str, tuple[int, ...]]:
    return {"sums": (centers[0], n_features), "counts": (centers[0],)}


def _bounds(
    n_features: int, centers: tuple[int, ...], max_rows: int, value_bound: float,
    params: Mapping[str, float],
) -> dict[str, float]:
    return {"sums": max_rows * value_bound, "counts": float(max_rows)}


STATISTIC = StatisticSpec(
    name="toy_lloyd_sums", shapes=_shapes, bounds=_bounds,
    compute_path=f"{__name__}:lloyd_sums",
)

SPEC = AlgorithmSpec(
    name="toy-lloyd",
    title="Lloyd's k-means from exact sums (a test's toy)",
    family="sweep",
    tasks=SWEEP_TASKS | {"statistic"},
    statistics=SWEEP_STATISTICS | {STATISTIC.name},
    procedure_path=f"{__name__}:procedure",
    plain_notes=(
        "toy-lloyd: each participant's per-cluster sums of its rows and their counts reach "
        "the coordinator in the clear, every round."
    ),
    protected_notes=(
        "toy-lloyd, protected: the coordinator learns only the per-cluster sums and counts "
        "over each round's participants, hence the global centers."
    ),
)


def procedure(participants: Sequence[Any], k: int, options: RunOptions) -> FederatedResult:
    """Lloyd's k-means for one K: c_k ← ΣS_k / Σn_k, until the centers move less than eps."""
    o = options

    def step(_: int, C: FloatArray) -> tuple[FloatArray, tuple[str, ...]]:
        task = msg.StatisticTask(name=STATISTIC.name, centers=msg.WireArray.of(C))
        total, names = o.summation.sum(participants, task, msg.StatisticReply)
        sums, counts = (total.fields[f].to_numpy() for f in ("sums", "counts"))
        filled = counts > 0.5
        new = C.copy()
        new[filled] = sums[filled] / counts[filled, None]
        return new, names

    init = resolve_init(o.init, k, participants[0].n_features, o.rng)
    return iterate_centers(init, step, max_rounds=o.max_rounds, eps=o.eps, on_round=o.on_round)
