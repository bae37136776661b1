"""The built-in sum-type statistics (:class:`~protocol.algorithms.StatisticSpec`): their
fields' shapes, the bounds of one participant's values (the table of
``coordinator.secure_sum``: N rows, values within [-B, B], distances at most 3B·√D, as
``protocol.wire.bounds`` assumes) and their parameters; what a participant computes lives
with the maths it is.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from fedclust.protocol.algorithms import Param, StatisticSpec

__all__ = ["STATISTICS"]


def _moment_shapes(n_features: int, centers: tuple[int, ...]) -> dict[str, tuple[int, ...]]:
    return {"sum": (n_features,), "sum_sq": (n_features,)}


def _moment_bounds(
    n_features: int, centers: tuple[int, ...], max_rows: int, value_bound: float,
    params: Mapping[str, float],
) -> dict[str, float]:
    # |x − s| <= 3B: |x| <= B and the point s, a center, within [−2B, 2B]
    return {"sum": 3.0 * max_rows * value_bound, "sum_sq": 9.0 * max_rows * value_bound**2}


def _silhouette_shapes(n_features: int, centers: tuple[int, ...]) -> dict[str, tuple[int, ...]]:
    return {"total": (1,)}


def _silhouette_bounds(
    n_features: int, centers: tuple[int, ...], max_rows: int, value_bound: float,
    params: Mapping[str, float],
) -> dict[str, float]:
    return {"total": float(max_rows)}  # s(x) in [0, 1]


def _fuzzy_db_shapes(n_features: int, centers: tuple[int, ...]) -> dict[str, tuple[int, ...]]:
    return {"spread": (centers[0],), "membership": (centers[0],)}


def _fuzzy_db_bounds(
    n_features: int, centers: tuple[int, ...], max_rows: int, value_bound: float,
    params: Mapping[str, float],
) -> dict[str, float]:
    N, distance = float(max_rows), 3.0 * value_bound * math.sqrt(n_features)
    return {"spread": N * distance ** params["q"], "membership": N}


def _fcm_shapes(n_features: int, centers: tuple[int, ...]) -> dict[str, tuple[int, ...]]:
    return {"u_sum": (centers[0],), "weighted_sum": (centers[0], n_features)}


def _fcm_bounds(
    n_features: int, centers: tuple[int, ...], max_rows: int, value_bound: float,
    params: Mapping[str, float],
) -> dict[str, float]:
    return {"u_sum": float(max_rows), "weighted_sum": max_rows * value_bound}  # u^m in [0, 1]


def _scatter_shapes(n_features: int, centers: tuple[int, ...]) -> dict[str, tuple[int, ...]]:
    S, K = centers[:2]
    return {"scatter": (S, K, n_features * (n_features + 1) // 2), "removal": (S, K)}


def _held_weight(max_rows: int, params: Mapping[str, float]) -> float:
    """W of the center statistics: the task's ``weight_bound`` (FedFCM: its K local centers
    of weight 1), or N."""
    return params.get("weight_bound", float(max_rows))


def _scatter_bounds(
    n_features: int, centers: tuple[int, ...], max_rows: int, value_bound: float,
    params: Mapping[str, float],
) -> dict[str, float]:
    W, distance = _held_weight(max_rows, params), 3.0 * value_bound * math.sqrt(n_features)
    return {"scatter": W * distance**2, "removal": W * distance**2}


def _center_sums_shapes(
    n_features: int, centers: tuple[int, ...]
) -> dict[str, tuple[int, ...]]:
    S, K = centers[:2]
    return {"sums": (S, K, n_features), "weights": (S, K), "inertia": (S,),
            "contributors": (S, K), "objective": (1,)}


def _center_sums_bounds(
    n_features: int, centers: tuple[int, ...], max_rows: int, value_bound: float,
    params: Mapping[str, float],
) -> dict[str, float]:
    W, distance = _held_weight(max_rows, params), 3.0 * value_bound * math.sqrt(n_features)
    return {"sums": W * value_bound, "weights": W, "inertia": W * distance**2,
            "contributors": 1.0, "objective": max_rows * distance**2}


#: Bound on one participant's total weight of held local centers (FedFCM: its number of
#: local centers); absent: the job's row bound.
_WEIGHT_BOUND = Param(gt=0.0, required=False)

STATISTICS = (
    # Standardisation (protocol.maths.standardise): Σ(x − s) and Σ(x − s)² per column about
    # one public point s.
    StatisticSpec(
        name="moment_sums", shapes=_moment_shapes, bounds=_moment_bounds,
        compute_path="fedclust.protocol.maths.standardise:moment_fields", points=(1,),
    ),
    StatisticSpec(
        name="silhouette_sums", shapes=_silhouette_shapes, bounds=_silhouette_bounds,
        compute_path="fedclust.protocol.maths.validity:silhouette_fields",
    ),
    # FedFuzzDB (Stallmann & Wilbik 2022, eq. 14-16): Σ_j ||x_j − c_i||^q and Σ_j u_ij.
    StatisticSpec(
        name="fuzzy_db_sums", shapes=_fuzzy_db_shapes, bounds=_fuzzy_db_bounds,
        compute_path="fedclust.protocol.maths.validity:fuzzy_db_fields",
        params={"m": Param(gt=1.0), "q": Param(gt=0.0)},
    ),
    # Exact FCM (Corcuera Bárcena et al. 2021, Alg. 2): U_c = Σ u^m and WS_c = Σ u^m·x, with
    # the size rule of §4 on the declared row bucket.
    StatisticSpec(
        name="fcm_sums", shapes=_fcm_shapes, bounds=_fcm_bounds,
        compute_path="fedclust.protocol.maths.exact_fcm:fcm_fields",
        params={"m": Param(gt=1.0)},
        refusal_path="fedclust.protocol.maths.exact_fcm:declared_refusal",
    ),
    # The server's center k-means (protocol.maths.center_kmeans): per cluster of each of S
    # starts, S_k = Σ w_j p_j and W_k = Σ w_j of the held local centers nearest to it, each
    # start's inertia, the contributor indicators and the held J_m (FedFCM's cycle guard) ...
    StatisticSpec(
        name="center_sums", shapes=_center_sums_shapes, bounds=_center_sums_bounds,
        compute_path="fedclust.protocol.maths.center_kmeans:center_sums_fields",
        params={"weight_bound": _WEIGHT_BOUND}, reads="held",
    ),
    # ... and their packed scatter matrices and removal costs (splitting, swapping clusters).
    StatisticSpec(
        name="center_scatter", shapes=_scatter_shapes, bounds=_scatter_bounds,
        compute_path="fedclust.protocol.maths.center_kmeans:center_scatter_fields",
        params={"weight_bound": _WEIGHT_BOUND}, reads="held",
    ),
)
