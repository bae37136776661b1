"""k-means over the participants' local centers from summed statistics only: the one server
procedure of FedFCM's k-means averaging (Stallmann & Wilbik §2.2.1) and of federated k-means
(Garst & Reinders, Alg. 1), whatever the protection.

A participant holds local centers p_l,j with weights w_l,j and answers, for centers C, only
sums over them per global cluster k (:func:`participant_center_sums`, :class:`CenterSums`):
S_k = Σ_{a(j)=k} w·p, W_k = Σ_{a(j)=k} w, the inertia I = Σ_j w·||p − c_a(j)||² and
n_k = [W_k > 0], with a(j) = argmin_k ||p_l,j − c_k||; and, to split or swap, each cluster's
scatter and removal cost (:func:`participant_center_scatter`). Summed, they give Lloyd's
update c_k = ΣS_k / ΣW_k. :func:`center_kmeans` runs Lloyd from ``init`` (or the pooled mean),
splits clusters along their principal axis until K are non-empty (bisecting k-means searched
with a beam), then, when seeding, swap moves and iterated local search. Its draws come only
from ``seed`` and its decisions compare values rounded to 9 digits, so every protection gives
the same result; a cluster without support is never reported (the result says how many).

Design notes: ``docs/center-kmeans.md`` (§ The server procedure from sums).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fedclust.core.errors import ProtocolError
from fedclust.core.validation import FloatArray, check_centers, check_data, check_int, rng_from

from ._fuzzy import nearest, squared_distances

__all__ = [
    "CenterKMeansResult",
    "CenterOracle",
    "CenterScatter",
    "CenterSums",
    "LocalPoints",
    "PointsOracle",
    "add_center_scatter",
    "add_center_sums",
    "center_kmeans",
    "center_scatter_fields",
    "center_sums_fields",
    "check_starts",
    "combine_center_sums",
    "participant_center_scatter",
    "participant_center_sums",
]

#: Decisions compare values rounded to this many significant digits of their largest
#: magnitude: far coarser than a protected sum's rounding (< 1e-12 relative) and than the
#: differences a local FCM's stopping tolerance leaves between two runs (~1e-8).
_DIGITS = 6
#: Relative offset δ/σ of the two halves of a split from the cluster's center.
_SPLIT_OFFSET = 1e-2
#: A move must lower the inertia by more than this fraction to be kept (no churn on ties).
_IMPROVEMENT = 1e-9
#: Standard deviation of a perturbation, as a fraction of each cluster's own spread.
_PERTURBATION = 0.5


@dataclass(frozen=True)
class CenterSums:
    """One participant's (or the federation's summed) assignment of local centers to S starts.

    Attributes:
        sums: (S, K, D) S_k = Σ w_j p_j over the local centers nearest to center k.
        weights: (S, K) W_k = Σ w_j over the same local centers.
        inertia: (S,) Σ_j w_j ||p_j − c_a(j)||², the k-means objective of each start.
        contributors: (S, K) 1 where this participant has a local center nearest to center
            k (summed: how many participants stand behind it).
        objective: the participant's J_m of the centers its local centers started from
            (FedFCM's cycle guard, ``coordinator.fedfcm``); 0 for federated k-means.
    """

    sums: FloatArray
    weights: FloatArray
    inertia: FloatArray
    contributors: FloatArray
    objective: float = 0.0


@dataclass(frozen=True)
class CenterScatter:
    """Per-cluster spread of the local centers nearest to each of K centers, for S starts.

    Attributes:
        scatter: (S, K, D(D+1)/2) the upper triangle (row-major, ``numpy.triu_indices``) of
            Σ_{a(j)=k} w_j (p_j − c_k)(p_j − c_k)ᵀ; its trace is the cluster's inertia.
        removal: (S, K) Σ_{a(j)=k} w_j (d²(p_j, second nearest center) − d²(p_j, c_k)), the
            inertia added if center k were removed and its points moved to their next center.
    """

    scatter: FloatArray
    removal: FloatArray

    def matrices(self, n_features: int) -> FloatArray:
        """The (S, K, D, D) symmetric scatter matrices."""
        rows, cols = np.triu_indices(n_features)
        out = np.zeros((*self.scatter.shape[:2], n_features, n_features))
        out[..., rows, cols] = self.scatter
        out[..., cols, rows] = self.scatter
        return out


@dataclass(frozen=True)
class LocalPoints:
    """A participant's held local centers (``points``, (P, D)) and their ``weights`` (P,)."""

    points: FloatArray
    weights: FloatArray


def check_starts(centers: ArrayLike, *, n_features: int | None = None) -> FloatArray:
    """``centers`` as a finite (S, K, D) float64 array."""
    arr = np.asarray(centers, dtype=np.float64)
    if arr.ndim != 3 or 0 in arr.shape or not np.isfinite(arr).all():
        raise ValueError(
            f"centers must be a finite array of shape (S, K, D) with S, K, D >= 1; got shape "
            f"{arr.shape}."
        )
    if n_features is not None and arr.shape[2] != n_features:
        raise ValueError(f"centers must have {n_features} features; got shape {arr.shape}.")
    return arr


def _check_points(held: LocalPoints) -> tuple[FloatArray, FloatArray]:
    P = check_data(held.points, name="points", min_samples=0)
    w = np.asarray(held.weights, dtype=np.float64)
    if w.shape != (P.shape[0],) or not np.isfinite(w).all() or (w < 0.0).any():
        raise ValueError(
            f"weights must be {P.shape[0]} finite non-negative numbers, one per point; "
            f"got shape {w.shape}."
        )
    return P, w


def participant_center_sums(
    held: LocalPoints, centers: ArrayLike, *, objective: float = 0.0
) -> CenterSums:
    """S_k, W_k, I and the contributor indicators of the held points for each start."""
    P, w = _check_points(held)
    C = check_starts(centers, n_features=P.shape[1])
    S, K, _ = C.shape
    sums = np.zeros_like(C)
    totals = np.zeros((S, K))
    inertia = np.zeros(S)
    if P.shape[0]:
        for s in range(S):
            labels = nearest(P, C[s])
            np.add.at(sums[s], labels, w[:, None] * P)
            totals[s] = np.bincount(labels, weights=w, minlength=K)
            d2 = squared_distances(P, C[s])[np.arange(P.shape[0]), labels]
            inertia[s] = float(w @ d2)
    return CenterSums(
        sums=sums, weights=totals, inertia=inertia,
        contributors=(totals > 0.0).astype(np.float64), objective=float(objective),
    )


def participant_center_scatter(held: LocalPoints, centers: ArrayLike) -> CenterScatter:
    """Packed scatter matrices and removal costs of the held points for each (S, K, D) start."""
    P, w = _check_points(held)
    C = check_starts(centers, n_features=P.shape[1])
    S, K, D = C.shape
    rows, cols = np.triu_indices(D)
    scatter = np.zeros((S, K, rows.size))
    removal = np.zeros((S, K))
    for s in range(S if P.shape[0] else 0):
        d2 = squared_distances(P, C[s])
        labels = nearest(P, C[s])
        for k in np.unique(labels):
            mine = labels == k
            diff = P[mine] - C[s, k]
            full = (w[mine, None] * diff).T @ diff
            scatter[s, k] = full[rows, cols]
        if K > 1:
            ordered = np.partition(d2, 1, axis=1)
            removal[s] = np.bincount(
                labels, weights=w * (ordered[:, 1] - ordered[:, 0]), minlength=K
            )
    return CenterScatter(scatter=scatter, removal=removal)


def center_sums_fields(
    held: tuple[LocalPoints, float], centers: ArrayLike, *, weight_bound: float | None = None
) -> dict[str, FloatArray]:
    """The ``center_sums`` statistic (``protocol.algorithms.statistics``) of the held local
    centers and their objective: the fields of :func:`participant_center_sums`, ``objective``
    of shape (1,) (``weight_bound`` bounds only their encoding)."""
    found = participant_center_sums(held[0], centers, objective=held[1])
    return {"sums": found.sums, "weights": found.weights, "inertia": found.inertia,
            "contributors": found.contributors, "objective": np.array([found.objective])}


def center_scatter_fields(
    held: tuple[LocalPoints, float], centers: ArrayLike, *, weight_bound: float | None = None
) -> dict[str, FloatArray]:
    """The ``center_scatter`` statistic (``protocol.algorithms.statistics``) of the held local
    centers: the fields of :func:`participant_center_scatter` (``weight_bound`` bounds only
    their encoding)."""
    found = participant_center_scatter(held[0], centers)
    return {"scatter": found.scatter, "removal": found.removal}


def add_center_sums(sums: Sequence[CenterSums], shape: tuple[int, ...]) -> CenterSums:
    """The sum of participants' :class:`CenterSums` for starts of ``shape`` (S, K, D)."""
    if len(sums) == 0:
        raise ProtocolError("no center sums to combine: every participant is missing.")
    S = np.zeros(shape)
    W = np.zeros(shape[:2])
    inertia = np.zeros(shape[0])
    n = np.zeros(shape[:2])
    objective = 0.0
    for i, part in enumerate(sums):
        s, w = np.asarray(part.sums), np.asarray(part.weights)
        if s.shape != shape or w.shape != shape[:2] or np.shape(part.inertia) != shape[:1]:
            raise ProtocolError(
                f"center sums {i} have shapes {s.shape} and {w.shape}; expected {shape} "
                f"and {shape[:2]}."
            )
        S += s
        W += w
        inertia += part.inertia
        n += part.contributors
        objective += part.objective
    if not all(np.isfinite(a).all() for a in (S, W, inertia, n)):
        raise ProtocolError("center sums are not finite.")
    return CenterSums(sums=S, weights=W, inertia=inertia, contributors=n, objective=objective)


def add_center_scatter(parts: Sequence[CenterScatter]) -> CenterScatter:
    """The sum of participants' :class:`CenterScatter` (all of one shape)."""
    if len(parts) == 0:
        raise ProtocolError("no center scatter to combine: every participant is missing.")
    shape = np.shape(parts[0].scatter)
    if any(np.shape(p.scatter) != shape or np.shape(p.removal) != shape[:2] for p in parts):
        raise ProtocolError("center scatter answers differ in shape.")
    return CenterScatter(
        scatter=np.sum([p.scatter for p in parts], axis=0),
        removal=np.sum([p.removal for p in parts], axis=0),
    )


def combine_center_sums(total: CenterSums, previous: ArrayLike) -> FloatArray:
    """Lloyd's update c_k = ΣS_k / ΣW_k per start; an empty center keeps its previous value
    (:func:`center_kmeans` then replaces it by a split)."""
    C = check_starts(previous)
    filled = total.weights > 0.0
    out = C.copy()
    out[filled] = total.sums[filled] / total.weights[filled][:, None]
    return out


class CenterOracle(Protocol):
    """The summed statistics of every participant's held points (the only I/O of
    :func:`center_kmeans`): plain, masked or encrypted sums are all the same to it."""

    def center_sums(self, starts: FloatArray) -> CenterSums:
        """Σ over participants of :func:`participant_center_sums` for (S, K, D) ``starts``."""
        ...

    def center_scatter(self, starts: FloatArray) -> CenterScatter:
        """Σ over participants of :func:`participant_center_scatter` for (S, K, D) ``starts``."""
        ...


@dataclass(frozen=True)
class CenterKMeansResult:
    """The outcome of :func:`center_kmeans`.

    Attributes:
        centers: (K', D) centers with support, K' <= K (K' < K only when the points cannot
            fill K clusters).
        weights: (K',) the summed weight ΣW_k behind each center.
        contributors: (K',) how many participants' points are nearest to each center.
        inertia: the summed k-means objective of ``centers``.
        objective: the summed ``objective`` the participants reported (FedFCM's J_m).
        sums: the number of summations asked for.
        empty: K − K'.
    """

    centers: FloatArray
    weights: FloatArray
    contributors: FloatArray
    inertia: float
    objective: float
    sums: int
    empty: int


class _Run:
    """Lloyd iterations and spread questions through one oracle, counting the sums."""

    def __init__(self, oracle: CenterOracle, max_iter: int) -> None:
        self._oracle = oracle
        self._max_iter = max_iter
        self.sums = 0

    def lloyd(self, starts: FloatArray) -> tuple[FloatArray, CenterSums]:
        """Lloyd from each (S, K, D) start to its fixed point; the centers and their sums."""
        centers = starts
        for _ in range(self._max_iter):
            total = self._oracle.center_sums(centers)
            self.sums += 1
            new = combine_center_sums(total, centers)
            if np.array_equal(new, centers):
                break
            centers = new
        return centers, total  # ``total`` is of ``centers``, the last starts sent

    def scatter(self, starts: FloatArray) -> tuple[FloatArray, FloatArray]:
        """(S, K, D, D) scatter matrices, each rounded like :func:`_rounded` so that the
        principal axes do not depend on a protected sum's rounding, and (S, K) removal costs."""
        found = self._oracle.center_scatter(starts)
        self.sums += 1
        matrices = found.matrices(starts.shape[2])
        scale = np.abs(matrices).max(axis=(2, 3), keepdims=True)
        rounded = np.round(matrices / np.where(scale > 0.0, scale, 1.0), _DIGITS) * scale
        return rounded, np.asarray(found.removal)


@dataclass(frozen=True)
class _State:
    """One clustering the search keeps: its (K', D) centers and their sums (one start)."""

    centers: FloatArray
    sums: CenterSums

    @property
    def inertia(self) -> float:
        return float(self.sums.inertia[0])

    @property
    def weights(self) -> FloatArray:
        weights: FloatArray = self.sums.weights[0]
        return weights


def _rounded(values: FloatArray) -> FloatArray:
    """``values`` to 9 significant digits of their largest magnitude, so that comparisons
    (and ties, which go to the lowest index) do not depend on the fixed-point rounding of a
    protected sum (relative error < 1e-12)."""
    scale = float(np.max(np.abs(values), initial=0.0))
    out: FloatArray = values if scale == 0.0 else np.round(values / scale, _DIGITS)
    return out


def _states(found: FloatArray, total: CenterSums, keep: int) -> list[_State]:
    """The ``keep`` best distinct results of side-by-side starts: no empty cluster, least
    inertia first (ties to the lowest start), one per inertia value."""
    inertia = _rounded(total.inertia)
    empty: NDArray[np.bool_] = np.asarray((total.weights <= 0.0).any(axis=1))
    chosen: list[_State] = []
    seen: set[float] = set()
    for s in np.lexsort((inertia, empty)):
        if empty[s] and chosen:
            break
        if float(inertia[s]) in seen:
            continue
        seen.add(float(inertia[s]))
        chosen.append(_State(found[s], _pick(total, int(s))))
        if len(chosen) == keep or empty[s]:
            break
    return chosen


def _halves(center: FloatArray, scatter: FloatArray, weight: float) -> tuple[FloatArray, ...]:
    """c ± δ·v along the principal axis v of one cluster's scatter (δ = 1 % of its spread)."""
    values, vectors = np.linalg.eigh(scatter)
    axis = vectors[:, -1]
    axis = axis if axis[np.argmax(np.abs(axis))] > 0.0 else -axis  # one sign for one axis
    delta = _SPLIT_OFFSET * np.sqrt(max(values[-1], 0.0) / weight)
    return center + delta * axis, center - delta * axis


def _spread(scatter: FloatArray, weights: FloatArray) -> FloatArray:
    """Per cluster its inertia (trace of the scatter), 0 where it cannot be split."""
    return _rounded(np.where(weights > 0.0, np.trace(scatter, axis1=1, axis2=2), 0.0))


def _splits(state: _State, scatter: FloatArray, n: int) -> list[FloatArray]:
    """(K'+1, D) starts: each of the ``n`` clusters of largest inertia split in two."""
    spread = _spread(scatter, state.weights)
    starts = []
    for j in np.argsort(-spread, kind="stable")[:n]:
        if spread[j] <= 0.0:
            break
        plus, minus = _halves(state.centers[j], scatter[j], float(state.weights[j]))
        start = np.vstack([state.centers, minus[None]])
        start[j] = plus
        starts.append(start)
    return starts


def _swaps(state: _State, scatter: FloatArray, removal: FloatArray, n: int) -> list[FloatArray]:
    """(K', D) starts: one of the ``n`` centers of least removal cost moved into the split of
    one of the ``n`` clusters of largest inertia."""
    spread = _spread(scatter, state.weights)
    splits = [j for j in np.argsort(-spread, kind="stable")[:n] if spread[j] > 0.0]
    starts = []
    for i in np.argsort(_rounded(removal), kind="stable")[:n]:
        for j in splits:
            if i != j:
                plus, minus = _halves(state.centers[j], scatter[j], float(state.weights[j]))
                start = state.centers.copy()
                start[j], start[i] = plus, minus
                starts.append(start)
    return starts


def center_kmeans(
    oracle: CenterOracle,
    k: int,
    n_features: int,
    *,
    init: ArrayLike | None = None,
    max_iter: int = 300,
    beam: int = 4,
    split_candidates: int = 5,
    swap_candidates: int = 3,
    max_swaps: int = 50,
    perturbations: int = 16,
    patience: int = 3,
    seed: int | np.random.Generator | None = None,
) -> CenterKMeansResult:
    """Weighted k-means of the participants' held points from their sums (module docstring).

    Args:
        oracle: the summed statistics of the held points.
        k: the number of clusters K.
        n_features: D.
        init: (K, D) starting centers (the previous global centers); None seeds by splits
            from the pooled mean and improves the seeding by swap moves.
        max_iter: the most Lloyd iterations from one start.
        beam: clusterings kept side by side while seeding (a beam search over splits).
        split_candidates: clusters of each kept clustering tried for a split.
        swap_candidates: centers to remove and clusters to split tried per swap move.
        max_swaps: the most swap moves kept.
        perturbations: perturbed copies of the best seeding tried side by side per round.
        patience: perturbation rounds without improvement before the seeding stops.
        seed: the perturbations' random draws (the same whatever the protection).

    Returns:
        :class:`CenterKMeansResult`.
    """
    owner = "center_kmeans"
    k = check_int(k, name="k", owner=owner, low=1)
    max_iter = check_int(max_iter, name="max_iter", owner=owner, low=1)
    beam = check_int(beam, name="beam", owner=owner, low=1)
    split_candidates = check_int(split_candidates, name="split_candidates", owner=owner, low=1)
    swap_candidates = check_int(swap_candidates, name="swap_candidates", owner=owner, low=1)
    max_swaps = check_int(max_swaps, name="max_swaps", owner=owner, low=0)
    perturbations = check_int(perturbations, name="perturbations", owner=owner, low=1)
    patience = check_int(patience, name="patience", owner=owner, low=0)
    run = _Run(oracle, max_iter)
    if init is None:
        start = np.zeros((1, 1, n_features))
    else:
        first = check_centers(init, n_features=n_features, name="init")
        if first.shape[0] != k:
            raise ValueError(f"init must have k={k} rows; got shape {first.shape}.")
        start = first[None]
        beam = 1  # a warm start follows its centers; only an empty cluster is re-seeded
    kept = _states(*run.lloyd(start), keep=1)

    for _ in range(4 * k):  # each pass adds a cluster or drops the empty ones
        best = kept[0]
        filled = best.weights > 0.0
        if filled.sum() == k or not filled.any():
            break
        if not filled.all():  # only the best can have an empty cluster (see _states)
            kept = _states(*run.lloyd(best.centers[filled][None]), keep=1)
            continue
        scatter, _ = run.scatter(np.stack([state.centers for state in kept]))
        starts = [
            start
            for state, spread in zip(kept, scatter, strict=True)
            for start in _splits(state, spread, split_candidates)
        ]
        if not starts:
            break  # every cluster is a single point: fewer distinct points than K
        kept = _states(*run.lloyd(np.stack(starts)), keep=beam)

    if init is None and k > 1 and kept[0].centers.shape[0] == k:
        kept = [state for state in kept if state.centers.shape[0] == k]
        for _ in range(max_swaps):
            scatter, removal = run.scatter(np.stack([state.centers for state in kept]))
            moves = [
                _swaps(state, spread, cost, swap_candidates)
                for state, spread, cost in zip(kept, scatter, removal, strict=True)
            ]
            if not any(moves):
                break
            found, total = run.lloyd(np.stack([start for own in moves for start in own]))
            improved, offset = False, 0
            for i, own in enumerate(moves):
                ours = slice(offset, offset + len(own))
                offset += len(own)
                better = _states(found[ours], _slice(total, ours), keep=1)
                if better and _improves(better[0], kept[i]):
                    kept[i], improved = better[0], True
            if not improved:
                break

    best = kept[int(np.argmin(_rounded(np.array([state.inertia for state in kept]))))]
    if init is None and k > 1 and best.centers.shape[0] == k:
        best = _perturbed(run, best, perturbations, patience, rng_from(seed))
    filled = best.weights > 0.0
    return CenterKMeansResult(
        centers=np.ascontiguousarray(best.centers[filled]),
        weights=best.weights[filled],
        contributors=best.sums.contributors[0][filled],
        inertia=best.inertia,
        objective=best.sums.objective,
        sums=run.sums,
        empty=k - int(filled.sum()),
    )


def _improves(new: _State, old: _State) -> bool:
    """A move is kept when it empties no cluster and lowers the inertia by a margin (compared
    on rounded values, like every decision here)."""
    inertia = _rounded(np.array([new.inertia, old.inertia * (1.0 - _IMPROVEMENT)]))
    return bool((new.weights > 0.0).all()) and bool(inertia[0] < inertia[1])


def _perturbed(
    run: _Run, best: _State, copies: int, patience: int, rng: np.random.Generator
) -> _State:
    """Iterated local search: Lloyd from ``copies`` perturbations of the best clustering
    (each center moved by N(0, (0.5 σ_k)²) per coordinate, σ_k its cluster's spread, and kept
    within the centers' bounding box so every distance stays within the declared bounds);
    keep an improvement, stop after ``patience`` rounds without one. An empty cluster has no
    spread: its center gets no noise."""
    failures = 0
    K, D = best.centers.shape
    while failures < patience:
        scatter, _ = run.scatter(best.centers[None])
        filled = best.weights > 0.0
        spread = np.sqrt(np.divide(
            np.trace(scatter[0], axis1=1, axis2=2), best.weights * D,
            out=np.zeros(K), where=filled,
        ))
        noise = rng.standard_normal((copies, K, D)) * (_PERTURBATION * spread)[None, :, None]
        low, high = best.centers.min(axis=0), best.centers.max(axis=0)
        moved = _states(*run.lloyd(np.clip(best.centers + noise, low, high)), keep=1)
        if moved and _improves(moved[0], best):
            best, failures = moved[0], 0
        else:
            failures += 1
    return best


def _pick(total: CenterSums, start: int) -> CenterSums:
    """The sums of one start, as a one-start :class:`CenterSums`."""
    return _slice(total, slice(start, start + 1))


def _slice(total: CenterSums, starts: slice) -> CenterSums:
    """The sums of a range of starts."""
    return CenterSums(
        sums=total.sums[starts], weights=total.weights[starts], inertia=total.inertia[starts],
        contributors=total.contributors[starts], objective=total.objective,
    )


class PointsOracle:
    """The oracle over held points in one place: the pooled reference of a federation (and
    of tests), each held set counting as one participant."""

    def __init__(self, held: Sequence[LocalPoints]) -> None:
        self._held = list(held)

    def center_sums(self, starts: FloatArray) -> CenterSums:
        parts = [participant_center_sums(h, starts) for h in self._held]
        return add_center_sums(parts, starts.shape)

    def center_scatter(self, centers: FloatArray) -> CenterScatter:
        return add_center_scatter([participant_center_scatter(h, centers) for h in self._held])
