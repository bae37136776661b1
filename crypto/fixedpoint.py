"""Fixed-point encoding of sum-type statistics into Z_2^64 (numpy uint64, wrap-around).

Specification (one :class:`Statistic` per summed quantity per job):

- modulus 2^64; a value v with |v| <= bound encodes as the two's-complement image of
  ``round_half_even(v · 2^scale_bits)`` (an int64 viewed as uint64);
- the sum of encodings is taken in Z_2^64 (numpy uint64 addition wraps exactly); it decodes
  as the signed (int64) representative times 2^-scale_bits;
- signed range used: |sum| < 2^62 — :func:`check_aggregate` refuses a round whenever
  n_parties · bound · 2^scale_bits >= 2^62, so the true sum always lies in the band and the
  decode is unambiguous (the band up to 2^63 is left as overflow margin);
- a value above its bound is a :class:`BoundError` (a ``ValueError``) naming the statistic
  and its bound, never how many values exceed it nor by how much (its attributes keep both
  for the encoding party's own log) — values are never clipped.

Error bound (per coordinate). Each party rounds once, by at most 2^-(scale_bits+1), and the
integer sum is exact, so ``|decode(Σ encode(v_l)) - Σ v_l| <= n_parties · 2^-(scale_bits+1)``,
plus float64 representation of the decoded number (exact while |integer sum| <= 2^53, else
within a relative 2^-53). Encoding each party's *local aggregate* (not each point) keeps
n_parties small.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fedclust.protocol._validation import check_float, check_int
from fedclust.protocol.errors import ProtocolError

__all__ = ["BoundError", "Statistic", "add", "check_aggregate", "decode", "encode"]

SIGNED_LIMIT_BITS = 62
MAX_SCALE_BITS = 60


class BoundError(ValueError):
    """Values of a statistic exceed its declared bound.

    The message names the statistic and the (public) bound only. ``over`` (how many values
    exceed it) and ``largest`` (the largest magnitude) describe the data: they are for the
    encoding party's own log and must never be sent.
    """

    def __init__(self, statistic: str, bound: float, *, over: int, largest: float) -> None:
        super().__init__(
            f"a value of statistic {statistic!r} would exceed its declared bound {bound!r}; "
            "values are never clipped (declare a larger bound)."
        )
        self.statistic = statistic
        self.bound = bound
        self.over = over
        self.largest = largest


@dataclass(frozen=True)
class Statistic:
    """A summed quantity's declaration: its name, 2^scale_bits resolution and bound |v| <= bound.

    The name appears in every error and binds the masks (HKDF info) to the statistic.
    """

    name: str
    scale_bits: int
    bound: float

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError("Statistic name must be a non-empty string.")
        check_int(
            self.scale_bits, name="scale_bits", owner="Statistic", low=0, high=MAX_SCALE_BITS
        )
        check_float(self.bound, name="bound", owner="Statistic", low=0.0, low_open=True)
        if Fraction(self.bound) * 2**self.scale_bits >= 2**SIGNED_LIMIT_BITS:
            raise ValueError(
                f"Statistic {self.name!r}: bound · 2^scale_bits must be < 2^{SIGNED_LIMIT_BITS}; "
                f"lower the bound or scale_bits={self.scale_bits}."
            )

    def error_bound(self, n_parties: int) -> float:
        """Largest decoding error per coordinate of a sum over ``n_parties`` encodings."""
        return float(n_parties) * 2.0 ** -(self.scale_bits + 1)


def to_fixed(
    name: str, values: ArrayLike, *, bound: float, scale_bits: int
) -> NDArray[np.int64]:
    """round(v · 2^scale_bits) as int64, for finite values with |v| <= bound (any shape).

    Shared by every protection scheme's encoding. A value over its bound is a
    :class:`BoundError` naming the statistic ``name`` (never clipped); neither the values
    nor their number appear in its message.
    """
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"Values of statistic {name!r} must be numeric; got {type(values).__name__}."
        ) from exc
    if not np.isfinite(arr).all():
        raise ValueError(f"Values of statistic {name!r} contain NaN or infinity.")
    magnitudes = np.abs(arr)
    over = int(np.count_nonzero(magnitudes > bound))
    if over:
        raise BoundError(name, bound, over=over, largest=float(magnitudes.max()))
    return np.rint(arr * 2.0**scale_bits).astype(np.int64)


def encode(statistic: Statistic, values: ArrayLike) -> NDArray[np.uint64]:
    """Encode float values (any shape) into Z_2^64; |v| > bound is an error, never a clip."""
    scaled = to_fixed(
        statistic.name, values, bound=statistic.bound, scale_bits=statistic.scale_bits
    )
    return scaled.view(np.uint64)


def check_aggregate(statistic: Statistic, n_parties: int, n_values: int) -> float:
    """Refuse a sum of ``n_parties`` vectors of ``n_values`` that could leave the signed band.

    The sum is per coordinate, so ``n_values`` does not enter the condition
    n_parties · bound · 2^scale_bits < 2^62; it is validated as the vector length. Returns
    the per-coordinate decoding error bound n_parties · 2^-(scale_bits+1).
    """
    n_parties = check_int(n_parties, name="n_parties", owner="check_aggregate", low=1)
    check_int(n_values, name="n_values", owner="check_aggregate", low=1)
    if n_parties * Fraction(statistic.bound) * 2**statistic.scale_bits >= 2**SIGNED_LIMIT_BITS:
        raise ValueError(
            f"An aggregate of statistic {statistic.name!r} over {n_parties} parties could "
            f"overflow: n_parties · bound · 2^scale_bits must be < 2^{SIGNED_LIMIT_BITS}; "
            "lower the bound or scale_bits."
        )
    return statistic.error_bound(n_parties)


def add(encoded: Sequence[NDArray[np.uint64]]) -> NDArray[np.uint64]:
    """The sum in Z_2^64 of equally shaped encodings (exact wrap-around)."""
    if not encoded:
        raise ValueError("add needs at least one encoded vector.")
    total = np.array(encoded[0], dtype=np.uint64, copy=True)
    for vec in encoded[1:]:
        if vec.shape != total.shape or vec.dtype != np.uint64:
            raise ValueError(
                f"Encoded vectors must be uint64 arrays of shape {total.shape}; "
                f"got {vec.dtype} of shape {vec.shape}."
            )
        total += vec
    return total


def decode(
    statistic: Statistic, total: NDArray[np.uint64], n_parties: int
) -> NDArray[np.float64]:
    """Decode a sum of ``n_parties`` encodings (two's complement, times 2^-scale_bits).

    A representative outside ±n_parties·(bound·2^scale_bits + 1/2) cannot be a sum of valid
    encodings: masks were not all removed or ``n_parties`` is wrong (ProtocolError).
    """
    arr = np.asarray(total)
    if arr.dtype != np.uint64:
        raise ValueError(f"total must be a uint64 array; got dtype {arr.dtype}.")
    check_aggregate(statistic, n_parties, max(arr.size, 1))
    signed = arr.view(np.int64)
    limit = int(n_parties * (Fraction(statistic.bound) * 2**statistic.scale_bits + Fraction(1, 2)))
    if signed.size and (int(signed.max()) > limit or int(signed.min()) < -limit):
        raise ProtocolError(
            f"The aggregate of statistic {statistic.name!r} lies outside ±n_parties·bound: "
            "masks were not all removed or n_parties is wrong."
        )
    return signed.astype(np.float64) * 2.0**-statistic.scale_bits
