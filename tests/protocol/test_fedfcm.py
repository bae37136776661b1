"""Participant and coordinator maths of FedFCM (Stallmann & Wilbik 2022, §2.2.1)."""

from __future__ import annotations

import numpy as np
import pytest

from fedclust.core.errors import ProtocolError
from fedclust.core.validation import FloatArray
from fedclust.protocol.maths._fuzzy import memberships, objective
from fedclust.protocol.maths.center_kmeans import LocalPoints, PointsOracle, center_kmeans
from fedclust.protocol.maths.fcm import fcm
from fedclust.protocol.maths.fedfcm import (
    LocalCenters,
    combine_federated_average,
    participant_local_fcm,
)

TRUE = np.array([[0.2, 0.2], [0.8, 0.2], [0.5, 0.8]])


def _blobs(seed: int, n: int = 150, sd: float = 0.03) -> FloatArray:
    rng = np.random.default_rng(seed)
    return np.vstack([c + sd * rng.standard_normal((n, 2)) for c in TRUE])


def _answer(centers: list[list[float]], weights: list[float]) -> LocalCenters:
    return LocalCenters(
        centers=np.array(centers, dtype=np.float64),
        weights=np.array(weights, dtype=np.float64),
        global_objective=0.0,
        n_iter=1,
    )


def test_local_fcm_from_good_centers_stays_there() -> None:
    X = _blobs(0)
    out = participant_local_fcm(X, TRUE, m=2.0, tol=1e-6, max_iter=1000)
    # Well-separated blobs (sd 0.03, centers >= 0.6 apart): FCM centers are the blob means up
    # to the tiny pull of the other blobs' memberships; sample means are within ~3 sd/sqrt(150)
    # ≈ 0.008 of TRUE, so 0.01 is a real bound.
    assert np.abs(out.centers - TRUE).max() < 0.01
    # Same algorithm as central FCM from the same start: identical answer.
    ref = fcm(X, 3, m=2.0, tol=1e-6, max_iter=1000, init=TRUE)
    np.testing.assert_allclose(out.centers, ref.centers, rtol=0, atol=1e-12)
    assert out.n_iter == ref.n_iter


def test_local_fcm_reports_supports_and_objective_of_received_centers() -> None:
    X = _blobs(1)
    start = TRUE + 0.05
    out = participant_local_fcm(X, start, m=2.0, tol=1e-4, max_iter=1000)
    # Supports are Σ_j u_jk (power 1) at the local centers: they sum to N.
    np.testing.assert_allclose(out.weights, memberships(X, out.centers, 2.0).sum(axis=0))
    assert out.weights.sum() == pytest.approx(X.shape[0], rel=1e-12)
    # J_m is that of the centers the participant received, not of its local ones.
    assert out.global_objective == pytest.approx(objective(X, start, 2.0), rel=1e-12)
    assert out.global_objective > objective(X, out.centers, 2.0)


def test_local_fcm_validates_inputs() -> None:
    X = _blobs(2)
    with pytest.raises(ValueError, match="'m' parameter of participant_local_fcm"):
        participant_local_fcm(X, TRUE, m=1.0, tol=1e-4, max_iter=10)
    with pytest.raises(ValueError, match="n_features=2"):
        participant_local_fcm(X, np.zeros((3, 3)), m=2.0, tol=1e-4, max_iter=10)


def _kmeans_average(local: list[LocalCenters], init: FloatArray | None) -> FloatArray:
    """k-means averaging as the driver runs it: unit weights on every local center."""
    held = [LocalPoints(a.centers, np.ones(len(a.centers))) for a in local]
    return center_kmeans(PointsOracle(held), local[0].centers.shape[0], 2, init=init).centers


def test_kmeans_average_of_identical_local_centers_returns_them() -> None:
    local = [_answer(TRUE.tolist(), [1.0, 1.0, 1.0]) for _ in range(3)]
    np.testing.assert_allclose(_kmeans_average(local, TRUE), TRUE, atol=1e-12)
    # Seeding by splits finds the same three points, in some order.
    free = _kmeans_average(local, None)
    np.testing.assert_allclose(np.sort(free, axis=0), np.sort(TRUE, axis=0), atol=1e-12)


def test_kmeans_average_groups_by_position_not_index_and_is_unweighted() -> None:
    # Participant b lists its centers in another order and with very different supports;
    # k-means groups by position, so each global center is the plain mean of its group.
    a = _answer([[0.0, 0.0], [1.0, 1.0]], [100.0, 1.0])
    b = _answer([[1.2, 1.0], [0.2, 0.0]], [1.0, 100.0])
    out = _kmeans_average([a, b], np.array([[0.05, 0.0], [1.05, 1.0]]))
    np.testing.assert_allclose(out, [[0.1, 0.0], [1.1, 1.0]], atol=1e-12)


def test_federated_average_by_hand() -> None:
    a = _answer([[0.0], [10.0]], [1.0, 3.0])
    b = _answer([[2.0], [14.0]], [3.0, 1.0])
    out = combine_federated_average([a, b])
    # c_0 = (0·1 + 2·3)/4 = 1.5, c_1 = (10·3 + 14·1)/4 = 11.
    np.testing.assert_allclose(out, [[1.5], [11.0]], rtol=0, atol=1e-12)


def test_federated_average_averages_by_index() -> None:
    # The same two positions listed in opposite orders average to the midpoint: the
    # baseline's weakness when cluster indices disagree between participants.
    a = _answer([[0.0, 0.0], [1.0, 1.0]], [1.0, 1.0])
    b = _answer([[1.0, 1.0], [0.0, 0.0]], [1.0, 1.0])
    np.testing.assert_allclose(combine_federated_average([a, b]), 0.5, atol=1e-12)


def test_federated_average_keeps_previous_center_without_support() -> None:
    a = _answer([[0.0], [5.0]], [2.0, 0.0])
    b = _answer([[4.0], [7.0]], [2.0, 0.0])
    out = combine_federated_average([a, b], [[9.0], [3.0]])
    np.testing.assert_allclose(out, [[2.0], [3.0]], atol=1e-12)


def test_combiners_reject_inconsistent_answers() -> None:
    a = _answer([[0.0, 0.0], [1.0, 1.0]], [1.0, 1.0])
    b = _answer([[0.0, 0.0]], [1.0])
    with pytest.raises(ProtocolError, match="expected"):
        combine_federated_average([a, b])
    with pytest.raises(ProtocolError, match="every participant is missing"):
        combine_federated_average([])
    bad = _answer([[0.0, 0.0], [1.0, 1.0]], [1.0, -1.0])
    with pytest.raises(ProtocolError, match="negative"):
        combine_federated_average([bad])
