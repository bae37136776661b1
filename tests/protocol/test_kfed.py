"""k-FED (Dennis et al. 2021): local centers and the one-shot server step."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.typing import NDArray

from fedclust.core.errors import ProtocolError
from fedclust.protocol.maths.kfed import _pruned_means, combine_kfed, participant_local_centers


def test_pruning_keeps_rows_three_times_closer_to_their_seed() -> None:
    # Seeds 0 and 10. Row 1: 1 vs 9 -> kept for seed 0; row 4: 4 vs 6 -> dropped (not 3x
    # closer); rows 10 and 11: kept for seed 10. Means: (0 + 1)/2 and (10 + 11)/2.
    X = np.array([[0.0], [1.0], [4.0], [10.0], [11.0]])
    out = _pruned_means(X, np.array([[0.0], [10.0]]))
    np.testing.assert_allclose(out, [[0.5], [10.5]])


def test_pruning_keeps_a_seed_without_qualifying_rows() -> None:
    X = np.array([[0.0], [5.0], [10.0]])
    out = _pruned_means(X, np.array([[4.0], [6.0]]))  # every row is ambiguous
    np.testing.assert_allclose(out, [[4.0], [6.0]])


def test_local_centers_recover_separated_blobs() -> None:
    rng = np.random.default_rng(0)
    true = np.array([[0.0, 0.0], [50.0, 0.0], [0.0, 50.0]])
    X = np.vstack([c + rng.normal(0.0, 0.5, size=(40, 2)) for c in true])
    C = participant_local_centers(X, 3, seed=1)
    C = C[np.lexsort((C[:, 1], C[:, 0]))]
    expect = np.array([X[80:].mean(axis=0), X[:40].mean(axis=0), X[40:80].mean(axis=0)])
    np.testing.assert_allclose(C, expect, atol=1e-9)


def test_local_centers_cap_at_n_samples() -> None:
    X = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    assert participant_local_centers(X, 16, seed=0).shape == (3, 2)


def test_combine_hand_case() -> None:
    # Whichever participant starts: seeds {(0,0),(10,0)} or {(0,9),(10,0)} (farthest from
    # (0,9) is (10,0): 181 > 81); Lloyd on the three local centers groups (0,0) with (0,9)
    # -> (0,4.5), and (10,0) alone.
    local = [np.array([[0.0, 0.0], [10.0, 0.0]]), np.array([[0.0, 9.0]])]
    for seed in range(6):
        C = combine_kfed(local, 2, seed=seed)
        C = C[np.argsort(C[:, 0])]
        np.testing.assert_allclose(C, [[0.0, 4.5], [10.0, 0.0]])


def test_combine_with_k_equal_to_all_centers_returns_them() -> None:
    local = [np.array([[0.0, 0.0], [10.0, 0.0]]), np.array([[0.0, 10.0]])]
    C = combine_kfed(local, 3, seed=0)
    np.testing.assert_allclose(
        C[np.lexsort((C[:, 1], C[:, 0]))], [[0.0, 0.0], [0.0, 10.0], [10.0, 0.0]]
    )


def test_combine_requires_enough_local_centers() -> None:
    local = [np.array([[0.0, 0.0]]), np.array([[1.0, 0.0]])]
    with pytest.raises(ProtocolError, match=r"at least k=3 local centers .* got 2"):
        combine_kfed(local, 3)
    with pytest.raises(ProtocolError, match="fewer than k=2 distinct"):
        combine_kfed([np.zeros((1, 2)), np.zeros((1, 2))], 2)


@pytest.mark.parametrize(
    ("local", "match"),
    [
        ([], "at least one participant"),
        ([np.array([[np.nan, 0.0]])], "NaN or infinity"),
        ([np.zeros(3)], "2-D array"),
        ([np.zeros((2, 2)), np.zeros((2, 3))], "n_features=3"),
    ],
)
def test_combine_rejects_bad_local_centers(
    local: list[NDArray[np.float64]], match: str
) -> None:
    with pytest.raises(ProtocolError, match=match):
        combine_kfed(local, 1)


def test_participant_validates_input() -> None:
    with pytest.raises(ValueError, match="NaN or infinity"):
        participant_local_centers(np.array([[np.nan]]), 1)
    with pytest.raises(ValueError, match="'k_local' parameter"):
        participant_local_centers(np.zeros((3, 1)), 0)
    with pytest.raises(ValueError, match="'k' parameter of combine_kfed"):
        combine_kfed([np.zeros((2, 1))], 0)


def test_no_center_of_a_cluster_smaller_than_p_is_sent() -> None:
    # Ten rows, ten clusters: every center would be a data point. With p = 2 none is sent.
    X = np.arange(20.0).reshape(10, 2)
    assert participant_local_centers(X, 10, seed=0).shape == (10, 2)
    assert participant_local_centers(X, 10, p=2, seed=0).shape == (0, 2)
    two_blobs = np.vstack([np.zeros((5, 2)), np.ones((5, 2)) * 9.0])
    kept = participant_local_centers(two_blobs, 2, p=5, seed=0)
    np.testing.assert_allclose(np.sort(kept[:, 0]), [0.0, 9.0])
