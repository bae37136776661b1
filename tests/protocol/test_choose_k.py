"""Choosing K (Stallmann & Wilbik 2022, §2.2.3): selection rules, rule of thumb, local sweep."""

from __future__ import annotations

import math

import numpy as np
import pytest

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


def test_elbow_of_a_rising_curve() -> None:
    assert select_elbow([1, 2, 3, 4], [0.1, 0.8, 0.9, 0.95]) == 2


def test_elbow_of_a_straight_or_flat_curve_is_the_smallest_k() -> None:
    assert select_elbow([2, 3, 4, 5], [5.0, 4.0, 3.0, 2.0]) == 2
    assert select_elbow([2, 3, 4], [1.0, 1.0, 1.0]) == 2


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
