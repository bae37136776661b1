"""The compiled element-wise passes (protocol.maths._fcm_kernels) against numpy written out."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fedclust.core.validation import FloatArray
from fedclust.protocol.maths._fcm_kernels import memberships_inplace, powered_sums
from fedclust.protocol.maths._fuzzy import (
    Centers,
    fcm_step_block,
    fcm_sums_block,
    squared_distances,
)

_TINY = np.finfo(np.float64).tiny


def _reference_memberships(d2: FloatArray, m: float) -> FloatArray:
    """Bezdek eq. 11.3a on (K, B) squared distances, one numpy pass per operation."""
    d = np.maximum(d2, _TINY)
    r = 1.0 / d if m == 2.0 else (d.min(axis=0) / d) ** (1.0 / (m - 1.0))
    with np.errstate(over="ignore"):
        total = r.sum(axis=0)
    bad = ~np.isfinite(total)
    r[:, bad] /= r[:, bad].max(axis=0)
    total[bad] = r[:, bad].sum(axis=0)
    out: FloatArray = r / total
    return out


def _data(k: int) -> tuple[FloatArray, FloatArray]:
    rng = np.random.default_rng(7)
    X = rng.normal(size=(1000, 5)) * 3.0
    C = rng.normal(size=(k, 5))
    X[3] = C[1]  # a point on a center
    C[-1] = C[0]  # two centers on one point ...
    X[9] = C[0]  # ... and a point on both: Σ 1/d2 overflows for m = 2
    return X, C


@pytest.mark.parametrize("m", [2.0, 1.5, 3.0])
def test_memberships_equal_the_formula(m: float) -> None:
    X, C = _data(5)
    d = (-2.0 * C) @ X.T
    memberships_inplace(d, np.einsum("ij,ij->i", X, X), np.einsum("ij,ij->i", C, C), m)
    expected = _reference_memberships(squared_distances(X, C).T, m)
    np.testing.assert_allclose(d, expected, rtol=0, atol=1e-14)
    np.testing.assert_allclose(d.sum(axis=0), 1.0, rtol=0, atol=1e-14)
    assert d[1, 3] == pytest.approx(1.0)  # the point on center 1
    assert d[0, 9] == pytest.approx(0.5) and d[-1, 9] == pytest.approx(0.5)


@pytest.mark.parametrize("m", [2.0, 2.5])
def test_powered_sums_store_and_measure(m: float) -> None:
    rng = np.random.default_rng(3)
    U = rng.uniform(size=(4, 300))
    prev = rng.uniform(size=(4, 300))
    old = prev.copy()
    W = U.copy()
    sums, change2 = powered_sums(W, m, prev, measure=True)
    np.testing.assert_allclose(W, U**m, rtol=1e-15)
    np.testing.assert_allclose(sums, (U**m).sum(axis=1), rtol=1e-13)
    assert change2 == pytest.approx(((old - U) ** 2).sum(), rel=1e-13)
    np.testing.assert_array_equal(prev, U)  # the memberships were stored

    W = U.copy()
    _, unmeasured = powered_sums(W, m, prev, measure=False)
    assert unmeasured == 0.0
    _, alone = powered_sums(U.copy(), m)
    assert alone == 0.0


def test_block_statistics_equal_numpy_and_are_repeatable() -> None:
    X, C = _data(4)
    nb = np.einsum("ij,ij->i", X, X)
    c = Centers.of(C)
    U = _reference_memberships(squared_distances(X, C).T, 2.0)
    W = U**2
    u_sum, ws = fcm_sums_block(X, nb, c, 2.0)
    np.testing.assert_allclose(u_sum, W.sum(axis=1), rtol=1e-12)
    np.testing.assert_allclose(ws, W @ X, rtol=1e-12, atol=1e-12)
    again = fcm_sums_block(X, nb, c, 2.0)
    np.testing.assert_array_equal(again[0], u_sum)  # the same bits on every call
    np.testing.assert_array_equal(again[1], ws)

    store = np.zeros((C.shape[0], X.shape[0]))
    strided = np.zeros((C.shape[0], 2 * X.shape[0]))[:, ::2]  # a view into a (K, N) buffer
    for Ub in (store, strided):
        step_sum, step_ws, _ = fcm_step_block(X, nb, c, 2.0, Ub, False)
        np.testing.assert_array_equal(step_sum, u_sum)
        np.testing.assert_array_equal(step_ws, ws)
        np.testing.assert_allclose(Ub, U, rtol=0, atol=1e-14)


@pytest.mark.parametrize("m", [2.0, 1.5])
def test_a_nan_distance_stays_nan(m: float) -> None:
    d = np.array([[1.0, np.nan], [2.0, 3.0]])  # column 1: an overflowed distance
    memberships_inplace(d, np.zeros(2), np.zeros(2), m)
    assert np.isfinite(d[:, 0]).all()
    assert np.isnan(d[:, 1]).all()  # refused downstream as non-finite, never a membership of 1


def test_compiled_kernels_are_cached_outside_the_package(tmp_path: Path) -> None:
    """numba's cache goes to the user's cache folder: a file beside the module would outlive
    an uninstall and make the leftover folder shadow a later editable install."""
    import fedclust.protocol.maths._fcm_kernels as kernels

    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env["XDG_CACHE_HOME"] = str(tmp_path)
    run = "import numpy as np; from fedclust.protocol.maths._fcm_kernels import powered_sums as p"
    run += "; p(np.full((2, 3), 0.5), 2.0)"
    subprocess.run([sys.executable, "-c", run], env=env, check=True, timeout=120)
    cached = list((tmp_path / "numba").rglob("_fcm_kernels.*.nbi"))
    assert cached, "numba wrote no index into the user's cache folder"
    beside = Path(kernels.__file__).parent / "__pycache__"
    assert not list(beside.glob("_fcm_kernels.*.nb*"))
