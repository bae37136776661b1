"""Fused block kernels of fuzzy c-means (Bezdek 1981) shared by every algorithm.

Memberships (Bezdek eq. 11.3a), with d2 the squared Euclidean distance:
    u_ij = 1 / Σ_k (d_ij / d_ik)^(2/(m-1)) = r_ij / Σ_k r_ik,   r_ij = d2_ij^(-1/(m-1)).
A zero distance is replaced by the smallest positive float, as in Corcuera Bárcena et al.'s
code, so a point on a center gets membership ≈ 1 there. For m = 2, r = 1/d2 (one reciprocal);
a row whose Σ_k r_ik overflows (several centers on the point) is divided by its largest r
first. For other m, r = (min_k d2_ik / d2_ij)^(1/(m-1)) ∈ [0, 1] (no overflow).

Distances: d2 = ||x||² + ||c||² - 2 x·c (one BLAS product per block), with ||x||² computed
once per job (``protocol.maths.rows.Rows``), clipped below at the smallest positive float.

Every kernel works on one block of ``protocol.maths.rows.BLOCK_ROWS`` rows, so its temporaries are
O(B·K) and stay in cache: a BLAS product, then the element-wise passes compiled in
:mod:`protocol.maths._fcm_kernels` (norms, clip, memberships, u^m and their sums in two or three
passes over the block, where numpy would make a dozen). The public sums fold the blocks'
partial sums in block order (``protocol.maths.rows.fold``), so they do not depend on how the rows
are chunked. The compiled passes (numba) are imported where first used, so importing the
statistics' types (the wire format does) loads no compiler.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from fedclust.core.validation import FloatArray

from .rows import BLOCK_ROWS, RowSource, as_rows, as_source, blas_threads, fold

_TINY = np.finfo(np.float64).tiny


def squared_distances(X: FloatArray, C: FloatArray) -> FloatArray:
    """d2[j, i] = ||x_j - c_i||², via ||x||² - 2 x·c + ||c||² (one BLAS call), clipped at 0."""
    d2 = X @ (-2.0 * C).T
    d2 += np.einsum("ij,ij->i", X, X)[:, None]
    d2 += np.einsum("ij,ij->i", C, C)
    np.maximum(d2, 0.0, out=d2)
    return d2


@dataclass(frozen=True)
class Centers:
    """Centers prepared once per statistic: -2C and ||c_i||² (the kernels' constants)."""

    C: FloatArray
    minus_2c: FloatArray
    sq_norms: FloatArray

    @classmethod
    def of(cls, C: FloatArray) -> Centers:
        return cls(C=C, minus_2c=-2.0 * C, sq_norms=np.einsum("ij,ij->i", C, C))

    @property
    def k(self) -> int:
        return int(self.C.shape[0])


def distances_t(xb: FloatArray, nb: FloatArray, c: Centers) -> FloatArray:
    """d2 of one block, transposed: shape (K, B), clipped below at the smallest positive float.

    The (K, B) layout makes every per-row operation a long contiguous inner loop.
    """
    d = c.minus_2c @ xb.T
    d += nb
    d += c.sq_norms[:, None]
    np.maximum(d, _TINY, out=d)
    return d


def memberships_t(d: FloatArray, m: float) -> FloatArray:
    """FCM memberships from transposed squared distances (K, B), in place; returns ``d``."""
    from ._fcm_kernels import memberships_inplace
    memberships_inplace(d, np.zeros(d.shape[1]), np.zeros(d.shape[0]), m)
    return d


def _memberships_block(xb: FloatArray, nb: FloatArray, c: Centers, m: float) -> FloatArray:
    """Memberships (K, B) of one block: one BLAS product, then the fused element-wise passes
    (distances, clip, memberships) of :mod:`protocol.maths._fcm_kernels`."""
    from ._fcm_kernels import memberships_inplace
    d = c.minus_2c @ xb.T
    memberships_inplace(d, nb, c.sq_norms, m)
    return d


def _row_sums(a: FloatArray) -> FloatArray:
    out: FloatArray = a @ np.ones(a.shape[1])
    return out


# -- block partials ---------------------------------------------------------------------------
def fcm_sums_block(
    xb: FloatArray, nb: FloatArray, c: Centers, m: float
) -> tuple[FloatArray, FloatArray]:
    """Partial U_i = Σ_j u_ij^m and WS_i = Σ_j u_ij^m x_j of one block."""
    from ._fcm_kernels import powered_sums
    W = _memberships_block(xb, nb, c, m)
    u_sum, _ = powered_sums(W, m)
    ws: FloatArray = W @ xb
    return u_sum, ws


def fcm_step_block(
    xb: FloatArray, nb: FloatArray, c: Centers, m: float, Ub: FloatArray, measure: bool
) -> tuple[FloatArray, FloatArray, float]:
    """:func:`fcm_sums_block`, storing the memberships in ``Ub`` (K, B) and returning, with
    ``measure``, Σ (u_old - u)² of the block (``Ub`` holds u_old on entry)."""
    from ._fcm_kernels import powered_sums
    W = _memberships_block(xb, nb, c, m)
    u_sum, change2 = powered_sums(W, m, Ub, measure=measure)
    ws: FloatArray = W @ xb
    return u_sum, ws, change2


def objective_block(xb: FloatArray, nb: FloatArray, c: Centers, m: float) -> tuple[float]:
    """Partial J_m = Σ_j Σ_i u_ij^m d2_ij of one block."""
    from ._fcm_kernels import powered_sums
    d2 = distances_t(xb, nb, c)
    W = memberships_t(d2.copy(), m)
    powered_sums(W, m)
    W *= d2
    return (float(W.ravel() @ np.ones(W.size)),)


def membership_sums_block(
    xb: FloatArray, nb: FloatArray, c: Centers, m: float
) -> tuple[FloatArray]:
    """Partial Σ_j u_ij (memberships to the power 1) of one block."""
    return (_row_sums(_memberships_block(xb, nb, c, m)),)


# -- folded statistics ---------------------------------------------------------------------
def weighted_sums(
    X: FloatArray | RowSource, C: FloatArray, m: float
) -> tuple[FloatArray, FloatArray]:
    """Per cluster U_i = Σ_j u_ij^m and WS_i = Σ_j u_ij^m x_j, from centers C.

    These are the sufficient statistics of one FCM center update: c_i = WS_i / U_i.
    """
    c = Centers.of(C)
    u_sum, ws = fold(as_source(X), lambda xb, nb: fcm_sums_block(xb, nb, c, m))
    return u_sum, ws


def objective(X: FloatArray | RowSource, C: FloatArray, m: float) -> float:
    """FCM objective J_m = Σ_j Σ_i u_ij^m ||x_j - c_i||² with U the optimal memberships for C."""
    c = Centers.of(C)
    (total,) = fold(as_source(X), lambda xb, nb: objective_block(xb, nb, c, m))
    return float(total)


def membership_sums(X: FloatArray | RowSource, C: FloatArray, m: float) -> FloatArray:
    """Per cluster Σ_j u_ij, the FedFCM supports (memberships to the power 1)."""
    c = Centers.of(C)
    (total,) = fold(as_source(X), lambda xb, nb: membership_sums_block(xb, nb, c, m))
    out: FloatArray = total
    return out


def memberships(X: FloatArray | RowSource, C: FloatArray, m: float) -> FloatArray:
    """Membership matrix U of shape (N, K) of the rows to the centers C."""
    rows = as_rows(X)
    c = Centers.of(C)
    U = np.empty((rows.n_rows, c.k))
    start = 0
    with blas_threads(1):
        for xb, nb in rows:
            U[start : start + xb.shape[0]] = _memberships_block(xb, nb, c, m).T
            start += xb.shape[0]
    return U


def nearest(X: FloatArray, C: FloatArray) -> NDArray[np.intp]:
    """Index of the nearest center for every row of X: argmin_i ||c_i||² - 2 x·c_i (||x||² is
    the same for every i), block by block."""
    out = np.empty(X.shape[0], dtype=np.intp)
    C2 = -2.0 * C
    cc = np.einsum("ij,ij->i", C, C)
    with blas_threads(1):
        for start in range(0, X.shape[0], BLOCK_ROWS):
            d = X[start : start + BLOCK_ROWS] @ C2.T
            d += cc
            out[start : start + BLOCK_ROWS] = d.argmin(axis=1)
    return out
