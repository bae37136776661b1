"""Compiled element-wise passes of the fuzzy c-means block kernels (numba).

A block's memberships need, per element of its (K, B) distance block, an addition of the
norms, a clip, a reciprocal (or a power) and a normalisation by the row's sum; the center
update then needs u^m, its row sums and, for the stopping rule, Σ (u_old - u)². numpy does
each as its own pass over the block with its own temporary; here they are two or three
passes over the block in place. The matrix products stay with BLAS.

The maths is that of :mod:`protocol.maths._fuzzy` (Bezdek eq. 11.3a): u_ij = r_ij / Σ_k r_ik with
r = 1/d2 for m = 2 (a point whose Σ_k r_ik overflows is first divided by its largest r) and
r = (min_k d2_ik / d2_ij)^(1/(m-1)) otherwise; d2 is clipped below at the smallest positive
float. A NaN (distances that overflow) stays NaN, as in numpy: the statistic comes out
non-finite and is refused, instead of the point silently getting a membership of 1. Sums over
a block's rows may be reassociated by the compiler (``reassoc``), so a block's partial sums
can differ from numpy's in the last bits; they are the same on every call on one machine,
whatever the chunking (blocks are fixed).

Compiled on first use and cached (``cache=True``) in the user's cache folder (numba's
user-wide cache, or ``$NUMBA_CACHE_DIR`` when set) rather than beside this file: files written
into an installed package outlive its uninstall and would shadow a later editable install.
Only when the user's cache folder is unwritable does numba fall back to its own order, the
in-tree cache (``__pycache__`` beside this file) first.
``nogil``, so blocks and agents' threads run in parallel.
"""

from __future__ import annotations

import numba
import numpy as np
from numba.core import caching

from fedclust.core.validation import FloatArray

__all__ = ["memberships_inplace", "powered_sums"]

_TINY = float(np.finfo(np.float64).tiny)
_FAST = {"reassoc"}  # vectorised reductions; no other relaxation of IEEE arithmetic


class _UserCacheLocator(caching.UserWideCacheLocator):
    """numba's user-wide cache for this module's kernels only (other files: numba's rules)."""

    @classmethod
    def from_function(cls, py_func: object, py_file: str) -> caching.UserWideCacheLocator | None:
        if py_file != __file__:
            return None
        # numba is untyped; the base returns a locator, or None when the folder is unwritable
        located: caching.UserWideCacheLocator | None = super().from_function(  # type: ignore[no-untyped-call]
            py_func, py_file
        )
        return located


def _cache_outside_the_package() -> None:
    """Ask numba for :class:`_UserCacheLocator` before its in-tree (beside the source) one;
    ``$NUMBA_CACHE_DIR`` keeps its precedence."""
    locators = caching.CacheImpl._locator_classes
    if _UserCacheLocator not in locators:
        locators.insert(locators.index(caching.InTreeCacheLocator), _UserCacheLocator)


_cache_outside_the_package()


@numba.njit(nogil=True, cache=True, fastmath=_FAST)
def _memberships(d: FloatArray, nb: FloatArray, sq: FloatArray, m: float) -> None:
    n_centers, n_rows = d.shape
    total = np.zeros(n_rows)
    if m == 2.0:
        for i in range(n_centers):
            c = sq[i]
            for j in range(n_rows):
                v = d[i, j] + nb[j] + c
                r = 1.0 / (_TINY if v < _TINY else v)  # NaN stays NaN
                d[i, j] = r
                total[j] += r
    else:
        low = np.full(n_rows, np.inf)
        for i in range(n_centers):
            c = sq[i]
            for j in range(n_rows):
                v = d[i, j] + nb[j] + c
                v = _TINY if v < _TINY else v
                d[i, j] = v
                low[j] = min(low[j], v)
        e = 1.0 / (m - 1.0)
        for i in range(n_centers):
            for j in range(n_rows):
                r = (low[j] / d[i, j]) ** e
                d[i, j] = r
                total[j] += r
    for j in range(n_rows):
        if not np.isfinite(total[j]):  # several r near 1/tiny (m = 2): rescale by the largest
            top = 0.0
            for i in range(n_centers):
                top = max(top, d[i, j])
            s = 0.0
            for i in range(n_centers):
                d[i, j] /= top
                s += d[i, j]
            total[j] = s
        total[j] = 1.0 / total[j]
    for i in range(n_centers):
        for j in range(n_rows):
            d[i, j] *= total[j]


@numba.njit(nogil=True, cache=True, fastmath=_FAST)
def _powered_sums(
    u: FloatArray, m: float, prev: FloatArray, store: bool, measure: bool
) -> tuple[FloatArray, float]:
    n_centers, n_rows = u.shape
    sums = np.zeros(n_centers)
    change2 = 0.0
    for i in range(n_centers):
        if measure:
            for j in range(n_rows):
                diff = prev[i, j] - u[i, j]
                change2 += diff * diff
        if store:
            for j in range(n_rows):
                prev[i, j] = u[i, j]
        acc = 0.0
        if m == 2.0:
            for j in range(n_rows):
                w = u[i, j] * u[i, j]
                u[i, j] = w
                acc += w
        else:
            for j in range(n_rows):
                w = u[i, j] ** m
                u[i, j] = w
                acc += w
        sums[i] = acc
    return sums, change2


def memberships_inplace(d: FloatArray, nb: FloatArray, sq: FloatArray, m: float) -> None:
    """Turn ``d`` (K, B), holding -2 c_i·x_j, into the memberships u_ij, in place, given the
    rows' squared norms ``nb`` (B,) and the centers' ``sq`` (K,): d2 = d + nb + sq first."""
    _memberships(d, nb, sq, float(m))


def powered_sums(
    u: FloatArray, m: float, prev: FloatArray | None = None, *, measure: bool = False
) -> tuple[FloatArray, float]:
    """Replace ``u`` (K, B) by u^m in place and return Σ_j u_ij^m per center; with ``prev``
    (K, B), first store u into it and, with ``measure``, return Σ (prev - u)² of the old
    ``prev`` (else 0.0)."""
    if prev is None:
        sums, change2 = _powered_sums(u, float(m), u, False, False)
    else:
        sums, change2 = _powered_sums(u, float(m), prev, True, measure)
    out: FloatArray = sums
    return out, float(change2)
