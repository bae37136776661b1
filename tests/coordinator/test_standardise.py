"""Tests of coordinator.standardise with in-process participants."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.typing import ArrayLike, NDArray

from fedclust.coordinator.standardise import standardise_federation
from fedclust.core.validation import FloatArray
from fedclust.participant.local import LocalParticipant, reply_to
from fedclust.protocol.maths import standardise
from fedclust.protocol.maths.rows import as_rows
from fedclust.protocol.wire import messages as msg


class Recorder:
    """A participant that records what it was asked (to check no rows are requested)."""

    def answer(self, spec: msg.TaskSpec) -> msg.Reply:
        return reply_to(self, spec)

    def __init__(self, X: NDArray[np.float64], name: str = "recorder") -> None:
        self.name = name
        self.X = X
        self.n_features = X.shape[1]
        self.shifts: list[FloatArray] = []

    def statistic(
        self, name: str, centers: FloatArray, params: dict[str, float]
    ) -> dict[str, FloatArray]:
        assert (name, params) == ("moment_sums", {})
        self.shifts.append(centers[0])
        return standardise.moment_fields(as_rows(self.X), centers)

    def apply_standardisation(self, mean: ArrayLike, scale: ArrayLike) -> None:
        self.X = standardise.apply(self.X, mean, scale)


class Counter:
    """Stand-in for the counting service: releases ΣN_l and records how often it was asked."""

    def __init__(self, total: int) -> None:
        self._total = total
        self.calls = 0

    def __call__(self) -> int:
        self.calls += 1
        return self._total


def _refuse() -> int:
    raise PermissionError("cohort too small")


def test_local_participants_get_pooled_z_scores() -> None:
    rng = np.random.default_rng(0)
    X = rng.normal(loc=550.0, scale=[10.0, 100.0], size=(300, 2))
    parts = [X[:100], X[100:130], X[130:]]
    ps = [LocalParticipant(P, name=f"p{i}") for i, P in enumerate(parts)]
    mean, scale = standardise_federation(ps, Counter(X.shape[0]))
    np.testing.assert_allclose(mean, X.mean(axis=0), rtol=1e-14)
    np.testing.assert_allclose(scale, X.std(axis=0), rtol=1e-12)
    pooled = (X - X.mean(axis=0)) / X.std(axis=0)
    fed = np.vstack([p.rows.in_memory().X for p in ps])
    np.testing.assert_allclose(fed, pooled, atol=1e-12)  # both accurate to ~1e-14


def test_two_rounds_then_apply() -> None:
    rng = np.random.default_rng(1)
    ps = [Recorder(1e8 + rng.normal(size=(50, 3))) for _ in range(3)]
    pooled_std = np.vstack([p.X for p in ps]).std(axis=0)
    counter = Counter(150)
    mean, scale = standardise_federation(ps, counter)
    assert all(len(p.shifts) == 2 and not p.shifts[0].any() for p in ps)  # about 0 first
    assert counter.calls == 1  # ΣN_l asked once, used by both rounds
    np.testing.assert_allclose(ps[0].shifts[1], mean, rtol=1e-12)
    np.testing.assert_allclose(scale, pooled_std, rtol=1e-6)  # data carry ~8 digits of spread
    z = np.vstack([p.X for p in ps])
    # The mean is a float near 1e8, exact only to half an ulp (7.5e-9), so z-means are too.
    np.testing.assert_allclose(z.mean(axis=0), 0.0, atol=2e-8)
    np.testing.assert_allclose(z.std(axis=0), 1.0, rtol=1e-6)


def test_one_pass_asks_once() -> None:
    ps = [Recorder(np.arange(6.0).reshape(3, 2)), Recorder(np.arange(4.0).reshape(2, 2))]
    mean, _ = standardise_federation(ps, Counter(5), two_pass=False)
    assert [len(p.shifts) for p in ps] == [1, 1]
    # (0+2+4+0+2)/5, (1+3+5+1+3)/5; sums of small integers are exact, so one rounding.
    np.testing.assert_allclose(mean, [1.6, 2.6], rtol=1e-15)


def test_refused_total_count_stops_before_any_participant_is_asked() -> None:
    ps = [Recorder(np.ones((3, 2))), Recorder(np.zeros((2, 2)))]
    with pytest.raises(PermissionError, match="cohort"):
        standardise_federation(ps, _refuse)
    assert [p.shifts for p in ps] == [[], []]


def test_no_participants() -> None:
    with pytest.raises(ValueError, match="at least one participant"):
        standardise_federation([], Counter(1))
