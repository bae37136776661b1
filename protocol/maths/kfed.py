"""k-FED, the one-shot federated k-means baseline of Dennis, Li & Smith (2021), Algs. 1-2.

Participant (Alg. 1, "local k-means"): each participant clusters its own rows into
k' = min(k_local, n_samples) clusters and sends the k' centers once. What we implement:

1. k-means++ seeding with k' seeds;
2. the Awasthi-Sheffet pruning the authors use: the rows at least 3x closer to their own seed
   than to any other seed (||x - s_i|| ≤ ||x - s_j|| / 3 for all j ≠ i) give the mean that
   replaces seed i (a seed with no such row keeps its position);
3. Lloyd's algorithm to convergence from those means.

The authors first project the rows onto their top-k' singular directions (randomized SVD);
that step only matters when n_features ≫ k', so it is omitted here (the papers' synthetic
data are 2-D). Unlike federated k-means, k-FED sends raw local centers, so a singleton
cluster reveals a row: use it as a baseline, not under a min-cluster-size policy.

Coordinator (Alg. 2): start from one participant's centers (chosen at random), add the local
center farthest from the current set until there are k, then run unweighted Lloyd on all
local centers from that seed. Requires Σ_l k'_l >= k.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike
from sklearn.cluster import KMeans, kmeans_plusplus

from fedclust.core.errors import ProtocolError
from fedclust.core.validation import FloatArray, check_data, check_int, rng_from

from ._fuzzy import Centers, distances_t, squared_distances
from .rows import Rows, as_rows, fold

__all__ = ["combine_kfed", "participant_local_centers"]

_SEED_BOUND = 2**31 - 1
_PRUNE_RATIO_SQ = 9.0  # rows kept when 3·||x - s_i|| <= ||x - s_j||, compared squared


def pruned_sums_block(
    xb: FloatArray, nb: FloatArray, c: Centers
) -> tuple[FloatArray, FloatArray]:
    """Partial counts and sums, per own seed, of the block's rows >= 3x closer to their own
    seed than to any other."""
    d2 = distances_t(xb, nb, c)
    own = np.argmin(d2, axis=0)
    two = np.partition(d2, 1, axis=0)
    keep = _PRUNE_RATIO_SQ * two[0] <= two[1]
    onehot = ((own == np.arange(c.k)[:, None]) & keep).astype(np.float64)
    sums: FloatArray = onehot @ xb
    return onehot @ np.ones(onehot.shape[1]), sums


def _pruned_means(X: FloatArray | Rows, seeds: FloatArray) -> FloatArray:
    """Means of the rows >= 3x closer to their own seed than to any other seed."""
    rows = as_rows(X)
    if seeds.shape[0] == 1:
        out: FloatArray = rows.X.mean(axis=0, keepdims=True)
        return out
    c = Centers.of(seeds)
    counts, sums = fold(rows, lambda xb, nb: pruned_sums_block(xb, nb, c))
    out = seeds.copy()
    has = counts > 0
    out[has] = sums[has] / counts[has, None]
    return out


def participant_local_centers(
    X: ArrayLike | Rows,
    k_local: int,
    *,
    p: int = 1,
    seed: int | np.random.Generator | None = None,
) -> FloatArray:
    """Local k-means centers of k-FED (Alg. 1 without the SVD projection).

    A center is the mean of its cluster, so a cluster of one point sends that point. Only
    centers of clusters with at least ``p`` points are returned (Garst & Reinders' rule,
    applied here too; p = 1 is Dennis et al. as published).

    Args:
        X: the participant's rows, shape (n_samples, n_features).
        k_local: k', the number of local clusters (at most n_samples are formed).
        p: the minimum number of points behind a returned center.
        seed: algorithmic randomness of the seeding.

    Returns:
        The centers of the clusters with >= p points, shape (<= min(k_local, N), n_features).
    """
    rows = as_rows(X)
    X = rows.X
    k_local = check_int(k_local, name="k_local", owner="participant_local_centers", low=1)
    p = check_int(p, name="p", owner="participant_local_centers", low=1)
    rng = rng_from(seed)
    k_eff = min(k_local, X.shape[0])
    seeds, _ = kmeans_plusplus(X, n_clusters=k_eff, random_state=int(rng.integers(_SEED_BOUND)))
    init = _pruned_means(rows, np.ascontiguousarray(seeds, dtype=np.float64))
    if np.unique(init, axis=0).shape[0] < k_eff:  # duplicate rows: fall back to the seeds
        init = seeds
    km = KMeans(n_clusters=k_eff, init=init, n_init=1, random_state=int(rng.integers(_SEED_BOUND)))
    km.fit(X)
    sizes = np.bincount(km.labels_, minlength=k_eff)
    return np.ascontiguousarray(km.cluster_centers_[sizes >= p], dtype=np.float64)


def combine_kfed(
    local_centers: Sequence[ArrayLike],
    k: int,
    *,
    seed: int | np.random.Generator | None = None,
) -> FloatArray:
    """k-FED server step (Alg. 2): farthest-point seeding from one participant, then Lloyd.

    Args:
        local_centers: one array of local centers per participant, each (k'_l, n_features).
        k: the number of global clusters.
        seed: chooses the participant whose centers start the seeding.

    Returns:
        The global centers, shape (k, n_features).

    Raises:
        ProtocolError: inconsistent arrays, or fewer than k local centers in total.
    """
    k = check_int(k, name="k", owner="combine_kfed", low=1)
    if len(local_centers) == 0:
        raise ProtocolError("combine_kfed needs at least one participant's centers; got none.")
    blocks: list[FloatArray] = []
    for i, c in enumerate(local_centers):
        try:
            arr = check_data(c, name=f"local_centers[{i}]")
        except ValueError as exc:
            raise ProtocolError(str(exc)) from exc
        if blocks and arr.shape[1] != blocks[0].shape[1]:
            raise ProtocolError(
                f"local_centers[{i}] has n_features={arr.shape[1]}; earlier arrays have "
                f"{blocks[0].shape[1]}."
            )
        blocks.append(arr)
    total = sum(b.shape[0] for b in blocks)
    if total < k:
        raise ProtocolError(
            f"k-FED needs at least k={k} local centers in total (k_local x participants >= k); "
            f"got {total}."
        )
    allc = np.concatenate(blocks, axis=0)
    if np.unique(allc, axis=0).shape[0] < k:
        raise ProtocolError(f"the local centers contain fewer than k={k} distinct points.")
    rng = rng_from(seed)
    start = blocks[int(rng.integers(len(blocks)))]
    # Farthest-first traversal: begin with the chosen participant's centers (the first of
    # them if it already has more than k), then add the local center farthest from the set.
    chosen = [start[0]] if start.shape[0] > k else list(start)
    min_d2 = squared_distances(allc, np.asarray(chosen)).min(axis=1)
    while len(chosen) < k:
        j = int(min_d2.argmax())
        chosen.append(allc[j])
        min_d2 = np.minimum(min_d2, squared_distances(allc, allc[j : j + 1])[:, 0])
    init = np.asarray(chosen)
    if np.unique(init, axis=0).shape[0] < k:  # duplicated centers inside one participant
        init = allc[np.unique(allc, axis=0, return_index=True)[1][:k]]
    km = KMeans(n_clusters=k, init=init, n_init=1, random_state=int(rng.integers(_SEED_BOUND)))
    km.fit(allc)
    return np.ascontiguousarray(km.cluster_centers_, dtype=np.float64)
