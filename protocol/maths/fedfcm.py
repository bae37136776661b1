"""Federated fuzzy c-means of Stallmann & Wilbik (2022), "On a Framework for Federated Cluster
Analysis", Appl. Sci. 12(20) 10455, §2.2.1 (FedFCM; first proposed in their arXiv:2201.07316).

Each round the server broadcasts global centers C; participant l runs a *complete* local FCM on
its own rows started from C (Bezdek updates until ||U_t - U_{t-1}||_F < tol, at most max_iter
updates; the authors use 1e-4 and 1000) and sends its local centers C^l (K, D) with their
supports w^l_k = Σ_j u_jk (memberships to the power 1, for the local centers, as in the
authors' code). The server then combines the L·K local centers in one of two ways:

* k-means averaging (the paper's proposal): k-means with K clusters on the stacked L·K local
  centers, unweighted; the new global center k is the mean of the local centers in group k.
  The local centers stay at the participants and the k-means asks only for sums over them
  (``protocol.maths.center_kmeans``).
* federated averaging (the paper's baseline, after McMahan et al.): per cluster index k,
  c_k = Σ_l w^l_k c^l_k / Σ_l w^l_k, the support-weighted mean of the local centers with the
  same index. This assumes index k means the same cluster at every participant, which fails
  on non-i.i.d. splits (a participant without data near c_k drags its center k elsewhere).

Besides centers and supports a participant sends one scalar, J_m of the *broadcast* centers
on its rows. Summed over participants it is the pooled FCM objective of the global state,
which the coordinator uses only to pick the better state when the rounds cycle
(``coordinator.fedfcm``). It is a sum over the rows, like every other statistic here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from fedclust.core.errors import ProtocolError
from fedclust.core.validation import (
    FloatArray,
    check_centers,
    check_float,
    check_fuzzifier,
    check_int,
)

from ._fuzzy import membership_sums, objective
from .fcm import fcm
from .rows import Rows, as_rows

__all__ = [
    "LocalCenters",
    "combine_federated_average",
    "participant_local_fcm",
]


@dataclass(frozen=True)
class LocalCenters:
    """One participant's answer to one FedFCM round (§2.2.1).

    Attributes:
        centers: (K, D) local FCM centers after local convergence from the global centers.
        weights: (K,) supports w_k = Σ_j u_jk of the local rows for ``centers`` (membership to
            the power 1, the authors' "cluster support"); the federated-averaging weights.
        global_objective: J_m = Σ_j Σ_k u_jk^m ||x_j - c_k||² of the *broadcast* centers on the
            local rows (summed over participants: the pooled objective of the global state).
        n_iter: local center updates performed (diagnostic).
    """

    centers: FloatArray
    weights: FloatArray
    global_objective: float
    n_iter: int


def participant_local_fcm(
    X: ArrayLike | Rows, centers: ArrayLike, *, m: float, tol: float, max_iter: int
) -> LocalCenters:
    """Local FCM on the participant's rows started from the global ``centers`` (§2.2.1).

    Runs Bezdek's alternating updates (``protocol.maths.fcm.fcm`` with ``init=centers``) until
    ||U_t - U_{t-1}||_F < ``tol`` or ``max_iter`` center updates, then reports the local centers,
    their supports Σ_j u_jk and J_m of the received centers.
    """
    Xa = as_rows(X)
    C = check_centers(centers, n_features=Xa.n_features)
    owner = "participant_local_fcm"
    m = check_fuzzifier(m, owner=owner)
    tol = check_float(tol, name="tol", owner=owner, low=0.0)
    max_iter = check_int(max_iter, name="max_iter", owner=owner, low=1)
    start_objective = objective(Xa, C, m)
    result = fcm(Xa, C.shape[0], m=m, tol=tol, max_iter=max_iter, init=C)
    weights = membership_sums(Xa, result.centers, m)
    return LocalCenters(
        centers=result.centers,
        weights=weights,
        global_objective=start_objective,
        n_iter=result.n_iter,
    )


def _stack(local: Sequence[LocalCenters]) -> tuple[FloatArray, FloatArray]:
    """(L, K, D) centers and (L, K) weights of the answers; ProtocolError when inconsistent."""
    if len(local) == 0:
        raise ProtocolError("no local centers to combine: every participant is missing.")
    K, D = np.shape(local[0].centers)
    for i, answer in enumerate(local):
        c = np.asarray(answer.centers, dtype=np.float64)
        w = np.asarray(answer.weights, dtype=np.float64)
        if c.shape != (K, D) or w.shape != (K,):
            raise ProtocolError(
                f"answer {i} has centers of shape {c.shape} and weights of shape {w.shape}; "
                f"expected ({K}, {D}) and ({K},) like answer 0."
            )
        if not (np.isfinite(c).all() and np.isfinite(w).all()) or (w < 0.0).any():
            raise ProtocolError(
                f"answer {i} has non-finite centers or negative or non-finite weights."
            )
    centers = np.stack([np.asarray(a.centers, dtype=np.float64) for a in local])
    weights = np.stack([np.asarray(a.weights, dtype=np.float64) for a in local])
    return centers, weights


def combine_federated_average(
    local: Sequence[LocalCenters], previous_centers: ArrayLike | None = None
) -> FloatArray:
    """Federated averaging (§2.2.1): c_k = Σ_l w^l_k c^l_k / Σ_l w^l_k per cluster index k.

    ``w^l_k`` are the supports Σ_j u_jk the participants sent. A cluster whose total support
    is 0 (only possible by underflow) keeps ``previous_centers[k]`` (or the unweighted mean
    when no previous centers are given).

    Returns:
        (K, D) new global centers.
    """
    centers, weights = _stack(local)
    total = weights.sum(axis=0)
    empty = total == 0.0
    safe = np.where(empty, 1.0, total)
    new: FloatArray = np.einsum("lk,lkd->kd", weights, centers) / safe[:, None]
    if empty.any():
        if previous_centers is None:
            new[empty] = centers.mean(axis=0)[empty]
        else:
            prev = check_centers(
                previous_centers, n_features=centers.shape[2], name="previous_centers"
            )
            new[empty] = prev[empty]
    return new
