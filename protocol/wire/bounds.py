"""The public bounds a job's computations rely on: pure rules that the coordinator and every
participant evaluate alike, so a participant refuses exactly what an honest coordinator never
asks, and its refusal depends on the job and its own declaration
(``protocol.maths.declaration``), never on its rows.

- **Rows for K** (:func:`rows_allow_k`, :func:`local_clustering_ks`): a local clustering with
  K centers needs N >= K rows; a K above the declared bucket's lower edge R/2 + 1 is refused
  (the coordinator fails such a job at its declaration, the participant refuses such a task).
- **Field bounds** (:func:`field_bounds`): the bound on one participant's value of every
  summed field of a statistic, from a row bound N and a value bound B (table in
  ``coordinator.secure_sum``). The coordinator evaluates it at the job's N and B (the largest
  declared, or the job's overrides); a participant at its own declared R and B it is the
  smallest bound its own values can need, so a bound below that is refused before anything
  is computed. The table assumes centers (the moment sums' public point too) within
  [−2B, 2B] per coordinate, as the initial box mean ± √3·std of data in [−B, B] is: so
  |x − c| <= 3B and distances are at most 3B·√D; :func:`task_value_bound` is the smallest
  B for which a task meets those assumptions.
- **Standardised values** (:func:`standardised_bound`): z = (x − mean_d)/scale_d of a raw
  |x| <= B has |z| <= max_d (B + |mean_d|)/scale_d.
"""

from __future__ import annotations

from typing import Final

import numpy as np
from numpy.typing import ArrayLike

from fedclust.protocol import algorithms
from fedclust.protocol.algorithms.fedcref_params import FedCRefParams
from fedclust.protocol.maths.declaration import Declaration
from fedclust.protocol.wire import messages as msg

__all__ = [
    "MODEL_PARAMETER_BOUND", "field_bounds", "local_clustering_ks", "model_value_bound",
    "rows_allow_k", "standardised_bound", "task_value_bound",
]

#: B of a 'fedcref' job without ``value_bound``: the bound on |model parameter|.
MODEL_PARAMETER_BOUND: Final = 1000.0


def rows_allow_k(declaration: Declaration, k: int) -> bool:
    """Whether the declared bucket guarantees the N >= K rows of a local clustering with K
    centers: K <= R/2 + 1 (``Declaration.min_rows``)."""
    return k <= declaration.min_rows


def local_clustering_ks(terms: msg.JobCreate) -> list[tuple[str, int, str]]:
    """The largest K of every local clustering a job's terms ask of a participant, as
    (job parameter, K, command-line flag): FedFCM's local FCM, the local k-means of fkm and
    k-FED (K among the job's), the local-only sweep (``local_k_range``), FedCRef's initial
    k-means with a given ``local_k``."""
    needs = []
    if algorithms.get(terms.algorithm).local_clustering:
        needs.append(("k", max(terms.ks), "--k/--k-range"))
    if terms.local_k_range is not None:
        needs.append(("local_k_range", terms.local_k_range[1], "--local-range"))
    params = terms.algorithm_params
    if isinstance(params, FedCRefParams) and params.initial == "kmeans" \
            and params.local_k is not None:
        needs.append(("fedcref.local_k", params.local_k, "--local-k"))
    return needs


def model_value_bound(terms: msg.JobCreate) -> float:
    """B of a 'fedcref' job's sums: its ``value_bound``, or :data:`MODEL_PARAMETER_BOUND`."""
    return MODEL_PARAMETER_BOUND if terms.value_bound is None else terms.value_bound


def standardised_bound(value_bound: float, mean: ArrayLike, scale: ArrayLike) -> float:
    """The bound max_d (B + |mean_d|)/scale_d on z-scores of values |x| <= ``value_bound``."""
    return float(np.max((value_bound + np.abs(mean)) / np.asarray(scale, dtype=np.float64)))


def task_value_bound(statistic: msg.TaskSpec, value_bound: float) -> float:
    """The smallest B >= ``value_bound`` under which ``statistic`` meets the table's
    assumptions: max(B, max |c| / 2 over its centers' coordinates)."""
    bound = value_bound
    centers = getattr(statistic, "centers", None)
    if isinstance(centers, msg.WireArray):
        bound = max(bound, float(np.max(np.abs(centers.to_numpy()), initial=0.0)) / 2)
    return bound


def field_bounds(
    statistic: msg.SumTaskSpec, *, n_features: int, max_rows: int, value_bound: float
) -> dict[str, float]:
    """The bound on one participant's value of every summed field of ``statistic`` for N =
    ``max_rows`` and B = ``value_bound`` (the table of ``coordinator.secure_sum``; a
    registered statistic's as its ``StatisticSpec`` declares)."""
    N, B = float(max_rows), float(value_bound)
    match statistic:
        case msg.StatisticTask(name=name, centers=centers, params=params):
            declared = algorithms.statistic(name).bounds(
                n_features, tuple(centers.shape), max_rows, value_bound, params
            )
            return {field: float(bound) for field, bound in declared.items()}
        case msg.DistillSoftTask():
            return {"soft_sum": 1.0, "members": 1.0}
        case msg.FedCRefFedavgTask():
            return {"weighted_params": N * B, "rows": N}
    raise TypeError(f"{statistic.kind!r} is not a sum-type statistic")
