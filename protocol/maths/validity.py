"""Cluster validity indices that a federation can compute from sums.

Soft Davies-Bouldin index (Stallmann & Wilbik 2022, §2.2.2, eq. 9-13;
:func:`soft_davies_bouldin`), with FCM memberships u_ij (power 1) and defaults q = 1, p = 2:
U_i = (1/N) Σ_j u_ij, S_i = U_i · ((1/N) Σ_j ||x_j − c_i||^q)^(1/q), M_ij = ||c_i − c_j||_p,
R̄ = (1/K) Σ_i max_{j≠i} (S_i + S_j) / M_ij; lower is better, coincident centers give +inf.
FedFuzzDB (eq. 14-16): each participant sends :class:`FuzzyDBSums` (Σ_j ||x_j − c_i||^q and
Σ_j u_ij per cluster, :func:`participant_fuzzy_db_sums`); :func:`combine_fuzzy_db` adds them
with N = Σ_l N_l from the counting service (never in the sums) and cross-checks N against
Σ memberships, which equals N_l per participant (so the memberships need secure sums).
Simplified silhouette (Hruschka et al. 2004, as Garst & Reinders 2023):
s(x) = (b − a) / max(a, b) (0 when a = b = 0) for the nearest and second-nearest center
distances a, b; participants send Σ s(x) (:class:`SilhouetteSums`), divided by N.

Design notes: ``docs/fcm.md`` (§ Cluster validity indices from sums).
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
    check_data,
    check_float,
    check_fuzzifier,
    check_int,
)

from ._fuzzy import Centers, distances_t, memberships_t
from .rows import RowSource, as_source, fold

__all__ = [
    "FuzzyDBSums",
    "SilhouetteSums",
    "combine_fuzzy_db",
    "combine_silhouette",
    "fuzzy_db_fields",
    "participant_fuzzy_db_sums",
    "participant_silhouette_sums",
    "silhouette_fields",
    "simplified_silhouette",
    "soft_davies_bouldin",
]


# -- statistics that travel ------------------------------------------------------------------
@dataclass(frozen=True)
class FuzzyDBSums:
    """One participant's FedFuzzDB contribution against the global centers (eq. 14-15).

    Attributes:
        spread: shape (K,), Σ_j ||x_j - c_i||^q over the participant's rows.
        membership: shape (K,), Σ_j u_ij (FCM memberships to the power 1).
    """

    spread: FloatArray
    membership: FloatArray


@dataclass(frozen=True)
class SilhouetteSums:
    """One participant's simplified-silhouette contribution (no row count: see module doc).

    Attributes:
        total: Σ s(x) over the participant's rows.
    """

    total: float


# -- validation helpers ----------------------------------------------------------------------
def _check_k_at_least_two(k: int, owner: str) -> None:
    if k < 2:
        raise ValueError(
            f"centers of {owner} must have at least 2 rows (the index compares each cluster "
            f"with the others); got n_clusters={k}."
        )


def _check_q(q: float, owner: str) -> float:
    return check_float(q, name="q", owner=owner, low=0.0, low_open=True)


def _check_p(p: float, owner: str) -> float:
    # Minkowski distances are metrics only for p >= 1.
    return check_float(p, name="p", owner=owner, low=1.0)


def _checked_vector(value: ArrayLike, k: int, what: str) -> FloatArray:
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ProtocolError(f"{what} must be numeric.") from exc
    if arr.shape != (k,):
        raise ProtocolError(
            f"{what} must have shape ({k},) to match the centers; got shape {arr.shape}."
        )
    if not np.isfinite(arr).all() or (arr < 0).any():
        raise ProtocolError(f"{what} must be finite and non-negative.")
    return arr


def _data_and_centers(
    X: ArrayLike | RowSource, centers: ArrayLike, owner: str
) -> tuple[RowSource, FloatArray]:
    rows = as_source(X)
    C = check_centers(centers, n_features=rows.n_features)
    _check_k_at_least_two(C.shape[0], owner)
    return rows, C


# -- soft Davies-Bouldin: internals ------------------------------------------------------------
def fuzzy_db_block(
    xb: FloatArray, nb: FloatArray, c: Centers, m: float, q: float
) -> tuple[FloatArray, FloatArray]:
    """Partial Σ_j ||x_j - c_i||^q and Σ_j u_ij of one block (eq. 15)."""
    d2 = distances_t(xb, nb, c)
    if q == 2.0:
        spread = d2 @ np.ones(d2.shape[1])
    elif q == 1.0:
        spread = np.sqrt(d2) @ np.ones(d2.shape[1])
    else:
        spread = np.power(d2, q / 2.0) @ np.ones(d2.shape[1])
    U = memberships_t(d2, m)  # overwrites d2
    return spread, U @ np.ones(U.shape[1])


def _fuzzy_db_sums(rows: RowSource, C: FloatArray, m: float, q: float) -> FuzzyDBSums:
    c = Centers.of(C)
    spread, membership = fold(rows, lambda xb, nb: fuzzy_db_block(xb, nb, c, m, q))
    return FuzzyDBSums(spread=spread, membership=membership)


def _minkowski_matrix(C: FloatArray, p: float) -> FloatArray:
    diff: FloatArray = np.abs(C[:, None, :] - C[None, :, :])
    out: FloatArray
    if p == 2.0:
        out = np.sqrt(np.einsum("ijk,ijk->ij", diff, diff))
    elif p == 1.0:
        out = diff.sum(axis=2)
    else:
        out = np.power(np.power(diff, p).sum(axis=2), 1.0 / p)
    return out


def _db_from_sums(
    spread: FloatArray, membership: FloatArray, n: float, C: FloatArray, q: float, p: float
) -> float:
    """R̄ of eq. 13 from the summed spreads and memberships (eq. 16)."""
    S = (membership / n) * np.power(spread / n, 1.0 / q)
    M = _minkowski_matrix(C, p)
    num = S[:, None] + S[None, :]
    R = np.full(M.shape, np.inf)
    np.divide(num, M, out=R, where=M > 0)
    np.fill_diagonal(R, -np.inf)  # excluded from max_{j≠i}
    return float(R.max(axis=1).mean())


# -- soft Davies-Bouldin: public -----------------------------------------------------------------
def soft_davies_bouldin(
    X: ArrayLike | RowSource, centers: ArrayLike, *, m: float = 2.0, q: float = 1.0, p: float = 2.0
) -> float:
    """Central soft Davies-Bouldin index R̄ (Stallmann & Wilbik 2022, eq. 9-13); lower is better.

    Memberships are the FCM memberships of ``X`` to ``centers`` (fuzzifier ``m``), used to the
    power 1. ``q`` is the power of the spread mean, ``p`` the Minkowski order of the center
    separation. Returns +inf when two centers coincide.

    Raises:
        ValueError: malformed inputs, or fewer than 2 centers.
    """
    owner = "soft_davies_bouldin"
    rows, C = _data_and_centers(X, centers, owner)
    m = check_fuzzifier(m, owner=owner)
    q = _check_q(q, owner)
    p = _check_p(p, owner)
    sums = _fuzzy_db_sums(rows, C, m, q)
    return _db_from_sums(sums.spread, sums.membership, float(rows.n_rows), C, q, p)


def participant_fuzzy_db_sums(
    X: ArrayLike | RowSource, centers: ArrayLike, *, m: float, q: float
) -> FuzzyDBSums:
    """Per-cluster Σ||x - c_i||^q and Σu_i of the local rows against the global centers (eq. 15).

    Folded over fixed blocks: O(block·K) extra memory, the same bits for any chunking of a
    streamed source. N_l is deliberately not part of the result.
    """
    owner = "participant_fuzzy_db_sums"
    rows, C = _data_and_centers(X, centers, owner)
    m = check_fuzzifier(m, owner=owner)
    q = _check_q(q, owner)
    return _fuzzy_db_sums(rows, C, m, q)


def fuzzy_db_fields(
    rows: RowSource, centers: FloatArray, *, m: float, q: float
) -> dict[str, FloatArray]:
    """The ``fuzzy_db_sums`` statistic (``protocol.algorithms.statistics``): the fields
    ``spread`` and ``membership`` of :func:`participant_fuzzy_db_sums` (eq. 15)."""
    sums = participant_fuzzy_db_sums(rows, centers, m=m, q=q)
    return {"spread": sums.spread, "membership": sums.membership}


def combine_fuzzy_db(
    sums: Sequence[FuzzyDBSums],
    centers: ArrayLike,
    total_count: int,
    *,
    q: float = 1.0,
    p: float = 2.0,
    count_rtol: float | None = 1e-6,
) -> float:
    """FedFuzzDB (Stallmann & Wilbik 2022, eq. 16): R̄ from the participants' summed statistics.

    Args:
        sums: one :class:`FuzzyDBSums` per participant, all against ``centers``.
        centers: the global centers, shape (K, n_features), K >= 2.
        total_count: N = Σ_l N_l, from the counting service.
        q, p: as in :func:`soft_davies_bouldin` (``q`` must match the participants').
        count_rtol: the summed memberships must equal ``total_count`` within this relative
            tolerance (memberships sum to 1 per point); None disables the cross-check, e.g.
            when noise was added to the sums.

    Raises:
        ValueError: malformed arguments.
        ProtocolError: a contribution of the wrong shape, non-finite or negative, or
            memberships that do not add up to ``total_count``.
    """
    owner = "combine_fuzzy_db"
    C = check_data(centers, name="centers")
    K = C.shape[0]
    _check_k_at_least_two(K, owner)
    n = check_int(total_count, name="total_count", owner=owner, low=1)
    q = _check_q(q, owner)
    p = _check_p(p, owner)
    if count_rtol is not None:
        count_rtol = check_float(count_rtol, name="count_rtol", owner=owner, low=0.0)
    if len(sums) == 0:
        raise ValueError(f"sums of {owner} must hold at least one contribution; got none.")
    spread = np.zeros(K)
    membership = np.zeros(K)
    for idx, contribution in enumerate(sums):
        spread += _checked_vector(contribution.spread, K, f"contribution {idx}: spread")
        membership += _checked_vector(
            contribution.membership, K, f"contribution {idx}: membership"
        )
    if count_rtol is not None and abs(membership.sum() - n) > count_rtol * n:
        raise ProtocolError(
            "the summed memberships do not add up to total_count (memberships sum to 1 per "
            "point): the sums and the count do not describe the same rows."
        )
    return _db_from_sums(spread, membership, float(n), C, q, p)


# -- simplified silhouette -------------------------------------------------------------------
def silhouette_block(xb: FloatArray, nb: FloatArray, c: Centers) -> tuple[float]:
    """Partial Σ s(x) of one block; a, b the two smallest distances (a <= b = max(a, b))."""
    two = np.partition(distances_t(xb, nb, c), 1, axis=0)[:2]
    np.sqrt(two, out=two)
    a, b = two[0], two[1]
    sil = np.zeros_like(b)
    np.divide(b - a, b, out=sil, where=b > 0)
    return (float(sil @ np.ones(sil.shape[0])),)


def _silhouette_total(rows: RowSource, C: FloatArray) -> float:
    c = Centers.of(C)
    (total,) = fold(rows, lambda xb, nb: silhouette_block(xb, nb, c))
    return float(total)


def participant_silhouette_sums(
    X: ArrayLike | RowSource, centers: ArrayLike
) -> SilhouetteSums:
    """Σ s(x) of the simplified silhouette over the local rows."""
    rows, C = _data_and_centers(X, centers, "participant_silhouette_sums")
    return SilhouetteSums(total=_silhouette_total(rows, C))


def silhouette_fields(rows: RowSource, centers: FloatArray) -> dict[str, FloatArray]:
    """The ``silhouette_sums`` statistic (``protocol.algorithms.statistics``): its one field
    ``total`` = [Σ s(x)] of :func:`participant_silhouette_sums`."""
    return {"total": np.array([participant_silhouette_sums(rows, centers).total])}


def combine_silhouette(sums: Sequence[SilhouetteSums], total_count: int) -> float:
    """Mean simplified silhouette Σ_l total_l / N, N = Σ_l N_l from the counting service.

    Higher is better; s(x) lies in [0, 1], so the mean does too.

    Raises:
        ValueError: no contributions, or ``total_count`` not a positive int.
        ProtocolError: a non-finite total, or totals exceeding ``total_count``.
    """
    if len(sums) == 0:
        raise ValueError("sums of combine_silhouette must hold at least one contribution.")
    n = check_int(total_count, name="total_count", owner="combine_silhouette", low=1)
    total = 0.0
    for idx, contribution in enumerate(sums):
        t = float(contribution.total)
        if not np.isfinite(t) or t < 0:
            raise ProtocolError(f"contribution {idx}: total must be finite and non-negative.")
        total += t
    if total > n * (1.0 + 1e-9):
        raise ProtocolError(
            "the silhouette totals exceed total_count (each point adds at most 1): the sums "
            "and the count do not describe the same rows."
        )
    return total / n


def simplified_silhouette(X: ArrayLike | RowSource, centers: ArrayLike) -> float:
    """Central mean simplified silhouette of ``X`` for ``centers`` (needs K >= 2)."""
    rows, C = _data_and_centers(X, centers, "simplified_silhouette")
    return _silhouette_total(rows, C) / float(rows.n_rows)
