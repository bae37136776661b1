"""External metrics: ARI, clustering accuracy, center distance, knowledge gap."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.spatial.distance import cdist
from sklearn.metrics import adjusted_rand_score

from fedclust.protocol.maths.metrics import (
    adjusted_rand,
    center_distance,
    client_weighted_ari,
    clustering_accuracy,
    knowledge_gap,
)

# Hand-worked values; a few float64 operations are exact to ~1e-15.
EXACT = 1e-12


def test_accuracy_is_one_under_any_relabelling() -> None:
    y = np.array([0, 0, 1, 1, 1, 2, 2, 2, 2])
    relabel = {0: 7, 1: 3, 2: 5}
    assert clustering_accuracy(y, [relabel[v] for v in y]) == 1.0
    assert clustering_accuracy(["a", "a", "b"], [1, 1, 0]) == 1.0


def test_accuracy_by_hand() -> None:
    # Contingency (pred x true): pred 0 -> {t0: 2, t1: 1}, pred 1 -> {t1: 1, t2: 2}.
    # Best one-to-one: p0->t0 (2) + p1->t2 (2) = 4 of 6.
    y_true = [0, 0, 1, 1, 2, 2]
    y_pred = [0, 0, 0, 1, 1, 1]
    assert clustering_accuracy(y_true, y_pred) == pytest.approx(4 / 6, rel=EXACT)


def test_accuracy_with_different_numbers_of_clusters() -> None:
    # 3 true clusters, 2 predicted: only two can be matched -> 4 of 6.
    assert clustering_accuracy([0, 0, 1, 1, 2, 2], [0, 0, 0, 0, 1, 1]) == pytest.approx(
        4 / 6, rel=EXACT
    )
    # 2 true clusters split into 4 predicted: p0 -> t0 (2) and p3 -> t1 (2) -> 4 of 6.
    assert clustering_accuracy([0, 0, 0, 1, 1, 1], [0, 0, 1, 2, 3, 3]) == pytest.approx(
        4 / 6, rel=EXACT
    )


def test_adjusted_rand() -> None:
    y = [0, 0, 1, 1, 2, 2]
    assert adjusted_rand(y, [2, 2, 0, 0, 1, 1]) == pytest.approx(1.0, rel=EXACT)
    # Hand value: contingency [[1,1],[1,1]]: Σ C(n_ij,2) = 0, row and column sums give
    # Σ C(a,2) = Σ C(b,2) = 2, expected index 2·2/C(4,2) = 2/3, max index 2:
    # ARI = (0 - 2/3) / (2 - 2/3) = -0.5.
    assert adjusted_rand([0, 0, 1, 1], [0, 1, 0, 1]) == pytest.approx(-0.5, rel=EXACT)


def test_label_validation() -> None:
    with pytest.raises(ValueError, match="same length"):
        clustering_accuracy([0, 1], [0, 1, 1])
    with pytest.raises(ValueError, match="1-D"):
        adjusted_rand([[0, 1]], [[0, 1]])
    with pytest.raises(ValueError, match="at least one"):
        clustering_accuracy([], [])


def test_center_distance_is_zero_under_permutation() -> None:
    C = np.array([[0.0, 0.0], [3.0, 1.0], [-2.0, 5.0]])
    assert center_distance(C, C[[2, 0, 1]]) == 0.0


def test_center_distance_by_hand() -> None:
    C = np.array([[0.0, 0.0], [10.0, 0.0]])
    found = np.array([[10.0, 4.0], [3.0, 4.0]])  # matched: (0,0)-(3,4) = 5, (10,0)-(10,4) = 4
    assert center_distance(C, found) == pytest.approx(4.5, rel=EXACT)


def test_center_distance_matches_the_smaller_set() -> None:
    C = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])
    # Two found centers: each sits 1 away from a distinct true center; the third is ignored.
    found = np.array([[0.0, 11.0], [1.0, 0.0]])
    assert center_distance(C, found) == pytest.approx(1.0, rel=EXACT)
    assert center_distance(found, C) == pytest.approx(1.0, rel=EXACT)
    with pytest.raises(ValueError, match="n_features=2"):
        center_distance(C, np.zeros((2, 3)))


def test_knowledge_gap_by_hand() -> None:
    # Σ over the first set of the distance to the closest center of the second set.
    A = np.array([[0.0, 0.0], [1.0, 0.0]])
    B = np.array([[0.0, 1.0]])
    assert knowledge_gap(A, B) == pytest.approx(1.0 + math.sqrt(2.0), rel=EXACT)
    assert knowledge_gap(B, A) == pytest.approx(1.0, rel=EXACT)  # not symmetric
    assert knowledge_gap(A, A[::-1]) == 0.0


def test_knowledge_gap_standardised_matches_scipy() -> None:
    # The authors' code calls cdist(..., metric="seuclidean") with scipy's default variances
    # (ddof=1 over both sets stacked); scipy is the oracle here, float agreement to 1e-12.
    rng = np.random.default_rng(3)
    A = rng.normal(size=(4, 3))
    B = rng.normal(size=(5, 3)) * [1.0, 10.0, 0.1]
    expected = cdist(A, B, metric="seuclidean").min(axis=1).sum()
    assert knowledge_gap(A, B, metric="seuclidean") == pytest.approx(expected, rel=EXACT)
    with pytest.raises(ValueError, match="metric"):
        knowledge_gap(A, B, metric="cosine")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="vary"):
        knowledge_gap(np.zeros((1, 2)), np.zeros((2, 2)), metric="seuclidean")


def test_client_weighted_ari_by_hand() -> None:
    # Client a: its partition exactly (ARI 1, 4 rows); client b: one cluster for three
    # classes (ARI 0, 6 rows). Weighted by rows: (4·1 + 6·0) / 10.
    truth = [np.array([0, 0, 1, 1]), np.array([0, 0, 1, 1, 2, 2])]
    found = [np.array([5, 5, 3, 3]), np.zeros(6, dtype=int)]
    assert client_weighted_ari(truth, found) == pytest.approx(0.4, abs=EXACT)
    # The pooled ARI of the same labels is another number.
    pooled = adjusted_rand(np.concatenate(truth), np.concatenate(found))
    assert abs(pooled - 0.4) > 0.05


def test_client_weighted_ari_is_the_size_weighted_mean_of_sklearns_per_client() -> None:
    rng = np.random.default_rng(4)
    sizes = [7, 30, 120]
    truth = [rng.integers(0, 3, size=n) for n in sizes]
    found = [np.where(rng.random(n) < 0.7, t, rng.integers(0, 3, size=n))
             for n, t in zip(sizes, truth, strict=True)]
    per_client = [adjusted_rand_score(t, f) for t, f in zip(truth, found, strict=True)]
    expected = sum(n * a for n, a in zip(sizes, per_client, strict=True)) / sum(sizes)
    assert client_weighted_ari(truth, found) == pytest.approx(expected, abs=EXACT)


def test_client_weighted_ari_refuses_unmatched_clients() -> None:
    with pytest.raises(ValueError, match="one array per client"):
        client_weighted_ari([np.array([0, 1])], [])
    with pytest.raises(ValueError, match="at least one client"):
        client_weighted_ari([], [])
    with pytest.raises(ValueError, match="same length"):
        client_weighted_ari([np.array([0, 1])], [np.array([0])])
