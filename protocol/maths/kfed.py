"""k-FED, the one-shot federated k-means baseline of Dennis, Li & Smith (2021), Algs. 1-2,
in two variants: "kfed-dennis" as the paper writes it, and "kfed", a stronger one of ours.

"kfed-dennis" (:func:`dennis_local_centers`, :func:`combine_kfed_dennis`). Participant
(Alg. 1, "local k-means", after Awasthi & Sheffet 2012), k' = min(k_local, n_samples):

1. project the rows onto their top-k' right singular vectors: X̂ = X V_k' (SVD of the
   uncentred X, as Awasthi & Sheffet);
2. k-means++ seeding of X̂ (Arthur & Vassilvitskii 2007: each seed drawn with probability
   ∝ D², one candidate per draw);
3. S_r = the rows whose projection is at least 3x closer to seed r than to any other seed;
   θ_r = the mean of the original rows of S_r (the seed's own row if S_r is empty);
4. Lloyd's algorithm to convergence on the original rows from θ.

Coordinator (Alg. 2): start from the centers of one participant chosen at random, add the
local center farthest from the current set (max-min distance) until there are k, then ONE
Lloyd step over all local centers: each to its nearest seed, each global center the
unweighted mean of those assigned to it. Requires Σ_l k'_l >= k.

"kfed" (:func:`participant_local_centers`, :func:`combine_kfed`) differs in exactly three
places, which together make it stronger (measured: docs/center-kmeans.md § run_kfed): no SVD
projection (seeding and pruning on the original rows); scikit-learn's greedy k-means++
(2 + ln k' candidates per draw, the one that lowers the potential most kept) instead of one
candidate; and Lloyd to convergence on the server instead of one step. The authors' public
code (github.com/metastableB/kfed) sits between the two: its server runs Lloyd to convergence
from the first participant's centers, and it starts the local Lloyd from the projected means
of S_r; "kfed-dennis" follows the paper's text.

Both send raw local centers, so a singleton cluster reveals a row: the participant's
``min_cluster_size`` (p) applies to both (p = 1 is Dennis et al. as published).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike
from sklearn.cluster import KMeans, kmeans_plusplus

from fedclust.core.errors import ProtocolError
from fedclust.core.validation import FloatArray, check_data, check_int, rng_from

from ._fuzzy import Centers, distances_t, nearest, squared_distances
from .rows import Rows, as_rows, fold

__all__ = [
    "combine_kfed",
    "combine_kfed_dennis",
    "dennis_local_centers",
    "participant_local_centers",
]

_SEED_BOUND = 2**31 - 1
_PRUNE_RATIO_SQ = 9.0  # rows kept when 3·||x - s_i|| <= ||x - s_j||, compared squared


def _split(d2: FloatArray) -> FloatArray:
    """The 1:3 split (Alg. 1 step 3) as a (K, B) one-hot: row j marks its nearest seed if it
    is >= 3x closer to it than to any other seed; ``d2`` its squared distances to the K
    seeds, shape (K, B). With one seed every row is kept."""
    onehot = np.argmin(d2, axis=0) == np.arange(d2.shape[0])[:, None]
    if d2.shape[0] > 1:
        two = np.partition(d2, 1, axis=0)
        onehot &= _PRUNE_RATIO_SQ * two[0] <= two[1]
    out: FloatArray = onehot.astype(np.float64)
    return out


def _means_or_seeds(counts: FloatArray, sums: FloatArray, seeds: FloatArray) -> FloatArray:
    """θ_r = the mean of seed r's kept rows (``sums / counts``), the seed itself where it kept
    none; all the seeds if two θ coincide (duplicate rows)."""
    out = seeds.copy()
    has = counts > 0
    out[has] = sums[has] / counts[has, None]
    return seeds if np.unique(out, axis=0).shape[0] < seeds.shape[0] else out


def pruned_sums_block(
    xb: FloatArray, nb: FloatArray, c: Centers
) -> tuple[FloatArray, FloatArray]:
    """Partial counts and sums, per own seed, of the block's rows >= 3x closer to their own
    seed than to any other (:func:`_split`)."""
    onehot = _split(distances_t(xb, nb, c))
    sums: FloatArray = onehot @ xb
    return onehot @ np.ones(onehot.shape[1]), sums


def _pruned_means(X: FloatArray | Rows, seeds: FloatArray) -> FloatArray:
    """:func:`_means_or_seeds` of the rows >= 3x closer to their own seed than to any other."""
    counts, sums = fold(as_rows(X), lambda xb, nb: pruned_sums_block(xb, nb, Centers.of(seeds)))
    return _means_or_seeds(counts, sums, seeds)


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
    return _lloyd(X, init, p, rng)


def _lloyd(X: FloatArray, init: FloatArray, p: int, rng: np.random.Generator) -> FloatArray:
    """Lloyd's algorithm to convergence on X from ``init``; the centers of the clusters with
    at least ``p`` rows."""
    k = init.shape[0]
    km = KMeans(n_clusters=k, init=init, n_init=1, random_state=int(rng.integers(_SEED_BOUND)))
    km.fit(X)
    sizes = np.bincount(km.labels_, minlength=k)
    return np.ascontiguousarray(km.cluster_centers_[sizes >= p], dtype=np.float64)


def dennis_local_centers(
    X: ArrayLike | Rows,
    k_local: int,
    *,
    p: int = 1,
    seed: int | np.random.Generator | None = None,
) -> FloatArray:
    """Local k-means centers of "kfed-dennis" (Dennis et al. Alg. 1: SVD projection,
    k-means++ seeding, the 1:3 split, Lloyd; see the module docstring).

    Args:
        X: the participant's rows, shape (n_samples, n_features).
        k_local: k', the number of local clusters (with n_samples <= k', every row is its
            own center, as the authors' code does).
        p: the minimum number of points behind a returned center (the participant's policy).
        seed: algorithmic randomness of the seeding.

    Returns:
        The centers of the clusters with >= p points, shape (<= min(k_local, N), n_features).
    """
    owner = "dennis_local_centers"
    X = as_rows(X).X
    k_local = check_int(k_local, name="k_local", owner=owner, low=1)
    p = check_int(p, name="p", owner=owner, low=1)
    rng = rng_from(seed)
    if X.shape[0] <= k_local:
        return np.ascontiguousarray(X, dtype=np.float64) if p == 1 else X[:0].copy()
    # Top-k' right singular vectors of X = the top eigenvectors of X^T X (a D x D problem).
    _, vectors = np.linalg.eigh(X.T @ X)
    projected = X @ vectors[:, ::-1][:, :k_local]
    _, seeds = kmeans_plusplus(
        projected, n_clusters=k_local, n_local_trials=1,
        random_state=int(rng.integers(_SEED_BOUND)),
    )
    onehot = _split(squared_distances(projected, projected[seeds]).T)
    init = _means_or_seeds(onehot.sum(axis=1), onehot @ X, X[seeds])
    return _lloyd(X, init, p, rng)


def _farthest_first(
    local_centers: Sequence[ArrayLike], k: int, rng: np.random.Generator, owner: str
) -> tuple[FloatArray, FloatArray]:
    """All local centers stacked, and the k-FED server's k seeds among them (Alg. 2): the
    centers of one participant chosen at random (the first of them if it has more than k),
    then the local center farthest from the set chosen so far, until there are k.

    Raises:
        ProtocolError: inconsistent arrays, or fewer than k distinct local centers in total.
    """
    if len(local_centers) == 0:
        raise ProtocolError(f"{owner} needs at least one participant's centers; got none.")
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
    start = blocks[int(rng.integers(len(blocks)))]
    chosen = [start[0]] if start.shape[0] > k else list(start)
    min_d2 = squared_distances(allc, np.asarray(chosen)).min(axis=1)
    while len(chosen) < k:
        j = int(min_d2.argmax())
        chosen.append(allc[j])
        min_d2 = np.minimum(min_d2, squared_distances(allc, allc[j : j + 1])[:, 0])
    init = np.asarray(chosen)
    if np.unique(init, axis=0).shape[0] < k:  # duplicated centers inside one participant
        init = allc[np.unique(allc, axis=0, return_index=True)[1][:k]]
    return allc, init


def combine_kfed(
    local_centers: Sequence[ArrayLike],
    k: int,
    *,
    seed: int | np.random.Generator | None = None,
) -> FloatArray:
    """Server step of "kfed": farthest-point seeding from one participant, then Lloyd to
    convergence over all local centers (unweighted).

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
    rng = rng_from(seed)
    allc, init = _farthest_first(local_centers, k, rng, "combine_kfed")
    km = KMeans(n_clusters=k, init=init, n_init=1, random_state=int(rng.integers(_SEED_BOUND)))
    km.fit(allc)
    return np.ascontiguousarray(km.cluster_centers_, dtype=np.float64)


def combine_kfed_dennis(
    local_centers: Sequence[ArrayLike],
    k: int,
    *,
    seed: int | np.random.Generator | None = None,
) -> FloatArray:
    """Server step of "kfed-dennis" (Dennis et al. Alg. 2): farthest-point seeding from one
    participant, then one Lloyd step over all local centers θ: τ_r = {θ nearest seed r},
    global center r = mean(τ_r), unweighted. Every seed is itself a local center, so τ_r
    holds at least that one (a seed left alone by rounding stays where it is).

    Args, Returns and Raises: as :func:`combine_kfed`.
    """
    k = check_int(k, name="k", owner="combine_kfed_dennis", low=1)
    allc, init = _farthest_first(local_centers, k, rng_from(seed), "combine_kfed_dennis")
    labels = nearest(allc, init)
    counts = np.bincount(labels, minlength=k).astype(np.float64)[:, None]
    sums = np.zeros_like(init)
    np.add.at(sums, labels, allc)
    means = np.where(counts > 0, sums / np.maximum(counts, 1.0), init)
    return np.ascontiguousarray(means, dtype=np.float64)
