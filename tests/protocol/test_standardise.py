"""Tests of protocol.maths.standardise: federated z-scores equal pooled z-scores."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from numpy.typing import NDArray

from fedclust.core.errors import ProtocolError
from fedclust.protocol.maths.standardise import (
    MomentSums,
    add_moments,
    apply,
    combine_moments,
    participant_moments,
)


def _pooled(X: NDArray[np.float64]) -> NDArray[np.float64]:
    out: NDArray[np.float64] = (X - X.mean(axis=0)) / X.std(axis=0)
    return out  # ddof=0, two-pass numpy


def test_hand_worked() -> None:
    m = participant_moments([[1.0, 10.0], [3.0, 10.0]])
    np.testing.assert_array_equal(m.sum, [4.0, 20.0])
    np.testing.assert_array_equal(m.sum_sq, [10.0, 200.0])
    mean, scale = combine_moments([m], 2)
    np.testing.assert_array_equal(mean, [2.0, 10.0])
    np.testing.assert_array_equal(scale, [1.0, 1.0])  # std 1; constant column -> 1


def test_sums_do_not_carry_the_count() -> None:
    # N_l travels only to the counting service; the moments message holds no row count.
    assert {f.name for f in dataclasses.fields(MomentSums)} == {"sum", "sum_sq", "shift"}


def test_federated_equals_pooled() -> None:
    rng = np.random.default_rng(0)
    X = rng.normal(loc=[5.0, -3.0, 100.0], scale=[1.0, 0.1, 20.0], size=(500, 3))
    parts = np.split(X, [50, 320])
    mean, scale = combine_moments([participant_moments(P) for P in parts], X.shape[0])
    fed = np.vstack([apply(P, mean, scale) for P in parts])
    # 1e-12: both are ~1e-15-accurate; the one-pass variance of these well-centred columns
    # loses at most a few ulps times mean²/var ≈ 25 (column 0).
    np.testing.assert_allclose(fed, _pooled(X), rtol=0, atol=1e-12)


def test_shifted_sums_survive_a_large_offset() -> None:
    rng = np.random.default_rng(1)
    X = 1e9 + rng.normal(size=(1000, 2))
    parts = np.split(X, [400])
    N = X.shape[0]
    one_pass_mean, one_pass_scale = combine_moments([participant_moments(P) for P in parts], N)
    mean, scale = combine_moments(
        [participant_moments(P, shift=one_pass_mean) for P in parts], N
    )
    # Unshifted, var = Σx²/N - mean² cancels ~18 digits: the scale is rounding noise (or
    # flagged constant); shifted by the round-1 mean it matches numpy to ~1e-12 (the data
    # themselves carry only ~7 significant digits of spread around 1e9).
    np.testing.assert_allclose(scale, X.std(axis=0), rtol=1e-6)
    assert not np.allclose(one_pass_scale, X.std(axis=0), rtol=1e-2)
    fed = np.vstack([apply(P, mean, scale) for P in parts])
    np.testing.assert_allclose(fed, _pooled(X), atol=1e-6)


def test_constant_column_gets_scale_one() -> None:
    X = np.column_stack([np.full(50, 0.1), np.linspace(0, 1, 50)])
    for shift in (None, [0.1 + 1e-17, 0.5]):
        mean, scale = combine_moments([participant_moments(X, shift=shift)], X.shape[0])
        assert scale[0] == 1.0
        np.testing.assert_allclose(apply(X, mean, scale)[:, 0], 0.0, atol=1e-15)


@settings(max_examples=60, deadline=None)
@given(
    X=arrays(
        np.float64,
        st.tuples(st.integers(2, 40), st.integers(1, 4)),
        elements=st.floats(-1e3, 1e3, allow_nan=False, allow_subnormal=False),
    ),
    cuts=st.lists(st.integers(0, 40), max_size=4),
)
def test_sums_over_any_split_equal_the_whole(X: NDArray[np.float64], cuts: list[int]) -> None:
    parts = [P for P in np.split(X, sorted(c % X.shape[0] for c in cuts)) if P.shape[0] > 0]
    whole = participant_moments(X)
    total = add_moments([participant_moments(P) for P in parts])
    np.testing.assert_array_equal(total.shift, whole.shift)
    # Summing <= 40 rows in another order changes a sum by at most 40·ε·Σ|term| (the
    # standard bound for recursive summation), per column.
    eps40 = 40 * np.finfo(np.float64).eps
    assert (np.abs(total.sum - whole.sum) <= eps40 * np.abs(X).sum(axis=0)).all()
    assert (np.abs(total.sum_sq - whole.sum_sq) <= eps40 * (X * X).sum(axis=0)).all()
    N = X.shape[0]
    mean, scale = combine_moments([participant_moments(P) for P in parts], N)
    np.testing.assert_allclose(mean, X.mean(axis=0), rtol=1e-12, atol=1e-9)
    assert (scale > 0).all()
    # The already-aggregated total is accepted too and gives exactly the same result.
    total_mean, total_scale = combine_moments([total], N)
    np.testing.assert_array_equal(total_mean, mean)
    np.testing.assert_array_equal(total_scale, scale)


def test_inconsistent_contributions_are_refused() -> None:
    a = participant_moments(np.ones((3, 2)))
    b = participant_moments(np.ones((3, 3)))
    with pytest.raises(ProtocolError, match="shape"):
        combine_moments([a, b], 6)
    c = participant_moments(np.ones((3, 2)), shift=[1.0, 1.0])
    with pytest.raises(ProtocolError, match="different shift"):
        combine_moments([a, c], 6)
    with pytest.raises(ProtocolError, match="no moment sums"):
        combine_moments([], 1)
    bad = MomentSums(sum=np.array([np.nan, 0.0]), sum_sq=np.zeros(2), shift=np.zeros(2))
    with pytest.raises(ProtocolError, match="NaN"):
        combine_moments([bad], 1)


@pytest.mark.parametrize("count", [0, -3, 2.5, True, None])
def test_total_count_must_be_a_positive_int(count: object) -> None:
    # ΣN_l comes from the counting service; zero rows, negative or non-int totals are refused.
    m = participant_moments(np.ones((3, 2)))
    message = (
        "The 'total_count' parameter of combine_moments must be an int in the range "
        f"[1, inf). Got {count!r} instead."
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        combine_moments([m], count)  # type: ignore[arg-type]


def test_apply_validates() -> None:
    X = np.ones((3, 2))
    with pytest.raises(ValueError, match=r"mean must have shape \(2,\)"):
        apply(X, [0.0], [1.0, 1.0])
    with pytest.raises(ValueError, match="scale must be positive"):
        apply(X, [0.0, 0.0], [1.0, 0.0])
    with pytest.raises(ValueError, match="scale contains NaN"):
        apply(X, [0.0, 0.0], [1.0, np.inf])
    with pytest.raises(ValueError, match="shift must have shape"):
        participant_moments(X, shift=[1.0, 2.0, 3.0])


def test_a_count_that_does_not_fit_the_sums_is_refused() -> None:
    # Rows {1, 1}: S1 = 2, S2 = 2. N = 2 fits (S1² = 4 <= N·S2 = 4); N = 1 cannot (4 > 2).
    sums = participant_moments(np.array([[1.0], [1.0]]))
    mean, _ = combine_moments([sums], 2)
    np.testing.assert_allclose(mean, [1.0])
    with pytest.raises(ProtocolError, match="cannot come from total_count rows"):
        combine_moments([sums], 1)
