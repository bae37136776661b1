"""The built-in sum-type statistics (:class:`~protocol.algorithms.StatisticSpec`): their
fields' shapes, the bounds of one participant's values (the table of
``coordinator.secure_sum``: N rows, values within [-B, B], distances at most 3B·√D, as
``protocol.wire.bounds`` assumes) and their parameters; what a participant computes lives
with the maths it is.
"""

from __future__ import annotations

from collections.abc import Mapping

from fedclust.protocol.algorithms import StatisticSpec

__all__ = ["STATISTICS"]


def _silhouette_shapes(n_features: int, centers: tuple[int, ...]) -> dict[str, tuple[int, ...]]:
    return {"total": (1,)}


def _silhouette_bounds(
    n_features: int, centers: tuple[int, ...], max_rows: int, value_bound: float,
    params: Mapping[str, float],
) -> dict[str, float]:
    return {"total": float(max_rows)}  # s(x) in [0, 1]


STATISTICS = (
    StatisticSpec(
        name="silhouette_sums", shapes=_silhouette_shapes, bounds=_silhouette_bounds,
        compute_path="fedclust.protocol.maths.validity:silhouette_fields",
    ),
)
