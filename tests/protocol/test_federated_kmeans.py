"""Federated k-means of Garst & Reinders (2023), Alg. 1: participant and server steps."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from numpy.typing import NDArray

from fedclust.protocol.maths.center_kmeans import LocalPoints, PointsOracle, center_kmeans
from fedclust.protocol.maths.federated_kmeans import (
    ClusterMeans,
    match_centers,
    match_order,
    participant_init,
    participant_step,
)


def _blobs(seed: int = 0) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Two tight blobs 100 apart (30 and 20 rows) and their exact means."""
    rng = np.random.default_rng(seed)
    a = rng.normal(0.0, 0.1, size=(30, 2))
    b = rng.normal(100.0, 0.1, size=(20, 2))
    return np.vstack([a, b]), np.array([a.mean(axis=0), b.mean(axis=0)])


# -- participant_init -----------------------------------------------------------------------


def test_init_with_one_seed_per_row_sends_nothing_under_p2() -> None:
    # k = N: every k-means++ seed is a row, the Lloyd step leaves one row per cluster, so
    # with p = 2 no cluster may leave; with p = 1 all five do, each of size 1.
    X = np.array([[0.0, 0.0], [1.0, 0.0], [5.0, 5.0], [9.0, 1.0], [3.0, 7.0]])
    none = participant_init(X, 5, p=2, seed=0)
    assert none.means.shape == (0, 2)
    assert none.counts.shape == (0,)
    every = participant_init(X, 5, p=1, seed=0)
    assert sorted(every.counts.tolist()) == [1, 1, 1, 1, 1]
    np.testing.assert_allclose(np.sort(every.means, axis=0), np.sort(X, axis=0))


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("p", [2, 3, 5])
def test_init_never_reports_a_cluster_smaller_than_p(seed: int, p: int) -> None:
    X = np.random.default_rng(seed).normal(size=(25, 3))
    out = participant_init(X, 8, p=p, seed=seed)
    assert out.counts.shape[0] == out.means.shape[0] <= 8
    assert (out.counts >= p).all()
    assert out.counts.sum() <= 25


def test_init_reports_exact_cluster_means_and_sizes() -> None:
    # Blobs 100 apart: k-means++ puts one seed in each (the chance of the second seed in the
    # same blob is ~1e-6), and one Lloyd step gives the blob means exactly.
    X, means = _blobs()
    out = participant_init(X, 2, seed=1)
    order = np.argsort(out.means[:, 0])
    np.testing.assert_allclose(out.means[order], means, rtol=0, atol=1e-12)
    assert out.counts[order].tolist() == [30, 20]


def test_init_caps_seeds_at_n_samples() -> None:
    X = np.array([[0.0], [0.1], [10.0], [10.2]])
    out = participant_init(X, 16, p=1, seed=0)
    assert out.means.shape[0] <= 4


def test_cluster_means_is_frozen() -> None:
    out = participant_init(np.zeros((3, 1)) + np.arange(3)[:, None], 1, seed=0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        out.counts = np.array([1])  # type: ignore[misc]


# -- participant_step -----------------------------------------------------------------------


def test_step_drops_global_centers_without_local_rows() -> None:
    # Hand case: rows near (0, 0.5) and (10, 10.5); the third global center has no row.
    X = np.array([[0.0, 0.0], [0.0, 1.0], [10.0, 10.0], [10.0, 11.0]])
    C = np.array([[0.0, 0.4], [10.0, 10.6], [50.0, 50.0]])
    out = participant_step(X, C)
    np.testing.assert_allclose(out.means, [[0.0, 0.5], [10.0, 10.5]])
    assert out.counts.tolist() == [2, 2]


def test_step_withholds_clusters_below_p() -> None:
    X = np.array([[0.0, 0.0], [0.0, 2.0], [10.0, 10.0]])
    C = np.array([[0.0, 1.0], [10.0, 10.0]])
    out = participant_step(X, C, p=2)
    np.testing.assert_allclose(out.means, [[0.0, 1.0]])
    assert out.counts.tolist() == [2]
    assert participant_step(X, C, p=3).means.shape == (0, 2)


def test_step_is_one_lloyd_iteration() -> None:
    # Every center keeps rows: the step equals c_i <- mean of the rows nearest to c_i.
    rng = np.random.default_rng(3)
    X = rng.normal(size=(200, 2))
    C = np.array([[-1.0, 0.0], [1.0, 0.0]])
    out = participant_step(X, C, p=1)
    lab = np.argmin(((X[:, None, :] - C[None]) ** 2).sum(axis=2), axis=1)
    expect = np.array([X[lab == i].mean(axis=0) for i in range(2)])
    np.testing.assert_allclose(out.means, expect, rtol=0, atol=1e-12)
    assert out.counts.tolist() == [int((lab == 0).sum()), int((lab == 1).sum())]


# -- the server step: center_kmeans over the held means, weighted by the sizes ----------------


def _server(
    contributions: list[ClusterMeans], k: int, init: np.ndarray | None = None
) -> np.ndarray:
    held = [LocalPoints(c.means, c.counts.astype(np.float64)) for c in contributions]
    found = center_kmeans(PointsOracle(held), k, contributions[0].means.shape[1], init=init)
    return found.centers


def test_server_with_k1_is_the_weighted_mean() -> None:
    a = ClusterMeans(np.array([[0.0, 0.0], [4.0, 2.0]]), np.array([1, 3], dtype=np.int64))
    b = ClusterMeans(np.array([[10.0, -2.0]]), np.array([4], dtype=np.int64))
    C = _server([a, b], 1)
    expect = (1 * np.array([0.0, 0.0]) + 3 * np.array([4.0, 2.0]) + 4 * np.array([10.0, -2.0])) / 8
    np.testing.assert_allclose(C, expect[None, :], rtol=0, atol=1e-12)


def test_server_warm_start_hand_case() -> None:
    # Means 0, 1 (weight 3), 10, 11 from init (0, 10): the weighted Lloyd fixed point is
    # (0·1 + 1·3)/4 = 0.75 and (10 + 11)/2 = 10.5.
    a = ClusterMeans(np.array([[0.0], [10.0]]), np.array([1, 1], dtype=np.int64))
    b = ClusterMeans(np.array([[1.0], [11.0]]), np.array([3, 1], dtype=np.int64))
    C = _server([a, b], 2, init=np.array([[0.0], [10.0]]))
    np.testing.assert_allclose(C, [[0.75], [10.5]], rtol=0, atol=1e-12)


def test_server_recovers_centers_from_split_clusters() -> None:
    # Two participants each hold parts of three clusters; the size-weighted means of the
    # parts are the pooled cluster means.
    a = ClusterMeans(np.array([[0.0, 0.0], [20.0, 0.0]]), np.array([10, 2], dtype=np.int64))
    b = ClusterMeans(
        np.array([[1.0, 1.0], [22.0, 0.0], [0.0, 30.0]]), np.array([10, 2, 5], dtype=np.int64)
    )
    C = _server([a, b], 3)
    C = C[np.lexsort((C[:, 1], C[:, 0]))]
    np.testing.assert_allclose(C, [[0.0, 30.0], [0.5, 0.5], [21.0, 0.0]], atol=1e-12)


def test_match_centers_undoes_a_permutation() -> None:
    ref = np.array([[0.0, 0.0], [5.0, 5.0], [9.0, 0.0]])
    new = ref[[2, 0, 1]] + 0.01
    np.testing.assert_allclose(match_centers(new, ref), ref + 0.01)
    np.testing.assert_array_equal(match_order(new, ref), [1, 2, 0])


def test_server_reports_fewer_centers_than_k_when_means_are_too_few() -> None:
    a = ClusterMeans(np.array([[0.0], [1.0]]), np.array([2, 2], dtype=np.int64))
    b = ClusterMeans(np.array([[1.0]]), np.array([5], dtype=np.int64))
    np.testing.assert_allclose(np.sort(_server([a, b], 3)[:, 0]), [0.0, 1.0])
