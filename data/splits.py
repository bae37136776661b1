"""Horizontal splits of one dataset into participants, for simulations and experiments.

Every function returns ``list[(X_l, y_l)]``, one pair per participant (``y_l`` None when no
labels were given); within a part the rows keep their original relative order. Randomness
comes from a numpy Generator (``core.validation.rng_from``), so a seed reproduces a split.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fedclust.core.validation import FloatArray, check_data, check_float, check_int, rng_from

__all__ = ["Part", "split_by_groups", "split_dirichlet", "split_iid", "split_uniform"]

Part = tuple[FloatArray, NDArray[Any] | None]


def _inputs(
    X: ArrayLike, y: ArrayLike | None, owner: str
) -> tuple[FloatArray, NDArray[Any] | None]:
    Xa = check_data(X, name="X")
    if y is None:
        return Xa, None
    ya = np.asarray(y)
    if ya.ndim != 1 or ya.shape[0] != Xa.shape[0]:
        raise ValueError(
            f"y of {owner} must be 1-D with one entry per row of X ({Xa.shape[0]}); "
            f"got an array of shape {ya.shape}."
        )
    return Xa, ya


def _check_parts(n_parts: Any, n_samples: int, owner: str) -> int:
    L = check_int(n_parts, name="n_parts", owner=owner, low=1)
    if n_samples < L:
        raise ValueError(f"X has n_samples={n_samples}, which should be >= n_parts={L}.")
    return L


def _take(
    X: FloatArray, y: NDArray[Any] | None, assignment: NDArray[np.intp], L: int
) -> list[Part]:
    out: list[Part] = []
    for part in range(L):
        idx = np.flatnonzero(assignment == part)
        out.append((X[idx], None if y is None else y[idx]))
    return out


def split_iid(
    X: ArrayLike, y: ArrayLike | None, n_parts: int, *, seed: int | np.random.Generator | None
) -> list[Part]:
    """Random i.i.d. split: every row goes to a participant drawn uniformly at random.

    So that no part is empty, the first ``n_parts`` rows of a random permutation go one to
    each participant; the other rows are assigned independently, so the sizes are
    ``1 + Multinomial(N - L, 1/L)`` (they vary; see :func:`split_uniform` for equal sizes).
    """
    Xa, ya = _inputs(X, y, "split_iid")
    N = Xa.shape[0]
    L = _check_parts(n_parts, N, "split_iid")
    rng = rng_from(seed)
    order = rng.permutation(N)
    assignment = np.empty(N, dtype=np.intp)
    assignment[order[:L]] = np.arange(L)
    assignment[order[L:]] = rng.integers(0, L, size=N - L)
    return _take(Xa, ya, assignment, L)


def split_uniform(
    X: ArrayLike, y: ArrayLike | None, n_parts: int, *, seed: int | np.random.Generator | None
) -> list[Part]:
    """Random split into parts of equal size (sizes differ by at most one).

    A random permutation cut into ``n_parts`` consecutive blocks; the first ``N mod L`` parts
    get one extra row. This is the split of the G2 experiments (2, 5 or 10 participants).
    """
    Xa, ya = _inputs(X, y, "split_uniform")
    N = Xa.shape[0]
    L = _check_parts(n_parts, N, "split_uniform")
    order = rng_from(seed).permutation(N)
    assignment = np.empty(N, dtype=np.intp)
    for part, block in enumerate(np.array_split(order, L)):
        assignment[block] = part
    return _take(Xa, ya, assignment, L)


def split_dirichlet(
    X: ArrayLike,
    y: ArrayLike,
    n_parts: int,
    *,
    alpha: float,
    seed: int | np.random.Generator | None,
) -> list[Part]:
    """Label-skewed split: for every class c, shares p_c ~ Dirichlet(alpha·1_L) of its rows.

    The rows of class c are shuffled and cut at the cumulative shares (rounded down), the
    usual non-i.i.d. benchmark split (small alpha → each participant holds few classes;
    large alpha → close to i.i.d.). Every participant gets at least one row: a part left
    empty receives one random row of the currently largest part, so the split exists
    whenever N >= n_parts.

    Raises:
        ValueError: y is missing, alpha <= 0, or N < n_parts.
    """
    if y is None:
        raise ValueError("split_dirichlet needs labels y to skew the label distribution.")
    Xa, ya = _inputs(X, y, "split_dirichlet")
    assert ya is not None
    N = Xa.shape[0]
    L = _check_parts(n_parts, N, "split_dirichlet")
    a = check_float(alpha, name="alpha", owner="split_dirichlet", low=0.0, low_open=True)
    rng = rng_from(seed)
    assignment = np.empty(N, dtype=np.intp)
    for c in np.unique(ya):
        rows = rng.permutation(np.flatnonzero(ya == c))
        shares = rng.dirichlet(np.full(L, a))
        cuts = np.floor(np.cumsum(shares)[:-1] * rows.size).astype(np.intp)
        for part, block in enumerate(np.split(rows, cuts)):
            assignment[block] = part
    sizes = np.bincount(assignment, minlength=L)
    for empty in np.flatnonzero(sizes == 0):
        donor = int(np.argmax(sizes))
        row = rng.choice(np.flatnonzero(assignment == donor))
        assignment[row] = empty
        sizes[donor] -= 1
        sizes[empty] += 1
    return _take(Xa, ya, assignment, L)


def split_by_groups(X: ArrayLike, y: ArrayLike | None, groups: ArrayLike) -> list[Part]:
    """One participant per distinct value of ``groups``, in sorted order of the values.

    Part ``i`` holds the rows whose group is ``np.unique(groups)[i]`` (e.g. the bank data
    split by ``job``: 11 participants from "admin." to "unemployed").
    """
    Xa, ya = _inputs(X, y, "split_by_groups")
    g = np.asarray(groups)
    if g.ndim != 1 or g.shape[0] != Xa.shape[0]:
        raise ValueError(
            f"groups must be 1-D with one entry per row of X ({Xa.shape[0]}); "
            f"got an array of shape {g.shape}."
        )
    _, assignment = np.unique(g, return_inverse=True)
    L = int(assignment.max()) + 1
    return _take(Xa, ya, assignment.astype(np.intp), L)
