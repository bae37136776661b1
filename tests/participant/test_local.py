"""The participant agent: its policy decides what it computes; bad requests change nothing."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.typing import NDArray

from fedclust.core.errors import RefusedError
from fedclust.participant.local import LocalParticipant
from fedclust.participant.policy import Policy


def blobs(n: int = 60, seed: int = 0) -> NDArray[np.float64]:
    rng = np.random.default_rng(seed)
    return np.vstack([rng.normal(c, 0.2, size=(n // 2, 2)) for c in (0.0, 3.0)])


def test_algorithm_outside_the_policy_is_refused_with_the_reason() -> None:
    part = LocalParticipant(blobs(), name="a", policy=Policy(allowed_algorithms=frozenset({"fkm"})))
    with pytest.raises(RefusedError, match=r"'ffcm' is not allowed .*allowed: fkm"):
        part.statistic("fcm_sums", np.zeros((2, 2)), {"m": 2.0})
    with pytest.raises(RefusedError, match="'kfed' is not allowed"):
        part.kfed_centers(2, seed=0)
    fedcref = LocalParticipant(blobs(), name="b",
                               policy=Policy(allowed_algorithms=frozenset({"fedcref"})))
    with pytest.raises(RefusedError, match=r"none of the algorithms 'ffcm', .*'fkm'.* is "
                                           r"allowed .*allowed: fedcref\)"):
        fedcref.statistic("moment_sums", np.zeros((1, 2)))


def test_exact_fcm_privacy_rule_is_enforced_by_default() -> None:
    # C(F+1)/F = 3·3/2 = 4.5 >= N = 4: the coordinator could solve for the points.
    part = LocalParticipant(blobs(4), name="small")
    with pytest.raises(RefusedError):
        part.statistic("fcm_sums", np.zeros((3, 2)), {"m": 2.0})


def test_min_cluster_size_from_the_policy_is_applied() -> None:
    part = LocalParticipant(blobs(60), name="a", policy=Policy(min_cluster_size=31))
    part.hold_kmeans_step(np.array([[0.0, 0.0], [3.0, 3.0]]))
    sums = part.statistic("center_sums", np.array([[[0.0, 0.0], [3.0, 3.0]]]))
    # Both clusters hold 30 points < p = 31: no local mean is held, every sum is zero.
    assert not sums["weights"].any() and not sums["contributors"].any()
    part = LocalParticipant(blobs(60), name="a", policy=Policy(min_cluster_size=30))
    part.hold_kmeans_step(np.array([[0.0, 0.0], [3.0, 3.0]]))
    sums = part.statistic("center_sums", np.array([[[0.0, 0.0], [3.0, 3.0]]]))
    np.testing.assert_array_equal(sums["weights"], [[30.0, 30.0]])


@pytest.mark.parametrize(
    "centers",
    [np.zeros((2, 3)), np.zeros(2), np.array([[np.nan, 0.0], [1.0, 1.0]])],
    ids=["wrong-width", "one-dimensional", "nan"],
)
def test_malformed_centers_are_rejected_and_state_is_kept(centers: NDArray[np.float64]) -> None:
    part = LocalParticipant(blobs(), name="a")
    good, params = np.array([[0.0, 0.0], [3.0, 3.0]]), {"m": 2.0, "q": 1.0}
    before = part.statistic("fuzzy_db_sums", good, params)
    with pytest.raises((ValueError, RefusedError), match="centers"):
        part.statistic("fuzzy_db_sums", centers, params)
    after = part.statistic("fuzzy_db_sums", good, params)
    np.testing.assert_array_equal(before["spread"], after["spread"])


@pytest.mark.parametrize(
    ("params", "reason"),
    [({"m": 2.0}, "needs parameter 'q'"), ({"m": 1.0, "q": 1.0}, "'m' .* must be a finite "
     r"number > 1.0"), ({"m": 2.0, "q": 1.0, "p": 2.0}, "takes no parameter p")],
    ids=["missing", "out-of-range", "unknown"],
)
def test_a_statistic_with_other_params_than_declared_is_refused(
    params: dict[str, float], reason: str
) -> None:
    part = LocalParticipant(blobs(), name="a")
    with pytest.raises(RefusedError, match=reason):
        part.statistic("fuzzy_db_sums", np.array([[0.0, 0.0], [3.0, 3.0]]), params)


def test_the_moment_sums_about_a_point_are_the_shifted_sums_or_refused() -> None:
    X = blobs()
    part = LocalParticipant(X, name="a")
    point = np.array([[1.0, -2.0]])
    fields = part.statistic("moment_sums", point)
    np.testing.assert_allclose(fields["sum"], (X - point).sum(axis=0), rtol=1e-12)
    np.testing.assert_allclose(fields["sum_sq"], ((X - point) ** 2).sum(axis=0), rtol=1e-12)
    with pytest.raises(RefusedError, match=r"takes centers of shape \(1, 'D'\)"):
        part.statistic("moment_sums", np.vstack([point, point]))


def test_non_finite_data_is_refused_at_enrolment() -> None:
    X = blobs()
    X[3, 1] = np.inf
    with pytest.raises(ValueError, match="contains NaN or infinity"):
        LocalParticipant(X, name="a")
