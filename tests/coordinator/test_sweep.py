"""The K sweep's own pieces: the moment box start and FedFuzzDB through the participants."""

from __future__ import annotations

import numpy as np

from fedclust.coordinator.standardise import pooled_mean_scale
from fedclust.coordinator.sweep import fed_fuzzy_db, initial_centers
from fedclust.participant.local import LocalParticipant
from fedclust.protocol.maths.validity import soft_davies_bouldin


def parts(seed: int = 0) -> list[LocalParticipant]:
    rng = np.random.default_rng(seed)
    data = [rng.normal([10.0, -5.0], [2.0, 0.5], size=(n, 2)) for n in (40, 70, 90)]
    return [LocalParticipant(X, name=f"p{i}") for i, X in enumerate(data)]


def test_moment_box_is_the_pooled_mean_and_std() -> None:
    ps = parts()
    pooled = np.vstack([p.rows.in_memory().X for p in ps])
    mean, scale = pooled_mean_scale(ps, lambda: 200, two_pass=False)
    np.testing.assert_allclose(mean, pooled.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(scale, pooled.std(axis=0), rtol=1e-12)


def test_initial_centers_fill_the_box_with_the_data_variance() -> None:
    mean, scale = np.array([10.0, -5.0]), np.array([2.0, 0.5])
    C = initial_centers((mean, scale), 20_000, np.random.default_rng(1))
    assert C.shape == (20_000, 2)
    assert (np.abs(C - mean) <= np.sqrt(3.0) * scale).all()
    # A uniform on mean ± √3·σ has standard deviation σ: 20,000 draws give it to ~1%.
    np.testing.assert_allclose(C.std(axis=0), scale, rtol=0.03)


def test_fed_fuzzy_db_equals_the_central_index() -> None:
    ps = parts(2)
    pooled = np.vstack([p.rows.in_memory().X for p in ps])
    C = np.array([[9.0, -5.0], [11.0, -5.2], [10.0, -4.6]])
    federated = fed_fuzzy_db(ps, C, lambda: 200)
    assert np.isclose(federated, soft_davies_bouldin(pooled, C), rtol=1e-9)
