"""Exact federated FCM sums (Corcuera Bárcena et al. 2021), protocol.maths.exact_fcm."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from fedclust.core.errors import ProtocolError, RefusedError
from fedclust.core.validation import FloatArray
from fedclust.protocol.maths.exact_fcm import FCMSums, combine_sums, participant_sums
from fedclust.protocol.maths.fcm import fcm, fcm_memberships


def test_sums_by_hand() -> None:
    # Centers 0 and 3 on a line; x=1 has memberships (0.8, 0.2), x=1.5 has (0.5, 0.5) (m=2),
    # so U = (0.64 + 0.25, 0.04 + 0.25) and WS = (0.64·1 + 0.25·1.5, 0.04·1 + 0.25·1.5).
    X = np.array([[1.0], [1.5]])
    C = np.array([[0.0], [3.0]])
    s = participant_sums(X, C, m=2.0, enforce_rule=False)
    np.testing.assert_allclose(s.u_sum, [0.89, 0.29], atol=1e-12)
    np.testing.assert_allclose(s.weighted_sum, [[1.015], [0.415]], atol=1e-12)
    new = combine_sums([s], C)
    np.testing.assert_allclose(new, [[1.015 / 0.89], [0.415 / 0.29]], atol=1e-12)


def test_federated_rounds_equal_central_fcm() -> None:
    # §4.1: the combined sums are Bezdek's center update on the union, so R rounds from C0
    # equal R central iterations from C0; only the summation order differs: 1e-9.
    rng = np.random.default_rng(0)
    X = np.vstack([rng.normal(c, 1.0, size=(150, 3)) for c in (0.0, 4.0, 8.0)])
    rng.shuffle(X)
    parts = np.split(X, [11, 60, 240])  # unequal sizes 11, 49, 180, 210
    C = C0 = rng.uniform(0.0, 8.0, size=(3, 3))
    for _ in range(20):
        C = combine_sums([participant_sums(P, C) for P in parts], C)
    central = fcm(X, 3, init=C0, tol=0.0, max_iter=20)
    assert np.abs(C - central.centers).max() < 1e-9


# -- the privacy rule ------------------------------------------------------------------------


def test_refuses_when_n_at_most_c_f_plus_1_over_f() -> None:
    # F=1, C=2: C(F+1)/F = 4, so N=4 is refused (equality counts) and N=5 answers.
    C = np.array([[0.0], [1.0]])
    with pytest.raises(RefusedError) as info:
        participant_sums(np.arange(4.0).reshape(4, 1), C)
    message = str(info.value)
    assert "more than C(F+1)/F=4 rows for C=2 clusters of F=1 features" in message
    assert "N=" not in message  # the reason reaches the coordinator: no row count in it
    assert participant_sums(np.arange(5.0).reshape(5, 1), C).u_sum.shape == (2,)
    # F=2, C=3: 4.5 -> N=4 refused, N=5 answers.
    C3 = np.zeros((3, 2)) + np.arange(3.0)[:, None]
    with pytest.raises(RefusedError, match=r"C\(F\+1\)/F=4.5 rows for C=3 clusters of F=2"):
        participant_sums(np.ones((4, 2)), C3)
    participant_sums(np.ones((5, 2)), C3)


def test_rule_can_be_switched_off() -> None:
    s = participant_sums(np.ones((1, 2)), np.zeros((3, 2)), enforce_rule=False)
    np.testing.assert_allclose(s.u_sum, [1 / 9, 1 / 9, 1 / 9])


# -- combining -------------------------------------------------------------------------------


def test_combine_keeps_previous_center_where_mass_is_zero() -> None:
    previous = np.array([[0.0, 0.0], [7.0, 7.0]])
    a = FCMSums(u_sum=np.array([2.0, 0.0]), weighted_sum=np.array([[2.0, 4.0], [0.0, 0.0]]))
    b = FCMSums(u_sum=np.array([1.0, 0.0]), weighted_sum=np.array([[4.0, 2.0], [0.0, 0.0]]))
    new = combine_sums([a, b], previous)
    np.testing.assert_array_equal(new, [[2.0, 2.0], [7.0, 7.0]])


def test_far_center_gets_zero_mass_and_stays() -> None:
    # A center 1e200 away: its memberships underflow to exactly 0, so it keeps its place.
    X = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    C = np.array([[0.2, 0.2], [1e200, 1e200]])
    s = participant_sums(X, C, enforce_rule=False)
    assert s.u_sum[1] == 0.0
    new = combine_sums([s], C)
    np.testing.assert_array_equal(new[1], C[1])
    np.testing.assert_allclose(new[0], [0.5, 0.5], atol=1e-12)


def _ok() -> FCMSums:
    return FCMSums(u_sum=np.ones(2), weighted_sum=np.ones((2, 3)))


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (
            FCMSums(u_sum=np.ones(3), weighted_sum=np.ones((2, 3))),
            "contribution 1: u_sum must have shape (2,); got (3,).",
        ),
        (
            FCMSums(u_sum=np.ones(2), weighted_sum=np.ones((2, 4))),
            "contribution 1: weighted_sum must have shape (2, 3); got (2, 4).",
        ),
        (
            FCMSums(u_sum=np.array([1.0, np.nan]), weighted_sum=np.ones((2, 3))),
            "contribution 1 contains NaN or infinity.",
        ),
        (
            FCMSums(u_sum=np.ones(2), weighted_sum=np.full((2, 3), np.inf)),
            "contribution 1 contains NaN or infinity.",
        ),
        (
            FCMSums(u_sum=np.array([1.0, -1.0]), weighted_sum=np.ones((2, 3))),
            "contribution 1: u_sum must be non-negative.",
        ),
    ],
)
def test_combine_rejects_inconsistent_contributions(bad: FCMSums, message: str) -> None:
    with pytest.raises(ProtocolError) as info:
        combine_sums([_ok(), bad], np.zeros((2, 3)))
    assert str(info.value) == message


def test_combine_rejects_nothing_and_bad_previous_centers() -> None:
    with pytest.raises(ProtocolError, match="at least one contribution"):
        combine_sums([], np.zeros((2, 3)))
    with pytest.raises(ValueError, match="previous_centers contains NaN or infinity"):
        combine_sums([_ok()], np.full((2, 3), np.nan))


def test_participant_sums_validation() -> None:
    X = np.ones((10, 2))
    X[0, 0] = np.inf
    with pytest.raises(ValueError, match="X contains NaN or infinity"):
        participant_sums(X, np.zeros((2, 2)))
    with pytest.raises(ValueError, match="centers must have n_features=2 columns"):
        participant_sums(np.ones((10, 2)), np.zeros((2, 3)))
    with pytest.raises(ValueError, match="The 'm' parameter of participant_sums"):
        participant_sums(np.ones((10, 2)), np.zeros((2, 2)), m=0.5)


# -- additivity: the property the whole protocol rests on ------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    X=arrays(
        np.float64,
        st.tuples(st.integers(2, 40), st.integers(1, 4)),
        elements=st.floats(-100.0, 100.0, allow_nan=False),
    ),
    k=st.integers(1, 4),
    m=st.sampled_from([1.5, 2.0, 3.0]),
    seed=st.integers(0, 2**32 - 1),
)
def test_sums_over_any_split_equal_pooled_sums(
    X: FloatArray, k: int, m: float, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    C = rng.uniform(-100.0, 100.0, size=(k, X.shape[1]))
    order = rng.permutation(X.shape[0])
    n_cuts = int(rng.integers(0, X.shape[0]))
    cuts = np.sort(rng.choice(np.arange(1, X.shape[0]), size=n_cuts, replace=False))
    parts = [X[idx] for idx in np.split(order, cuts)]
    pooled = participant_sums(X, C, m=m, enforce_rule=False)
    split = [participant_sums(P, C, m=m, enforce_rule=False) for P in parts]
    u = np.sum([s.u_sum for s in split], axis=0)
    ws = np.sum([s.weighted_sum for s in split], axis=0)
    # u_sum is a sum of non-negative terms: plain relative tolerance 1e-9. weighted_sum can
    # cancel (coordinates of both signs), so its tolerance is relative to Σ u^m·|x|, the size
    # of the terms being added; rounding of n <= 40 terms is ~1e-15 of that.
    np.testing.assert_allclose(u, pooled.u_sum, rtol=1e-9, atol=0.0)
    W = fcm_memberships(X, C, m=m) ** m
    scale = W.T @ np.abs(X)
    assert np.all(np.abs(ws - pooled.weighted_sum) <= 1e-9 * scale + 1e-300)
