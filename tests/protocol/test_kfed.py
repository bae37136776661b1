"""k-FED (Dennis et al. 2021): local centers and the one-shot server step."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.typing import NDArray

from fedclust.core.errors import ProtocolError
from fedclust.protocol.maths.kfed import (
    _pruned_means,
    combine_kfed,
    combine_kfed_dennis,
    dennis_local_centers,
    participant_local_centers,
)


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


# -- k-FED as Dennis et al. write it ("kfed-dennis") -------------------------------------------
def _blob_federation(seed: int) -> tuple[list[NDArray[np.float64]], NDArray[np.float64]]:
    """Three participants, each holding two of four well-separated blobs (k' = 2 < k = 4)."""
    rng = np.random.default_rng(seed)
    true = np.array([[0.0, 0.0], [40.0, 0.0], [0.0, 40.0], [40.0, 40.0]])
    holds = [(0, 1), (1, 2), (2, 3)]
    parts = [np.vstack([true[c] + rng.normal(0.0, 1.0, size=(60, 2)) for c in h]) for h in holds]
    return parts, true


def test_dennis_recovers_separated_blobs() -> None:
    parts, true = _blob_federation(0)
    local = [dennis_local_centers(X, 2, seed=i) for i, X in enumerate(parts)]
    for X, C in zip(parts, local, strict=True):  # each participant finds its own two blobs
        blobs = np.array([X[:60].mean(axis=0), X[60:].mean(axis=0)])
        order = np.argsort(np.linalg.norm(C[:, None, :] - blobs[None], axis=2), axis=0)[0]
        np.testing.assert_allclose(C[order], blobs, atol=1e-9)
    for seed in range(5):
        C = combine_kfed_dennis(local, 4, seed=seed)
        # Every true blob has exactly one global center within 1 of it.
        d = np.linalg.norm(C[:, None, :] - true[None], axis=2)
        assert sorted(np.argmin(d, axis=0).tolist()) == [0, 1, 2, 3]
        assert d.min(axis=0).max() < 1.0


def test_dennis_is_deterministic_for_a_seed() -> None:
    parts, _ = _blob_federation(1)
    rng = np.random.default_rng(3)
    X = np.vstack([parts[0], rng.normal(20.0, 15.0, size=(80, 2))])  # no clear structure
    a, b = dennis_local_centers(X, 5, seed=7), dennis_local_centers(X, 5, seed=7)
    np.testing.assert_array_equal(a, b)
    local = [a, dennis_local_centers(parts[1], 3, seed=2)]
    np.testing.assert_array_equal(
        combine_kfed_dennis(local, 4, seed=11), combine_kfed_dennis(local, 4, seed=11)
    )


def test_dennis_local_edge_cases() -> None:
    X = np.array([[0.0, 0.0], [2.0, 0.0], [4.0, 3.0]])
    np.testing.assert_allclose(dennis_local_centers(X, 1, seed=0), [X.mean(axis=0)])
    np.testing.assert_array_equal(dennis_local_centers(X, 3, seed=0), X)  # every row its own
    assert dennis_local_centers(X, 3, p=2, seed=0).shape == (0, 2)  # no cluster of >= 2 rows


def test_dennis_server_takes_one_lloyd_step() -> None:
    # 1-D local centers A = {0, 1}, B = {3}, C = {10}, k = 2. Starting from A: seeds {0, 1};
    # 3 and 10 go to 1, so ONE step gives (0, 14/3). Starting from B ({3, 10}) or C ({10, 0}):
    # (4/3, 10). Lloyd to convergence ("kfed") reaches (4/3, 10) from every start.
    local = [np.array([[0.0], [1.0]]), np.array([[3.0]]), np.array([[10.0]])]
    seen = set()
    for seed in range(20):  # seeds 11 and 14 start from A
        one = np.sort(combine_kfed_dennis(local, 2, seed=seed)[:, 0])
        seen.add(tuple(np.round(one, 9)))
        np.testing.assert_allclose(np.sort(combine_kfed(local, 2, seed=seed)[:, 0]), [4 / 3, 10])
    assert seen == {(0.0, round(14 / 3, 9)), (round(4 / 3, 9), 10.0)}


def test_dennis_server_refuses_too_few_centers() -> None:
    with pytest.raises(ProtocolError, match="at least k=3 local centers"):
        combine_kfed_dennis([np.zeros((1, 2)), np.ones((1, 2))], 3, seed=0)
