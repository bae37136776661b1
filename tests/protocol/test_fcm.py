"""Central FCM and k-means references (protocol.maths.fcm)."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score

from fedclust.core.validation import FloatArray
from fedclust.protocol.maths._fuzzy import nearest
from fedclust.protocol.maths.fcm import FCMResult, fcm, fcm_memberships, kmeans
from fedclust.protocol.maths.rows import BLOCK_ROWS


def _blobs(n_per: int, centers: list[list[float]], scale: float, seed: int) -> FloatArray:
    rng = np.random.default_rng(seed)
    C = np.asarray(centers, dtype=float)
    return np.vstack([c + scale * rng.standard_normal((n_per, C.shape[1])) for c in C])


def _naive_fcm(X: FloatArray, C: FloatArray, m: float, n_iter: int) -> FloatArray:
    """Textbook dense FCM (Bezdek eqs.), written directly from the formulas, no chunks."""
    for _ in range(n_iter):
        d2 = ((X[:, None, :] - C[None, :, :]) ** 2).sum(axis=2)
        inv = d2 ** (-1.0 / (m - 1.0))
        U = inv / inv.sum(axis=1, keepdims=True)
        W = U**m
        C = (W.T @ X) / W.sum(axis=0)[:, None]
    return C


# -- hand-worked cases -----------------------------------------------------------------------


def test_two_far_pairs_give_the_pair_means() -> None:
    # Pairs {(0,0),(0,1)} and {(1000,0),(1000,1)}. By symmetry the centers lie on y = 0.5; a
    # point's membership to the far center is about d_near²/d_far² = 0.25/1e6, so its weight
    # u^2 ≈ 6e-14 pulls a center by at most ~6e-14 · 1000 ≈ 6e-11: within 1e-6 of the means.
    X = np.array([[0.0, 0.0], [0.0, 1.0], [1000.0, 0.0], [1000.0, 1.0]])
    result = fcm(X, 2, seed=0)
    centers = result.centers[np.argsort(result.centers[:, 0])]
    np.testing.assert_allclose(centers, [[0.0, 0.5], [1000.0, 0.5]], atol=1e-6)
    assert result.converged
    # J_2 = four points at squared distance 0.25 from their center (membership ≈ 1).
    assert result.objective == pytest.approx(1.0, rel=1e-6)


def test_memberships_by_hand() -> None:
    # Point 0 at distance 1 from c0 and 2 from c1: u = (1/1)/(1/1 + 1/4) = 0.8 and 0.2 (m=2).
    # Point 1 equidistant: 0.5/0.5. Point 2 on c1: membership 1 there (zero distance rule).
    C = np.array([[0.0, 0.0], [3.0, 0.0]])
    X = np.array([[1.0, 0.0], [1.5, 0.0], [3.0, 0.0]])
    U = fcm_memberships(X, C, m=2.0)
    np.testing.assert_allclose(U, [[0.8, 0.2], [0.5, 0.5], [0.0, 1.0]], atol=1e-12)
    # m = 3: power 1/(m-1) = 1/2 of the inverse squared distances: (1, 1/2) -> (2/3, 1/3).
    U3 = fcm_memberships(X[:1], C, m=3.0)
    np.testing.assert_allclose(U3, [[2 / 3, 1 / 3]], atol=1e-12)


# -- agreement with independent implementations ----------------------------------------------


def test_matches_naive_dense_fcm_across_chunks() -> None:
    # More rows than one block, so the block loop is exercised; the dense formula differs
    # only in summation order, so 1e-10 (relative to coordinates of order 1-10) suffices.
    X = _blobs(BLOCK_ROWS // 3 + 7, [[0, 0], [5, 5], [0, 6]], 1.0, seed=1)
    assert X.shape[0] > BLOCK_ROWS
    C0 = np.array([[1.0, 1.0], [4.0, 4.0], [0.0, 4.0]])
    ours = fcm(X, 3, init=C0, tol=0.0, max_iter=4)
    np.testing.assert_allclose(ours.centers, _naive_fcm(X, C0, 2.0, 4), atol=1e-10)
    assert ours.n_iter == 4
    assert not ours.converged


def test_matches_scikit_fuzzy() -> None:
    skfuzzy = pytest.importorskip("skfuzzy")
    X = _blobs(200, [[0, 0, 0], [4, 4, 0], [0, 4, 4]], 1.0, seed=2)
    C0 = X[[0, 250, 500]]
    # scikit-fuzzy starts from a membership matrix: U(C0) makes its first center update ours.
    U0 = fcm_memberships(X, C0, m=2.0)
    sk_centers = skfuzzy.cluster.cmeans(X.T, 3, 2.0, error=0.0, maxiter=10, init=U0.T)[0]
    ours = fcm(X, 3, init=C0, tol=0.0, max_iter=10)
    # scikit-fuzzy clips memberships at machine epsilon (2.2e-16); with these well-separated
    # blobs no membership is that small, so the remaining difference is rounding: 1e-9.
    np.testing.assert_allclose(ours.centers, sk_centers, atol=1e-9)


# -- the stopping rule, restarts and seeding --------------------------------------------------


def test_stops_on_frobenius_norm_of_membership_change() -> None:
    X = _blobs(100, [[0, 0], [3, 3]], 1.0, seed=3)
    C0 = np.array([[1.0, 0.0], [0.0, 1.0]])
    tol = 1e-4
    result = fcm(X, 2, init=C0, tol=tol)
    t = result.n_iter
    assert result.converged and t >= 3

    def centers_after(n: int) -> FloatArray:
        return C0 if n == 0 else fcm(X, 2, init=C0, tol=0.0, max_iter=n).centers

    def change(n: int) -> float:  # ||U_n - U_{n-1}||_F, U_n = U(C_{n-1})
        a = fcm_memberships(X, centers_after(n - 1))
        b = fcm_memberships(X, centers_after(n - 2))
        return float(np.linalg.norm(a - b))

    assert change(t) < tol <= change(t - 1)
    np.testing.assert_array_equal(result.centers, centers_after(t))


def test_restarts_keep_the_lowest_objective_and_are_seedable() -> None:
    X = _blobs(60, [[0, 0], [4, 0], [0, 4], [4, 4], [2, 2]], 0.8, seed=4)
    single = fcm(X, 5, init="random", seed=7)
    several = fcm(X, 5, init="random", n_init=6, seed=7)
    # The first of the six starts is the single run's start (same seed, same draws).
    assert several.objective <= single.objective
    again = fcm(X, 5, init="random", n_init=6, seed=7)
    np.testing.assert_array_equal(several.centers, again.centers)
    assert isinstance(several, FCMResult)


def test_kmeanspp_init_recovers_blobs() -> None:
    X = _blobs(100, [[0, 0], [10, 0], [0, 10]], 1.0, seed=5)
    labels = np.repeat(np.arange(3), 100)
    result = fcm(X, 3, seed=0)
    assert adjusted_rand_score(labels, nearest(X, result.centers)) == 1.0


def test_kmeans_reference() -> None:
    X = _blobs(100, [[0, 0], [10, 0], [0, 10]], 1.0, seed=6)
    labels = np.repeat(np.arange(3), 100)
    centers, found = kmeans(X, 3, seed=0)
    assert centers.shape == (3, 2)
    assert found.shape == (300,)
    assert adjusted_rand_score(labels, found) == 1.0


# -- validation messages --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"k": 0}, "The 'k' parameter of fcm must be an int in the range [1, inf)"),
        ({"m": 1.0}, "The 'm' parameter of fcm must be a float in the range (1.0, inf)"),
        ({"tol": -1.0}, "The 'tol' parameter of fcm must be a float in the range [0.0, inf)"),
        ({"max_iter": 0}, "The 'max_iter' parameter of fcm must be an int"),
        ({"n_init": 0}, "The 'n_init' parameter of fcm must be an int"),
        ({"init": "kmeans"}, "The 'init' parameter of fcm must be 'k-means++', 'random'"),
        ({"init": np.zeros((2, 2))}, "init must have k=3 rows; got shape (2, 2)."),
        ({"init": np.zeros((3, 1))}, "init must have n_features=2 columns; got shape (3, 1)."),
        ({"k": 11}, "X has n_samples=10, which should be >= k=11."),
    ],
)
def test_fcm_validation(kwargs: dict[str, object], message: str) -> None:
    X = np.arange(20.0).reshape(10, 2)
    args: dict[str, object] = {"k": 3, **kwargs}
    with pytest.raises(ValueError) as info:
        fcm(X, **args)  # type: ignore[arg-type]
    assert message in str(info.value)


def test_non_finite_and_misshapen_data_are_rejected() -> None:
    X = np.ones((5, 2))
    X[2, 1] = np.nan
    with pytest.raises(ValueError, match="X contains NaN or infinity"):
        fcm(X, 2)
    with pytest.raises(ValueError, match="X must be a 2-D array"):
        fcm(np.ones(5), 2)
    with pytest.raises(ValueError, match="centers must have n_features=2 columns"):
        fcm_memberships(np.ones((5, 2)), np.ones((2, 3)))
    with pytest.raises(ValueError, match="The 'k' parameter of kmeans"):
        kmeans(np.ones((5, 2)), 0)
