"""Choosing K (Stallmann & Wilbik 2022, §2.2.3): selection rules, rule of thumb, local sweep."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedclust.core.validation import FloatArray
from fedclust.protocol.maths.choose_k import (
    k_range_rule_of_thumb,
    participant_local_k,
    select_elbow,
    select_minimum,
    soft_db_curve,
)


# -- select_minimum ------------------------------------------------------------------------------
def test_select_minimum() -> None:
    assert select_minimum([2, 3, 4, 5], [0.8, 0.5, 0.6, 0.7]) == 3


def test_select_minimum_ties_go_to_the_smallest_k() -> None:
    assert select_minimum([2, 3, 4, 5], [0.8, 0.5, 0.5, 0.7]) == 3
    # Unsorted input: the tie is still resolved by K, not by position.
    assert select_minimum([5, 4, 3, 2], [0.5, 0.9, 0.5, 0.7]) == 3


def test_select_minimum_accepts_infinity_but_not_nan() -> None:
    assert select_minimum([2, 3], [math.inf, 1.0]) == 3
    with pytest.raises(ValueError, match="scores"):
        select_minimum([2, 3], [math.nan, 1.0])
    with pytest.raises(ValueError, match="scores"):
        select_minimum([2, 3], [-math.inf, 1.0])


def test_curve_validation() -> None:
    with pytest.raises(ValueError, match="shape"):
        select_minimum([2, 3, 4], [1.0, 2.0])
    with pytest.raises(ValueError, match="distinct"):
        select_minimum([2, 2], [1.0, 2.0])
    with pytest.raises(ValueError, match="at least one"):
        select_minimum([], [])
    with pytest.raises(ValueError, match="'ks' parameter"):
        select_minimum([0, 1], [1.0, 2.0])


# -- select_elbow --------------------------------------------------------------------------------
def test_elbow_of_a_falling_curve_by_hand() -> None:
    # ks 1..5 scaled to x = 0, .25, .5, .75, 1; scores 10, 4, 3, 2.5, 2.2 scaled to
    # y = 1, .231, .103, .038, 0. Chord x + y = 1; |x + y - 1| = 0, .519, .397, .212, 0 -> K = 2.
    assert select_elbow([1, 2, 3, 4, 5], [10.0, 4.0, 3.0, 2.5, 2.2]) == 2


def test_elbow_of_a_piecewise_linear_curve() -> None:
    # Slope -2 up to K = 4, then -0.5: the kink at K = 4 is farthest from the chord.
    assert select_elbow([1, 2, 3, 4, 5, 6, 7], [10, 8, 6, 4, 3.5, 3, 2.5]) == 4


def test_elbow_of_a_rising_convex_curve() -> None:
    # x = 0, 1/3, 2/3, 1; y = 0, .056, .222, 1; chord y = x; depth x - y = 0, .278, .444, 0.
    assert select_elbow([1, 2, 3, 4], [0.1, 0.15, 0.3, 1.0]) == 3


def test_a_curve_with_no_point_below_its_chord_gives_its_lowest_score() -> None:
    # Concave, rising ever slower: every point is above the chord; the lowest score is K = 1
    # (the old two-sided rule took K = 2, the point farthest ABOVE the chord).
    assert select_elbow([1, 2, 3, 4], [0.1, 0.8, 0.9, 0.95]) == 1
    # Concave, falling ever faster: the last K.
    assert select_elbow([2, 3, 4, 5], [10.0, 9.9, 9.5, 5.0]) == 5
    # Straight: the lower end, not the smallest K (the worst score) as before.
    assert select_elbow([2, 3, 4, 5], [5.0, 4.0, 3.0, 2.0]) == 5
    assert select_elbow([2, 3, 4, 5], [2.0, 3.0, 4.0, 5.0]) == 2


def test_elbow_of_a_flat_curve_is_the_smallest_k() -> None:
    assert select_elbow([2, 3, 4], [1.0, 1.0, 1.0]) == 2
    assert select_elbow([4, 3, 2], [1.0, 1.0, 1.0]) == 2


def test_elbow_ties_go_to_the_smallest_k() -> None:
    # Scaled: y = 1, 2/7, 0, 1/7 at x = 0, 1/3, 2/3, 1; chord y = 1 - 6x/7. K = 3 and K = 4
    # lie on a line parallel to it, equally deep (3/7 each).
    assert select_elbow([2, 3, 4, 5], [3.0, 0.5, -0.5, 0.0]) == 3


def test_elbow_never_takes_a_bump() -> None:
    # A FedFuzzDB-like curve: minimum at K = 3, a bump peaking at K = 6. The chord from K = 2
    # to K = 9 is nearly flat; the old two-sided rule took the peak K = 6.
    ks = list(range(2, 10))
    scores = [0.736, 0.527, 0.976, 1.385, 1.438, 1.089, 0.950, 0.799]
    assert select_elbow(ks, scores) == 3


def _strict_local_maxima(y: FloatArray) -> set[int]:
    """Indices strictly above every neighbour (an end has one neighbour)."""
    n = y.shape[0]
    return {
        i for i in range(n)
        if (i == 0 or y[i] > y[i - 1]) and (i == n - 1 or y[i] > y[i + 1])
    }


def _on_lower_hull(x: FloatArray, y: FloatArray, i: int) -> bool:
    """No segment between a point left of i and one right of it passes strictly below i."""
    for j in range(i):
        for k in range(i + 1, x.shape[0]):
            t = (x[i] - x[j]) / (x[k] - x[j])
            if y[j] + t * (y[k] - y[j]) < y[i] - 1e-9 * (1.0 + abs(y[i])):
                return False
    return True


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(min_value=-1000, max_value=1000), min_size=3, max_size=12),
    st.integers(min_value=1, max_value=5),
)
def test_elbow_of_random_curves_is_on_the_lower_hull_and_no_local_maximum(
    values: list[int], step: int
) -> None:
    ks = [2 + step * i for i in range(len(values))]
    y = np.asarray(values, dtype=np.float64) / 100.0
    k = select_elbow(ks, y)
    i = ks.index(k)
    assert i not in _strict_local_maxima(y)
    assert _on_lower_hull(np.asarray(ks, dtype=np.float64), y, i)


def test_elbow_needs_three_finite_points() -> None:
    with pytest.raises(ValueError, match="at least 3"):
        select_elbow([2, 3], [1.0, 0.5])
    with pytest.raises(ValueError, match="finite"):
        select_elbow([2, 3, 4], [1.0, math.inf, 0.5])


# -- rule of thumb -------------------------------------------------------------------------------
def test_rule_of_thumb_by_hand() -> None:
    # K_min = min(3, 2, 5) = 2; K_max = 2 + max(3, 2, 5) = 7.
    assert k_range_rule_of_thumb([3, 2, 5]) == (2, 7)
    assert k_range_rule_of_thumb([4]) == (4, 8)


def test_rule_of_thumb_validation() -> None:
    with pytest.raises(ValueError, match="at least one"):
        k_range_rule_of_thumb([])
    with pytest.raises(ValueError, match="'local_ks' parameter"):
        k_range_rule_of_thumb([2, 0])


# -- local sweep ---------------------------------------------------------------------------------
def _blobs(seed: int, centers: list[tuple[float, float]], n: int, sd: float) -> FloatArray:
    rng = np.random.default_rng(seed)
    return np.vstack([rng.normal(c, sd, size=(n, 2)) for c in centers])


def test_local_k_finds_three_separated_blobs() -> None:
    X = _blobs(0, [(0.2, 0.2), (0.8, 0.2), (0.5, 0.8)], 80, 0.05)
    assert participant_local_k(X, 2, 6, seed=0) == 3


def test_local_k_finds_four_blobs_and_is_seed_reproducible() -> None:
    X = _blobs(1, [(0.0, 0.0), (1.0, 0.0), (0.0, 1.0), (1.0, 1.0)], 50, 0.08)
    assert participant_local_k(X, 2, 7, seed=3) == 4
    np.testing.assert_array_equal(
        soft_db_curve(X, [2, 3, 4], seed=5), soft_db_curve(X, [2, 3, 4], seed=5)
    )


def test_local_k_caps_k_at_the_number_of_rows() -> None:
    X = np.array([[0.0, 0.0], [0.1, 0.0], [5.0, 5.0]])
    k = participant_local_k(X, 2, 10, seed=0)
    assert 2 <= k <= 3


def test_local_k_validation() -> None:
    X = _blobs(0, [(0.0, 0.0)], 10, 1.0)
    with pytest.raises(ValueError, match="'k_min' parameter"):
        participant_local_k(X, 1, 4)
    with pytest.raises(ValueError, match="'k_max' parameter"):
        participant_local_k(X, 4, 3)
    with pytest.raises(ValueError, match="k_min=11"):
        participant_local_k(X, 11, 12)
