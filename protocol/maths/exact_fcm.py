"""Exact federated fuzzy c-means (Corcuera Bárcena, Marcelloni, Renda, Bechini & Ducange 2021).

Every round the server broadcasts the centers C; participant c answers with, per cluster i,
(Alg. 2)

    U_c[i]  = Σ_{x_j in D_c} u_ij^m          WS_c[i] = Σ_{x_j in D_c} u_ij^m x_j,

with u_ij the FCM memberships of its own rows to C (μ to the power m). The server (Alg. 1) sets

    c_i = Σ_c WS_c[i] / Σ_c U_c[i],

which is exactly Bezdek's center update on the union of the participants' rows, so with all
participants every round the federated run equals central FCM from the same initial centers
(the paper's §4.1 proof). A center with Σ_c U_c[i] = 0 keeps its previous position, as in the
authors' code.

Privacy rule (§4): a participant sends K(F+1) numbers per round about its N·F unknown
coordinates; when N <= K(F+1)/F the server could solve for the points, so the participant
refuses (``enforce_rule``). A participant answering a coordinator evaluates the rule on the
lower edge of its declared row bucket (:func:`declared_rule_refusal`,
``protocol.maths.declaration``), never on N itself: its refusal then depends on public facts only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from fedclust.core.errors import ProtocolError, RefusedError
from fedclust.core.validation import FloatArray, check_centers, check_data, check_fuzzifier

from ._fuzzy import weighted_sums
from .declaration import Declaration, min_rows
from .fcm import _centers_from_sums
from .rows import RowSource, as_source

__all__ = [
    "FCMSums", "combine_sums", "declared_refusal", "declared_rule_refusal", "fcm_fields",
    "largest_allowed_k", "participant_sums", "rule_allows",
]


@dataclass(frozen=True)
class FCMSums:
    """One participant's answer to one round (Alg. 2).

    Attributes:
        u_sum: (K,) U_c[i] = Σ_j u_ij^m over the participant's rows.
        weighted_sum: (K, D) WS_c[i] = Σ_j u_ij^m x_j.
    """

    u_sum: FloatArray
    weighted_sum: FloatArray


def rule_allows(n_rows: int, k: int, n_features: int) -> bool:
    """The size rule of §4: N·F > K(F+1), more unknown coordinates than numbers sent."""
    return n_rows * n_features > k * (n_features + 1)


def largest_allowed_k(n_rows: int, n_features: int) -> int:
    """The largest K the size rule allows for N rows of F features (0 when none)."""
    return (n_rows * n_features - 1) // (n_features + 1)


def declared_rule_refusal(row_bound: int, k: int, n_features: int) -> str | None:
    """Why a participant declaring ``row_bound`` refuses exact FCM with K = ``k``, or None.

    The rule is evaluated on the lower edge of the declared bucket (R/2, R], so the answer
    is a function of the job's K, the schema's F and the declaration: the same for every N
    in the bucket. The reason states public numbers only.
    """
    low = min_rows(row_bound)
    if rule_allows(low, k, n_features):
        return None
    return (
        "refusing exact federated FCM sums: the privacy rule of Corcuera Bárcena et al. "
        f"(2021, §4) requires more than C(F+1)/F={k * (n_features + 1) / n_features:.4g} "
        f"rows for C={k} clusters of F={n_features} features, and this participant's "
        f"declared row_bound={row_bound} guarantees only {low}; with so few rows the "
        "coordinator could solve for the data points."
    )


def declared_refusal(
    declaration: Declaration, centers: tuple[int, ...], n_features: int
) -> str | None:
    """The ``fcm_sums`` statistic's privacy rule (``protocol.algorithms.statistics``):
    :func:`declared_rule_refusal` for C = ``centers[0]`` when the participant enforces it."""
    if not declaration.enforces_fcm_rule:
        return None
    return declared_rule_refusal(declaration.row_bound, centers[0], n_features)


def participant_sums(
    X: ArrayLike | RowSource, centers: ArrayLike, *, m: float = 2.0, enforce_rule: bool = True
) -> FCMSums:
    """U_c and WS_c of the rows X for the broadcast ``centers`` (Alg. 2).

    ``X`` may be a :class:`~protocol.maths.rows.RowSource` (rows checked once, or streamed from a
    file); the sums are folded over fixed blocks, so they do not depend on its chunking.

    Raises:
        RefusedError: ``enforce_rule`` is set and N <= C(F+1)/F (N rows, C clusters,
            F features): the paper's §4 privacy condition.
    """
    rows = as_source(X)
    C = check_centers(centers, n_features=rows.n_features)
    m = check_fuzzifier(m, owner="participant_sums")
    n, f = rows.n_rows, rows.n_features
    k = C.shape[0]
    if enforce_rule and not rule_allows(n, k, f):
        # The reason travels to the coordinator: it states the bound, never N itself.
        raise RefusedError(
            "refusing exact federated FCM sums: the privacy rule of Corcuera Bárcena et al. "
            f"(2021, §4) requires more than C(F+1)/F={k * (f + 1) / f:.4g} rows for C={k} "
            f"clusters of F={f} features, and this participant has no more; with so few rows "
            "the coordinator could solve for the data points."
        )
    u_sum, ws = weighted_sums(rows, C, m)
    return FCMSums(u_sum=u_sum, weighted_sum=ws)


def fcm_fields(rows: RowSource, centers: FloatArray, *, m: float) -> dict[str, FloatArray]:
    """The ``fcm_sums`` statistic: U_c and WS_c of :func:`participant_sums` (Alg. 2), whose
    size rule the participant has evaluated on its declared bucket (:func:`declared_refusal`)."""
    sums = participant_sums(rows, centers, m=m, enforce_rule=False)
    return {"u_sum": sums.u_sum, "weighted_sum": sums.weighted_sum}


def _check_contribution(index: int, s: FCMSums, k: int, d: int) -> None:
    who = f"contribution {index}"
    u = np.asarray(s.u_sum)
    ws = np.asarray(s.weighted_sum)
    if u.shape != (k,):
        raise ProtocolError(f"{who}: u_sum must have shape ({k},); got {u.shape}.")
    if ws.shape != (k, d):
        raise ProtocolError(f"{who}: weighted_sum must have shape ({k}, {d}); got {ws.shape}.")
    if not (np.isfinite(u).all() and np.isfinite(ws).all()):
        raise ProtocolError(f"{who} contains NaN or infinity.")
    if (u < 0).any():
        raise ProtocolError(f"{who}: u_sum must be non-negative.")


def combine_sums(sums: Sequence[FCMSums], previous_centers: ArrayLike) -> FloatArray:
    """New centers c_i = Σ_c WS_c[i] / Σ_c U_c[i] (Alg. 1); previous center where Σ U = 0.

    Raises:
        ProtocolError: no contributions, or a contribution with the wrong shape, a negative
            u_sum, or a non-finite value.
    """
    prev = check_data(previous_centers, name="previous_centers")
    k, d = prev.shape
    if len(sums) == 0:
        raise ProtocolError("combine_sums needs at least one contribution; got none.")
    u_total = np.zeros(k)
    ws_total = np.zeros((k, d))
    for index, s in enumerate(sums):
        _check_contribution(index, s, k, d)
        u_total += s.u_sum
        ws_total += s.weighted_sum
    if not (np.isfinite(u_total).all() and np.isfinite(ws_total).all()):
        raise ProtocolError("the summed contributions overflow to infinity.")
    return _centers_from_sums(u_total, ws_total, prev)
