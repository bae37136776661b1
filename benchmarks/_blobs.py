"""The benchmarks' synthetic federation: Gaussian blobs split over participants."""

from __future__ import annotations

import numpy as np

from fedclust.data.federations import Federation

__all__ = ["blobs"]


def blobs(participants: int, rows: int, *, k: int, d: int, seed: int = 0) -> Federation:
    """``participants`` datasets of ``rows`` rows each: k unit-variance Gaussian blobs in d
    dimensions around centers drawn uniformly from [−5, 5]^d."""
    rng = np.random.default_rng(seed)
    centers = rng.uniform(-5, 5, size=(k, d))
    parts = tuple(
        centers[rng.integers(k, size=rows)] + rng.standard_normal((rows, d))
        for _ in range(participants)
    )
    return Federation(name=f"blobs-{participants}x{rows}", parts=parts)
