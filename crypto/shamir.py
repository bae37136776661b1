"""Shamir secret sharing (Shamir 1979) of short byte strings, vectorised over GF(2^31 − 1).

A secret of L <= 64 bytes is cut into m = ceil(8L / 30) limbs of 30 bits (big-endian), each
below p = 2^31 − 1 (a Mersenne prime), and every limb is shared with its own polynomial
f_j(X) = s_j + a_j1 X + … + a_j,t−1 X^{t−1} whose coefficients are drawn uniformly from GF(p)
with :func:`os.urandom`. Any t points (x, f(x)) determine every limb; any t − 1 points are
uniformly distributed whatever the secret (perfect secrecy, limb by limb).

Products of two field elements stay below 2^62, so numpy ``uint64`` evaluates many shares,
or rebuilds many secrets, in a few array operations instead of per-secret Python loops:
:func:`split` evaluates one sharing at all x at once (Horner over the coefficient axis);
:func:`combine_many` rebuilds S secrets from t shares each with one Lagrange pass over
(S, t) arrays (inverses by Fermat, x^(p−2)).

A share serialises to fixed-length bytes (:func:`share_bytes`): x (4 bytes) then the m limbs
(4 bytes each), all big-endian; no pickle.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "MAX_SECRET_BYTES", "PRIME", "combine", "combine_many", "limbs", "share_bytes",
    "share_from_bytes", "split",
]

PRIME = 2**31 - 1
LIMB_BITS = 30
MAX_SECRET_BYTES = 64
MAX_X = PRIME - 1
UInt64Array = NDArray[np.uint64]
_P = np.uint64(PRIME)


def limbs(length: int) -> int:
    """Number of 30-bit limbs of a ``length``-byte secret."""
    return -(-8 * length // LIMB_BITS)


def _to_limbs(secret: bytes) -> UInt64Array:
    value, m = int.from_bytes(secret, "big"), limbs(len(secret))
    mask = (1 << LIMB_BITS) - 1
    return np.array(
        [(value >> (LIMB_BITS * (m - 1 - j))) & mask for j in range(m)], dtype=np.uint64
    )


def _from_limbs(values: UInt64Array, length: int) -> bytes:
    if np.any(values >= np.uint64(1 << LIMB_BITS)):
        raise ValueError("Shares are inconsistent: they do not determine a secret.")
    value = 0
    for limb in values.tolist():
        value = (value << LIMB_BITS) | int(limb)
    if value >= 1 << (8 * length):
        raise ValueError("Shares are inconsistent: they do not determine a secret.")
    return value.to_bytes(length, "big")


def _uniform(shape: tuple[int, ...]) -> UInt64Array:
    """Uniform elements of GF(p) from os.urandom (31 random bits, p itself redrawn)."""
    count = int(np.prod(shape))
    out = np.frombuffer(os.urandom(4 * count), dtype="<u4").astype(np.uint64) & _P
    bad = out == _P
    while bad.any():
        out[bad] = np.frombuffer(os.urandom(4 * int(bad.sum())), dtype="<u4") & _P
        bad = out == _P
    return out.reshape(shape)


def _check_xs(xs: UInt64Array) -> None:
    if xs.size and (int(xs.min()) < 1 or int(xs.max()) > MAX_X):
        raise ValueError(f"x coordinates must lie in 1..{MAX_X}.")


def split(secret: bytes, *, threshold: int, xs: Sequence[int]) -> UInt64Array:
    """The shares of ``secret`` at the distinct x coordinates ``xs``: an (len(xs), m) array.

    Any ``threshold`` rows (with their x) recover the secret; fewer reveal nothing.
    """
    if not isinstance(secret, bytes) or not 1 <= len(secret) <= MAX_SECRET_BYTES:
        raise ValueError(f"secret must be 1 to {MAX_SECRET_BYTES} bytes.")
    points = np.asarray(xs, dtype=np.uint64)
    _check_xs(points)
    if len(set(points.tolist())) != points.size:
        raise ValueError("Share x coordinates must be distinct.")
    if not 1 <= threshold <= max(1, points.size):
        raise ValueError(f"threshold must be 1 to the number of shares ({points.size}).")
    s = _to_limbs(secret)
    coefficients = _uniform((threshold - 1, s.size))  # a_1 .. a_{t-1}, per limb
    y = np.zeros((points.size, s.size), dtype=np.uint64)
    x = points[:, None]
    for a in coefficients[::-1]:  # Horner: y = (y·x + a) mod p, highest degree first
        y = (y * x + a[None, :]) % _P
    return (y * x + s[None, :]) % _P


def _power(base: UInt64Array, exponent: int) -> UInt64Array:
    result = np.ones_like(base)
    b = base % _P
    while exponent:
        if exponent & 1:
            result = result * b % _P
        b = b * b % _P
        exponent >>= 1
    return result


def combine_many(xs: UInt64Array, ys: UInt64Array, length: int) -> list[bytes]:
    """S secrets of ``length`` bytes from t shares each: ``xs`` (S, t), ``ys`` (S, t, m).

    Lagrange at zero: s = Σ_j y_j Π_{i≠j} x_i / (x_i − x_j) over GF(p). Duplicate x in a row
    is a ValueError; shares of different sharings, or fewer than the threshold, almost surely
    give a limb or value out of range, also a ValueError.
    """
    xs = np.asarray(xs, dtype=np.uint64)
    ys = np.asarray(ys, dtype=np.uint64)
    if xs.ndim != 2 or ys.shape != (*xs.shape, limbs(length)):
        raise ValueError("combine_many needs xs of shape (S, t) and ys of shape (S, t, m).")
    _check_xs(xs)
    if np.any(ys >= _P):
        raise ValueError("A share's value is out of range.")
    S, t = xs.shape
    if S == 0:
        return []
    ordered = np.sort(xs, axis=1)
    if t > 1 and np.any(ordered[:, 1:] == ordered[:, :-1]):
        raise ValueError("Shares must have distinct x coordinates.")
    weights = np.empty((S, t), dtype=np.uint64)
    for j in range(t):
        num = np.ones(S, dtype=np.uint64)
        den = np.ones(S, dtype=np.uint64)
        for i in range(t):
            if i != j:
                num = num * xs[:, i] % _P
                den = den * ((xs[:, i] + _P - xs[:, j]) % _P) % _P
        weights[:, j] = num * _power(den, PRIME - 2) % _P
    secret_limbs = np.zeros((S, ys.shape[2]), dtype=np.uint64)
    for j in range(t):
        secret_limbs = (secret_limbs + weights[:, j, None] * ys[:, j, :]) % _P
    return [_from_limbs(row, length) for row in secret_limbs]


def combine(xs: Sequence[int], ys: UInt64Array, length: int) -> bytes:
    """One secret from shares at ``xs`` (distinct) with values ``ys`` (len(xs), m)."""
    return combine_many(
        np.asarray([list(xs)], dtype=np.uint64), np.asarray(ys, dtype=np.uint64)[None], length
    )[0]


def share_bytes(x: int, values: UInt64Array) -> bytes:
    """Fixed-length encoding of one share: x then its limbs, 4 bytes each, big-endian."""
    return np.concatenate([[x], values]).astype(">u4").tobytes()


def share_from_bytes(data: bytes, length: int) -> tuple[int, UInt64Array]:
    """Inverse of :func:`share_bytes` for a ``length``-byte secret; malformed is ValueError."""
    m = limbs(length)
    if not isinstance(data, bytes) or len(data) != 4 * (m + 1):
        raise ValueError(f"A share of a {length}-byte secret is {4 * (m + 1)} bytes.")
    words = struct.unpack(f">{m + 1}I", data)
    if not 1 <= words[0] <= MAX_X or max(words[1:]) >= PRIME:
        raise ValueError("A share's x or value is out of range.")
    return words[0], np.array(words[1:], dtype=np.uint64)
