"""The comparison of a protected run with the plaintext run (tests/fedclust/test_protection.py
states the tolerance and why)."""

from __future__ import annotations

import numpy as np
import pytest

from fedclust.simulate import SimulationReport

#: Allowed center difference, as a fraction of the data's scale (fixed-point rounding).
CENTERS_TOL = 1e-6


def assert_same_answer(plain: SimulationReport, protected: SimulationReport) -> None:
    """Same K, same centers at every K within the fixed-point bound, same support."""
    assert protected.sweep.k_selected == plain.sweep.k_selected
    assert protected.sweep.k_elbow == plain.sweep.k_elbow
    scale = max(float(np.abs(e.result.centers).max()) for e in plain.sweep.entries) or 1.0
    for p, m in zip(plain.sweep.entries, protected.sweep.entries, strict=True):
        assert m.k == p.k
        assert m.result.centers.shape == p.result.centers.shape
        np.testing.assert_allclose(
            m.result.centers, p.result.centers, rtol=0, atol=CENTERS_TOL * scale
        )
        # FedFuzzDB divides by center distances M_ij: where two centers nearly coincide (FCM
        # with K above the data's clusters) its relative error is that of M_ij.
        centers = p.result.centers
        gaps = np.linalg.norm(centers[:, None] - centers[None], axis=2)
        closest = float(gaps[~np.eye(len(centers), dtype=bool)].min())
        moved = float(np.abs(m.result.centers - centers).max())
        rel = 1e-6 + 10.0 * moved * np.sqrt(centers.shape[1]) / closest
        assert m.fed_fuzzy_db == pytest.approx(p.fed_fuzzy_db, rel=rel)
        if p.result.contributors is not None:
            assert m.result.contributors is not None
            np.testing.assert_array_equal(m.result.contributors, p.result.contributors)
            # No reported center without support.
            assert (p.result.contributors >= 1).all()
