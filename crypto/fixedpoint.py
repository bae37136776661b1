"""Fixed-point encoding of sum-type statistics into the ring Z_2^(64·w) of w 64-bit words.

One :class:`Statistic` per summed quantity per job. A value |v| <= bound encodes as the
two's-complement image of ``round_half_even(v · 2^scale_bits)`` mod 2^(64·w) (w = 1: a uint64
per value; w > 1: w uint64 limbs on a last axis, least significant first); encodings add in
the ring (:func:`add`, :func:`add_into`: carries between limbs) and decode as the signed
representative times 2^-scale_bits. The encoding is exact up to the 2^-scale_bits grid, so a
decoded sum is within n_parties · 2^-(scale_bits+1) of the true sum, then correctly rounded.

Contracts: :func:`check_aggregate` refuses a round when n_parties · bound · 2^scale_bits >=
2^(64·w − 2); a value over its bound raises :class:`BoundError` (a ``ValueError``) naming the
statistic and its bound only; values are never clipped.

Design notes: ``docs/secure-sums.md`` (§ Fixed-point encoding).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fedclust.core.errors import ProtocolError
from fedclust.core.validation import check_float, check_int

__all__ = [
    "BoundError", "Statistic", "add", "add_into", "check_aggregate", "decode", "encode",
    "fixed_integers", "subtract_into",
]

WORD_BITS = 64
#: Widest ring: 16 words (1024 bits) hold n · bound · 2^scale_bits up to 2^1022.
MAX_WORDS = 16
#: The signed band of a one-word sum (64 - 2 bits), as before wider rings existed.
SIGNED_LIMIT_BITS = WORD_BITS - 2
MAX_SCALE_BITS = 60
UInt64Array = NDArray[np.uint64]


def limit_bits(words: int) -> int:
    """The signed band of a sum of ``words`` words: |n · bound · 2^f| < 2^(64·words − 2)."""
    return WORD_BITS * words - 2


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
    """A summed quantity's declaration: its name, 2^scale_bits resolution, bound |v| <= bound
    and ring width in 64-bit ``words``.

    The name appears in every error and binds the masks (HKDF info) to the statistic.
    """

    name: str
    scale_bits: int
    bound: float
    words: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError("Statistic name must be a non-empty string.")
        check_int(
            self.scale_bits, name="scale_bits", owner="Statistic", low=0, high=MAX_SCALE_BITS
        )
        check_float(self.bound, name="bound", owner="Statistic", low=0.0, low_open=True)
        check_int(self.words, name="words", owner="Statistic", low=1, high=MAX_WORDS)
        limit = limit_bits(self.words)
        if Fraction(self.bound) * 2**self.scale_bits >= 2**limit:
            raise ValueError(
                f"Statistic {self.name!r}: bound · 2^scale_bits must be < 2^{limit} in "
                f"{self.words} word(s); lower the bound or scale_bits={self.scale_bits}, or "
                "use more words."
            )

    def error_bound(self, n_parties: int) -> float:
        """Largest decoding error per coordinate of a sum over ``n_parties`` encodings."""
        return float(n_parties) * 2.0 ** -(self.scale_bits + 1)


def _checked(name: str, values: ArrayLike, bound: float) -> NDArray[np.float64]:
    """``values`` as float64 (any shape), finite and within ``bound`` (else a BoundError)."""
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
    return arr


def _mantissa_shift(
    flat: NDArray[np.float64], scale_bits: int
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """round(v · 2^scale_bits) = m · 2^s exactly, with int64 |m| < 2^53 + 1 and s >= 0.

    Below 2^53 the float64 product is exact and ``rint`` rounds half to even (s = 0); above,
    v · 2^scale_bits is already an integer, the 53-bit mantissa times a power of two.
    """
    mantissa, exponent = np.frexp(flat)
    small = exponent + scale_bits <= 53
    m = np.where(
        small, np.rint(np.ldexp(np.where(small, flat, 0.0), scale_bits)), np.ldexp(mantissa, 53)
    ).astype(np.int64)
    shift = np.where(small, 0, exponent + scale_bits - 53).astype(np.int64)
    return m, shift


def fixed_integers(name: str, values: ArrayLike, *, bound: float, scale_bits: int) -> list[int]:
    """round(v · 2^scale_bits) as exact Python integers, flattened (C order), for finite
    values with |v| <= bound; a value over its bound is a :class:`BoundError` naming the
    statistic ``name`` (never clipped). Shared by every protection scheme's encoding."""
    m, shift = _mantissa_shift(_checked(name, values, bound).ravel(), scale_bits)
    values_m: list[int] = m.tolist()
    if not shift.any():
        return values_m
    return [v << s for v, s in zip(values_m, shift.tolist(), strict=True)]


def encode(statistic: Statistic, values: ArrayLike) -> UInt64Array:
    """Encode float values into Z_2^(64·words); |v| > bound is an error, never a clip.

    One word: an array of the values' shape; w words: that shape plus a last axis of w limbs.
    """
    arr = _checked(statistic.name, values, statistic.bound)
    w, scale = statistic.words, 2.0**statistic.scale_bits
    largest = float(np.abs(arr).max()) if arr.size else 0.0
    if w == 1 or largest * scale < 2.0**62:  # exact product, rint rounds half to even
        scaled = np.rint(arr * scale).astype(np.int64)
        if w == 1:
            return scaled.view(np.uint64).reshape(arr.shape)
        out = np.empty((scaled.size, w), dtype=np.uint64)  # sign-extended into the limbs
        out[:, 0] = scaled.ravel().view(np.uint64)
        out[:, 1:] = np.where(scaled.ravel() < 0, np.uint64(2**WORD_BITS - 1), np.uint64(0))[
            :, None
        ]
        return out.reshape(*arr.shape, w)
    m, shift = _mantissa_shift(arr.ravel(), statistic.scale_bits)
    return _place(m, shift, w).reshape(*arr.shape, w)


def _place(m: NDArray[np.int64], shift: NDArray[np.int64], words: int) -> UInt64Array:
    """(n, words) two's-complement limbs of m · 2^shift (which fit: |m · 2^shift| < 2^(64w-2))."""
    magnitude = np.abs(m).view(np.uint64)
    word, bit = np.divmod(shift, WORD_BITS)
    bits = bit.astype(np.uint64)
    low = magnitude << bits
    # The bits shifted past the word: (a >> 1) >> (63 - r) is a >> (64 - r), defined for r = 0.
    high = (magnitude >> np.uint64(1)) >> (np.uint64(WORD_BITS - 1) - bits)
    negative = m < 0
    flip = np.where(negative, np.uint64(2**WORD_BITS - 1), np.uint64(0))
    carry = negative  # −x = complement of x, plus one carried upwards
    out = np.empty((m.size, words), dtype=np.uint64)
    zero = np.uint64(0)
    for j in range(words):
        limb = (np.where(word == j, low, zero) | np.where(word == j - 1, high, zero)) ^ flip
        out[:, j] = limb + carry
        carry = carry & (limb == np.uint64(2**WORD_BITS - 1))
    return out


def _negated(limbs: UInt64Array) -> UInt64Array:
    """−x in Z_2^(64w) of (n, w) limbs: the complement plus one, carried."""
    out = np.zeros_like(limbs)
    subtract_into(out, limbs, limbs.shape[-1])
    return out


def add_into(total: UInt64Array, term: UInt64Array, words: int) -> None:
    """total += term in Z_2^(64·words), in place; both hold whole values of ``words`` limbs
    laid end to end (any shape whose size is a multiple of ``words``)."""
    if words == 1:
        total += term
        return
    _require_contiguous(total)
    acc = total.reshape(-1, words)
    other = term.reshape(-1, words)
    carry: NDArray[np.bool_] | None = None
    for j in range(words):
        b = other[:, j]
        s = acc[:, j] + b
        overflow = s < b
        if carry is not None:
            carried = s + carry
            overflow |= carried < s
            s = carried
        acc[:, j] = s
        carry = overflow


def subtract_into(total: UInt64Array, term: UInt64Array, words: int) -> None:
    """total −= term in Z_2^(64·words), in place (the borrowing twin of :func:`add_into`)."""
    if words == 1:
        total -= term
        return
    _require_contiguous(total)
    acc = total.reshape(-1, words)
    other = term.reshape(-1, words)
    borrow: NDArray[np.bool_] | None = None
    for j in range(words):
        a = acc[:, j]
        b = other[:, j]
        d = a - b
        under = a < b
        if borrow is not None:
            borrowed = d - borrow
            under |= d < borrow
            d = borrowed
        acc[:, j] = d
        borrow = under


def _require_contiguous(total: UInt64Array) -> None:
    if not total.flags.c_contiguous:
        raise ValueError("total must be a C-contiguous array (it is changed in place).")


def check_aggregate(statistic: Statistic, n_parties: int, n_values: int) -> float:
    """Refuse a sum of ``n_parties`` vectors of ``n_values`` that could leave the signed band.

    The sum is per coordinate, so ``n_values`` does not enter the condition
    n_parties · bound · 2^scale_bits < 2^(64·words − 2); it is validated as the vector
    length. Returns the per-coordinate decoding error bound n_parties · 2^-(scale_bits+1).
    """
    n_parties = check_int(n_parties, name="n_parties", owner="check_aggregate", low=1)
    check_int(n_values, name="n_values", owner="check_aggregate", low=1)
    limit = limit_bits(statistic.words)
    if n_parties * Fraction(statistic.bound) * 2**statistic.scale_bits >= 2**limit:
        raise ValueError(
            f"An aggregate of statistic {statistic.name!r} over {n_parties} parties could "
            f"overflow: n_parties · bound · 2^scale_bits must be < 2^{limit}; "
            "lower the bound or scale_bits, or use more words."
        )
    return statistic.error_bound(n_parties)


def add(encoded: Sequence[UInt64Array], words: int = 1) -> UInt64Array:
    """The sum in Z_2^(64·words) of equally shaped encodings (exact wrap-around)."""
    if not encoded:
        raise ValueError("add needs at least one encoded vector.")
    total = np.array(encoded[0], dtype=np.uint64, copy=True)
    for vec in encoded[1:]:
        if vec.shape != total.shape or vec.dtype != np.uint64:
            raise ValueError(
                f"Encoded vectors must be uint64 arrays of shape {total.shape}; "
                f"got {vec.dtype} of shape {vec.shape}."
            )
        add_into(total, vec, words)
    return total


def decode(statistic: Statistic, total: UInt64Array, n_parties: int) -> NDArray[np.float64]:
    """Decode a sum of ``n_parties`` encodings (two's complement, times 2^-scale_bits),
    correctly rounded to float64; a w-word total has a last axis of w limbs.

    A representative outside ±n_parties·(bound·2^scale_bits + 1/2) cannot be a sum of valid
    encodings: masks were not all removed or ``n_parties`` is wrong (ProtocolError).
    """
    arr = np.asarray(total)
    if arr.dtype != np.uint64:
        raise ValueError(f"total must be a uint64 array; got dtype {arr.dtype}.")
    w = statistic.words
    if w > 1 and (arr.ndim == 0 or arr.shape[-1] != w):
        raise ValueError(f"a {w}-word total must have a last axis of {w} limbs.")
    check_aggregate(statistic, n_parties, max(arr.size // w, 1))
    limit = int(n_parties * (Fraction(statistic.bound) * 2**statistic.scale_bits + Fraction(1, 2)))
    limbs = arr.reshape(-1, w)
    low = limbs[:, 0].view(np.int64)
    extension = np.where(low < 0, np.uint64(2**WORD_BITS - 1), np.uint64(0))
    if w == 1 or bool((limbs[:, 1:] == extension[:, None]).all()):  # fits one signed word
        if low.size and (int(low.max()) > limit or int(low.min()) < -limit):
            raise _outside_band(statistic)
        shape = arr.shape if w == 1 else arr.shape[:-1]
        return (low.astype(np.float64) * 2.0**-statistic.scale_bits).reshape(shape)
    negative = limbs[:, -1] >> np.uint64(WORD_BITS - 1) == 1
    magnitude = limbs.copy()
    magnitude[negative] = _negated(limbs[negative])
    if _exceeds(magnitude, limit).any():
        raise _outside_band(statistic)
    value = _to_float(magnitude, statistic.scale_bits)
    return np.where(negative, -value, value).reshape(arr.shape[:-1])


def _outside_band(statistic: Statistic) -> ProtocolError:
    return ProtocolError(
        f"The aggregate of statistic {statistic.name!r} lies outside ±n_parties·bound: "
        "masks were not all removed or n_parties is wrong."
    )


def _exceeds(magnitude: UInt64Array, limit: int) -> NDArray[np.bool_]:
    """Per row of (n, w) unsigned limbs: whether the number is greater than ``limit``."""
    greater = np.zeros(len(magnitude), dtype=bool)
    equal = np.ones(len(magnitude), dtype=bool)
    for j in reversed(range(magnitude.shape[1])):
        word = np.uint64((limit >> (WORD_BITS * j)) & (2**WORD_BITS - 1))
        greater |= equal & (magnitude[:, j] > word)
        equal &= magnitude[:, j] == word
    return greater


def _bit_length(x: UInt64Array) -> NDArray[np.int64]:
    """Bits of each uint64 (0 for 0): frexp's exponent of each exact 32-bit half."""
    high = (x >> np.uint64(32)).astype(np.float64)
    low = (x & np.uint64(0xFFFFFFFF)).astype(np.float64)
    return np.where(high > 0, 32 + np.frexp(high)[1], np.frexp(low)[1]).astype(np.int64)


def _to_float(magnitude: UInt64Array, scale_bits: int) -> NDArray[np.float64]:
    """(n, w) unsigned limbs times 2^-scale_bits, correctly rounded to float64.

    The top 64 bits from the highest non-zero limb, with every lower bit OR-ed into the last
    one as a sticky bit (64 > 53 + 2, so the rounding is unchanged), convert with one
    round-to-nearest-even; the power-of-two scaling is exact.
    """
    n, w = magnitude.shape
    zero = np.uint64(0)
    high = np.zeros(n, dtype=np.uint64)  # the highest non-zero limb (index top), the limb
    below = np.zeros(n, dtype=np.uint64)  # under it, and whether any lower one is non-zero
    deeper = np.zeros(n, dtype=bool)
    top = np.zeros(n, dtype=np.int64)
    previous = np.zeros(n, dtype=np.uint64)
    lower = np.zeros(n, dtype=bool)
    for j in range(w):
        limb = magnitude[:, j]
        found = limb != zero
        high = np.where(found, limb, high)
        below = np.where(found, previous, below)
        deeper = np.where(found, lower, deeper)
        top = np.where(found, j, top)
        lower |= previous != zero
        previous = limb
    shift = (WORD_BITS - _bit_length(high)) % WORD_BITS  # 0 for a zero row too
    bits = shift.astype(np.uint64)
    head = (high << bits) | ((below >> np.uint64(1)) >> (np.uint64(WORD_BITS - 1) - bits))
    sticky = ((below << bits) != zero) | deeper
    head |= sticky.astype(np.uint64)
    scaled: NDArray[np.float64] = np.ldexp(
        head.astype(np.float64), WORD_BITS * top - shift - scale_bits
    )
    return scaled
