"""Central references: fuzzy c-means (Bezdek 1981) and k-means on pooled data.

Fuzzy c-means minimises J_m(U, C) = Σ_j Σ_i u_ij^m ||x_j - c_i||² subject to Σ_i u_ij = 1 by
alternating the two optimality conditions (Bezdek 1981, eqs. 11.3a-b):

    u_ij = 1 / Σ_k (||x_j - c_i|| / ||x_j - c_k||)^(2/(m-1))          (memberships)
    c_i  = Σ_j u_ij^m x_j / Σ_j u_ij^m                                  (centers)

Stopping rule: after each center update, stop when ||U_t - U_{t-1}||_F < ``tol`` (Frobenius
norm of the change of the NxK membership matrix; the first iteration has no predecessor and
never stops), or after ``max_iter`` center updates. This is the rule of scikit-fuzzy and of the
federated FCM papers' code. ``tol=0`` runs exactly ``max_iter`` updates, which is how the
exact federated FCM (``protocol.maths.exact_fcm``) is compared with this reference.

A center whose membership mass Σ_j u_ij^m is exactly 0 (possible only by underflow) keeps its
previous position, as in Corcuera Bárcena et al.'s code.

Memory: one NxK buffer (the previous memberships) plus block-sized temporaries; the change
of U is accumulated block by block, so one iteration computes each distance once. The rows
are checked and their squared norms computed once per fit (``protocol.maths.rows.Rows``), not
every iteration.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fedclust.core.validation import (
    FloatArray,
    check_centers,
    check_data,
    check_float,
    check_fuzzifier,
    check_int,
    check_n_samples_for_k,
    rng_from,
)

from ._fuzzy import Centers, fcm_step_block, memberships, objective
from .rows import (
    BLOCK_ROWS,
    Block,
    Rows,
    RowSource,
    as_rows,
    blas_threads,
    map_in_order,
    sum_in_order,
)

__all__ = ["FCMResult", "fcm", "fcm_memberships", "kmeans"]

InitName = Literal["k-means++", "random"]
_INIT_NAMES = ("k-means++", "random")


@dataclass(frozen=True)
class FCMResult:
    """Outcome of one central FCM fit (the best of ``n_init`` restarts).

    Attributes:
        centers: (K, D) cluster centers.
        objective: J_m at ``centers`` with the optimal memberships for them.
        n_iter: center updates performed by the kept run.
        converged: whether the kept run met the tolerance before ``max_iter``.
    """

    centers: FloatArray
    objective: float
    n_iter: int
    converged: bool


def _centers_from_sums(
    u_sum: FloatArray, weighted_sum: FloatArray, previous: FloatArray
) -> FloatArray:
    """c_i = WS_i / U_i, keeping ``previous[i]`` where U_i == 0 (shared with exact_fcm)."""
    empty = u_sum == 0.0
    safe: FloatArray = np.where(empty, 1.0, u_sum)
    new: FloatArray = weighted_sum / safe[:, None]
    if empty.any():
        new[empty] = previous[empty]
    return new


def _fcm_step(
    rows: Rows, C: FloatArray, m: float, U: FloatArray, *, measure: bool
) -> tuple[FloatArray, float]:
    """One Bezdek iteration: memberships from ``C`` into the (K, N) buffer ``U``, then centers.

    With ``measure`` the buffer must hold the previous memberships and the Frobenius norm of
    their change is returned (accumulated block by block); otherwise the change is ``inf``.
    Internal (inputs trusted); the benchmark times it.
    """
    c = Centers.of(C)

    def step(item: tuple[int, Block]) -> tuple[FloatArray, FloatArray, float]:
        start, (xb, nb) = item
        return fcm_step_block(xb, nb, c, m, U[:, start : start + xb.shape[0]], measure)

    starts = range(0, rows.n_rows, BLOCK_ROWS)
    with blas_threads(1):
        u_sum, ws, change2 = sum_in_order(map_in_order(step, zip(starts, rows, strict=True)))
    change = float(np.sqrt(change2)) if measure else float("inf")
    return _centers_from_sums(u_sum, ws, C), change


def _fit_once(
    rows: Rows, C0: FloatArray, m: float, tol: float, max_iter: int
) -> FCMResult:
    U = np.empty((C0.shape[0], rows.n_rows))
    C = C0
    converged = False
    n_iter = 0
    while n_iter < max_iter:
        C, change = _fcm_step(rows, C, m, U, measure=n_iter > 0)
        n_iter += 1
        if change < tol:
            converged = True
            break
    return FCMResult(
        centers=C, objective=objective(rows, C, m), n_iter=n_iter, converged=converged
    )


def _initial_centers(
    X: FloatArray, k: int, init: InitName, rng: np.random.Generator
) -> FloatArray:
    if init == "k-means++":
        from sklearn.cluster import kmeans_plusplus  # scikit-learn loads when first needed

        state = int(rng.integers(np.iinfo(np.int32).max))
        centers, _ = kmeans_plusplus(X, k, random_state=state)
        return np.ascontiguousarray(centers, dtype=np.float64)
    rows = rng.choice(X.shape[0], size=k, replace=False)
    return X[np.sort(rows)].copy()


def fcm(
    X: ArrayLike | RowSource,
    k: int,
    *,
    m: float = 2.0,
    tol: float = 1e-4,
    max_iter: int = 300,
    init: InitName | ArrayLike = "k-means++",
    n_init: int = 1,
    seed: int | np.random.Generator | None = None,
) -> FCMResult:
    """Bezdek's fuzzy c-means on pooled data, the central reference of every federated FCM.

    Args:
        X: data, shape (n_samples, n_features).
        k: number of clusters K.
        m: fuzzifier, > 1.
        tol: stop when ||U_t - U_{t-1}||_F < tol (Frobenius norm of the membership change);
            0 runs exactly ``max_iter`` center updates.
        max_iter: the most center updates per run.
        init: ``"k-means++"`` (scikit-learn's seeding), ``"random"`` (k distinct rows) or an
            explicit (K, D) array of initial centers (then a single run, whatever n_init).
        n_init: restarts from independent initialisations; the lowest J_m is kept.
        seed: seed or Generator for the initialisations.

    Returns:
        FCMResult with centers, J_m, the iteration count and whether it converged.
    """
    owner = "fcm"
    rows = as_rows(X)
    Xa = rows.X
    k = check_int(k, name="k", owner=owner, low=1)
    m = check_fuzzifier(m, owner=owner)
    tol = check_float(tol, name="tol", owner=owner, low=0.0)
    max_iter = check_int(max_iter, name="max_iter", owner=owner, low=1)
    n_init = check_int(n_init, name="n_init", owner=owner, low=1)
    check_n_samples_for_k(Xa.shape[0], k)

    starts: list[FloatArray]
    if isinstance(init, str):
        if init not in _INIT_NAMES:
            raise ValueError(
                f"The 'init' parameter of {owner} must be 'k-means++', 'random' or an array of "
                f"shape (k, n_features). Got {init!r} instead."
            )
        rng = rng_from(seed)
        name: InitName = "k-means++" if init == "k-means++" else "random"
        starts = [_initial_centers(Xa, k, name, rng) for _ in range(n_init)]
    else:
        C0 = check_centers(init, n_features=Xa.shape[1], name="init")
        if C0.shape[0] != k:
            raise ValueError(f"init must have k={k} rows; got shape {C0.shape}.")
        starts = [C0]

    best: FCMResult | None = None
    for C0 in starts:
        result = _fit_once(rows, C0, m, tol, max_iter)
        if best is None or result.objective < best.objective:
            best = result
    assert best is not None
    return best


def fcm_memberships(
    X: ArrayLike | RowSource, centers: ArrayLike, *, m: float = 2.0
) -> FloatArray:
    """The (N, K) FCM membership matrix of the rows of X to ``centers`` (Bezdek eq. 11.3a)."""
    rows = as_rows(X)
    C = check_centers(centers, n_features=rows.n_features)
    m = check_fuzzifier(m, owner="fcm_memberships")
    return memberships(rows, C, m)


def kmeans(
    X: ArrayLike,
    k: int,
    *,
    seed: int | np.random.Generator | None = None,
    n_init: int = 10,
) -> tuple[FloatArray, NDArray[np.intp]]:
    """Central k-means reference: scikit-learn's Lloyd k-means with k-means++ restarts.

    Returns:
        (centers of shape (K, D), labels of shape (N,)) of the restart with the lowest inertia.
    """
    owner = "kmeans"
    Xa = check_data(X)
    k = check_int(k, name="k", owner=owner, low=1)
    n_init = check_int(n_init, name="n_init", owner=owner, low=1)
    check_n_samples_for_k(Xa.shape[0], k)
    from sklearn.cluster import KMeans

    state = int(rng_from(seed).integers(np.iinfo(np.int32).max))
    model = KMeans(n_clusters=k, n_init=n_init, random_state=state).fit(Xa)
    centers = np.ascontiguousarray(model.cluster_centers_, dtype=np.float64)
    return centers, np.asarray(model.labels_, dtype=np.intp)
