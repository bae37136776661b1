"""Federated z-score standardisation from summed moments.

Each participant l sends, per column, S1_l = Σ_x (x − s) and S2_l = Σ_x (x − s)² about a
public shift s (:func:`participant_moments`, :class:`MomentSums`); the sums add up
(:func:`add_moments`) and can be securely aggregated. With N = Σ_l N_l from the counting
service (never in the sums), :func:`combine_moments` gives mean = s + S1/N,
var = S2/N − (S1/N)² (population variance, ddof = 0) and scale = √var, or 1 for a column whose
var is within its rounding error (≤ 3·N·ε·S2/N: a constant column). The relative error of var
is about 3·N·ε·(1 + (mean − s)²/var), so ``coordinator.standardise`` runs a second round with
s = the first mean. :func:`apply` computes (x − mean)/scale.

Design notes: ``docs/standardisation.md`` (§ z-scores from summed moments: numerics).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from fedclust.core.errors import ProtocolError
from fedclust.core.validation import FloatArray, check_data, check_int

from .rows import RowSource, as_source, fold

__all__ = [
    "MomentSums", "add_moments", "apply", "combine_moments", "moment_fields", "participant_moments",
]

_EPS = float(np.finfo(np.float64).eps)


@dataclass(frozen=True)
class MomentSums:
    """Per-column Σ(x - shift) and Σ(x - shift)² of some rows (their count travels elsewhere).

    ``shift`` is the public reference point subtracted before summing (zeros: no shift).
    """

    sum: FloatArray
    sum_sq: FloatArray
    shift: FloatArray


def _vector(v: ArrayLike, *, name: str, n_features: int) -> FloatArray:
    try:
        arr = np.asarray(v, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be numeric; got {type(v).__name__}.") from exc
    if arr.shape != (n_features,):
        raise ValueError(
            f"{name} must have shape ({n_features},) to match the data's columns; "
            f"got an array of shape {arr.shape}."
        )
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} contains NaN or infinity.")
    return arr


def moments_block(xb: FloatArray, shift: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Partial Σ(x - s) and Σ(x - s)² per column of one block."""
    Z = xb - shift
    ones = np.ones(Z.shape[0])
    s1: FloatArray = ones @ Z
    Z *= Z
    s2: FloatArray = ones @ Z
    return s1, s2


def participant_moments(
    X: ArrayLike | RowSource, *, shift: ArrayLike | None = None
) -> MomentSums:
    """Σ(x - s) and Σ(x - s)² per column of a participant's rows X; s = ``shift`` or 0.

    Folded over fixed blocks (``protocol.maths.rows``): extra memory O(block·D), the same bits for
    any chunking of a streamed source.
    """
    rows = as_source(X)
    D = rows.n_features
    s = np.zeros(D) if shift is None else _vector(shift, name="shift", n_features=D)
    s1, s2 = fold(rows, lambda xb, _: moments_block(xb, s))
    return MomentSums(sum=s1, sum_sq=s2, shift=s.copy())


def moment_fields(rows: RowSource, centers: FloatArray) -> dict[str, FloatArray]:
    """The ``moment_sums`` statistic (``protocol.algorithms.statistics``): S1 = Σ(x − s) and
    S2 = Σ(x − s)² per column about its one public point s = ``centers[0]`` (centers of
    shape (1, D))."""
    moments = participant_moments(rows, shift=centers[0])
    return {"sum": moments.sum, "sum_sq": moments.sum_sq}


def add_moments(sums: Sequence[MomentSums]) -> MomentSums:
    """The total of several participants' sums (what a secure aggregation would deliver).

    Raises:
        ProtocolError: no contributions, or contributions of different width or shift,
            non-finite sums.
    """
    if len(sums) == 0:
        raise ProtocolError("no moment sums to combine.")
    first = sums[0]
    D = np.shape(first.sum)[0] if np.ndim(first.sum) == 1 else -1
    for i, m in enumerate(sums):
        shapes = {np.shape(m.sum), np.shape(m.sum_sq), np.shape(m.shift)}
        if D < 1 or shapes != {(D,)}:
            raise ProtocolError(f"moment sums {i} do not all have shape ({D},).")
        if not (np.isfinite(m.sum).all() and np.isfinite(m.sum_sq).all()):
            raise ProtocolError(f"moment sums {i} contain NaN or infinity.")
        if not np.array_equal(m.shift, first.shift):
            raise ProtocolError(f"moment sums {i} use a different shift from the others.")
    return MomentSums(
        sum=np.sum([m.sum for m in sums], axis=0),
        sum_sq=np.sum([m.sum_sq for m in sums], axis=0),
        shift=np.asarray(first.shift, dtype=np.float64).copy(),
    )


def combine_moments(
    sums: Sequence[MomentSums], total_count: int
) -> tuple[FloatArray, FloatArray]:
    """The federation's per-column mean and scale (population std; 1 for constant columns).

    Accepts the participants' sums or a single already-aggregated total, and N = Σ_l N_l
    from the counting service; see the module docstring for the formulas and their
    rounding error.

    Raises:
        ValueError: ``total_count`` is not a positive int.
        ProtocolError: inconsistent contributions (see :func:`add_moments`), or sums that no
            set of ``total_count`` rows can have: Cauchy–Schwarz gives S1² <= N·S2 per
            column, so a violation beyond rounding means the count and the sums disagree.
    """
    N = check_int(total_count, name="total_count", owner="combine_moments", low=1)
    total = add_moments(sums)
    if (total.sum * total.sum > N * total.sum_sq * (1.0 + 1e-9) + _EPS).any():
        raise ProtocolError(
            "the moment sums cannot come from total_count rows (S1² > N·S2): the count and "
            "the sums do not describe the same rows."
        )
    m1 = total.sum / N
    m2 = total.sum_sq / N
    var = np.maximum(m2 - m1 * m1, 0.0)
    constant = var <= 3.0 * N * _EPS * m2
    scale = np.where(constant, 1.0, np.sqrt(var))
    return total.shift + m1, scale


def apply(X: ArrayLike, mean: ArrayLike, scale: ArrayLike) -> FloatArray:
    """z-scores (x - mean) / scale of the rows X, as a new array."""
    Xa = check_data(X)
    D = Xa.shape[1]
    mu = _vector(mean, name="mean", n_features=D)
    sd = _vector(scale, name="scale", n_features=D)
    if not (sd > 0).all():
        raise ValueError("scale must be positive in every column.")
    Z = Xa - mu
    Z /= sd
    return Z
