"""Federated k-means of Garst & Reinders (2023), Algorithm 1.

Every participant l reports, per local cluster j with at least ``p`` points (the paper's rule,
p = 2), only its mean m_j and size S_j (:class:`ClusterMeans`); the server minimises the
paper's objective F_km = Σ_j min_{c_i ∈ C_g} S_j ||m_j − c_i||² with
:func:`protocol.maths.center_kmeans.center_kmeans` over the held means (weights = sizes).
:func:`participant_init` (round 1): local k-means++ with k' = min(k, N_l) seeds and one Lloyd
step. :func:`participant_step` (round t > 1): assign the rows to the nearest global center,
drop the centers no row is nearest to, take ONE Lloyd step. :func:`match_centers` aligns two
center sets. Rows are folded in fixed blocks (``protocol.maths.rows``): extra memory
O(block·K + K·D), streamed sources work.

Design notes: ``docs/center-kmeans.md`` (§ Federated k-means, the participant's side).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.optimize import linear_sum_assignment
from sklearn.cluster import kmeans_plusplus

from fedclust.core.validation import FloatArray, check_centers, check_data, check_int, rng_from

from ._fuzzy import Centers, squared_distances
from .rows import RowSource, as_rows, as_source, fold

__all__ = [
    "ClusterMeans",
    "match_centers",
    "match_order",
    "participant_init",
    "participant_step",
]

_OWNER_INIT = "participant_init"
_OWNER_STEP = "participant_step"
_SEED_BOUND = 2**31 - 1


@dataclass(frozen=True)
class ClusterMeans:
    """One participant's contribution: means and sizes of its clusters with >= p points.

    Attributes:
        means: shape (K', n_features), the local cluster means m_j (K' may be 0).
        counts: shape (K',), the local cluster sizes S_j (integers >= p).
    """

    means: FloatArray
    counts: NDArray[np.int64]


def cluster_sums_block(xb: FloatArray, c: Centers) -> tuple[FloatArray, FloatArray]:
    """Partial sizes and coordinate sums of one block's rows per nearest center."""
    d = c.minus_2c @ xb.T
    d += c.sq_norms[:, None]
    onehot = (np.argmin(d, axis=0) == np.arange(c.k)[:, None]).astype(np.float64)
    sums: FloatArray = onehot @ xb
    return onehot @ np.ones(onehot.shape[1]), sums


def _report(rows: RowSource, C: FloatArray, p: int) -> ClusterMeans:
    """Means and sizes of the rows grouped by nearest center, keeping groups of >= p rows."""
    c = Centers.of(C)
    counts, sums = fold(rows, lambda xb, _: cluster_sums_block(xb, c))
    keep = counts >= p
    kept = counts[keep]
    return ClusterMeans(means=sums[keep] / kept[:, None], counts=kept.astype(np.int64))


def participant_init(
    X: ArrayLike | RowSource, k: int, *, p: int = 2, seed: int | np.random.Generator | None = None
) -> ClusterMeans:
    """Round 1 of Alg. 1: local k-means++ seeds, one Lloyd step, report clusters of >= p rows.

    Args:
        X: the participant's rows, shape (n_samples, n_features).
        k: the global number of clusters; the participant seeds k' = min(k, n_samples).
        p: the smallest cluster size ever reported (the paper's p; default 2).
        seed: algorithmic randomness of the k-means++ seeding.

    Returns:
        The means and sizes of the local clusters with at least ``p`` rows.
    """
    rows = as_rows(X)
    k = check_int(k, name="k", owner=_OWNER_INIT, low=1)
    p = check_int(p, name="p", owner=_OWNER_INIT, low=1)
    rng = rng_from(seed)
    k_local = min(k, rows.n_rows)
    seeds, _ = kmeans_plusplus(
        rows.X, n_clusters=k_local, random_state=int(rng.integers(_SEED_BOUND))
    )
    return _report(rows, np.ascontiguousarray(seeds, dtype=np.float64), p)


def participant_step(
    X: ArrayLike | RowSource, centers: ArrayLike, *, p: int = 2
) -> ClusterMeans:
    """Round t > 1 of Alg. 1: one local Lloyd step from the global centers a row is nearest to.

    The global centers no local row is nearest to are dropped first; since no row is assigned
    to them, the Lloyd step from the remaining centers assigns every row exactly as from all
    centers, so the step is: c_i ← mean of the rows nearest to c_i, for the centers with rows.

    Args:
        X: the participant's rows, shape (n_samples, n_features).
        centers: the global centers, shape (k, n_features).
        p: the smallest cluster size ever reported (default 2).

    Returns:
        The updated means and sizes of the local clusters with at least ``p`` rows.
    """
    rows = as_source(X)
    C = check_centers(centers, n_features=rows.n_features)
    p = check_int(p, name="p", owner=_OWNER_STEP, low=1)
    return _report(rows, C, p)


def match_centers(new: ArrayLike, reference: ArrayLike) -> FloatArray:
    """Reorder ``new`` so that row i is the center matched to ``reference`` row i
    (``new[match_order(new, reference)]``)."""
    return np.ascontiguousarray(np.asarray(new, dtype=np.float64)[match_order(new, reference)])


def match_order(new: ArrayLike, reference: ArrayLike) -> NDArray[np.intp]:
    """The order of ``new``'s rows that matches them to ``reference`` row by row.

    The matching minimises Σ_i ||new_π(i) - reference_i||² (Hungarian algorithm), so the
    Frobenius shift ||new_aligned - reference||_F does not depend on the order in which a
    k-means++ restart happens to return the centers. Both arrays have shape (k, n_features).
    """
    A = check_data(new, name="new")
    B = check_centers(reference, n_features=A.shape[1], name="reference")
    if A.shape != B.shape:
        raise ValueError(
            f"new and reference must have the same shape; got {A.shape} and {B.shape}."
        )
    rows, cols = linear_sum_assignment(squared_distances(B, A))
    order = np.empty(A.shape[0], dtype=np.intp)
    order[rows] = cols
    return order
