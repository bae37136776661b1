"""Shamir sharing over GF(2^31 − 1) in 30-bit limbs: every t-subset recovers, t − 1 shares
determine nothing, the vectorised combine agrees with the per-secret one."""

from __future__ import annotations

import itertools
import secrets

import numpy as np
import pytest
from numpy.typing import NDArray
from scipy.stats import chisquare

from fedclust.crypto.shamir import (
    MAX_SECRET_BYTES,
    PRIME,
    combine,
    combine_many,
    limbs,
    share_bytes,
    share_from_bytes,
    split,
)

U64 = NDArray[np.uint64]


def lagrange_at(points: list[tuple[int, int]], at: int) -> int:
    """Reference Lagrange interpolation over GF(p) with Python integers (no numpy)."""
    total = 0
    for j, (xj, yj) in enumerate(points):
        num, den = 1, 1
        for i, (xi, _) in enumerate(points):
            if i != j:
                num = num * (at - xi) % PRIME
                den = den * (xj - xi) % PRIME
        total = (total + yj * num * pow(den, PRIME - 2, PRIME)) % PRIME
    return total


def limb_values(secret: bytes) -> list[int]:
    """The 30-bit limbs of a secret, big-endian (the module's documented layout)."""
    m = limbs(len(secret))
    value = int.from_bytes(secret, "big")
    return [(value >> (30 * (m - 1 - j))) & ((1 << 30) - 1) for j in range(m)]


# -- recovery --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("n", "t"), [(3, 2), (4, 3), (5, 3), (6, 4), (5, 5), (4, 1)])
def test_every_t_subset_and_larger_recovers(n: int, t: int) -> None:
    secret = secrets.token_bytes(32)
    xs = [3, 17, 2**31 - 2, 1000, 5, 77][:n]  # arbitrary distinct x, including the largest
    shares = split(secret, threshold=t, xs=xs)
    assert shares.shape == (n, limbs(32)) and shares.dtype == np.uint64
    assert int(shares.max()) < PRIME
    for size in range(t, n + 1):
        for subset in itertools.combinations(range(n), size):
            assert combine([xs[i] for i in subset], shares[list(subset)], 32) == secret


@pytest.mark.parametrize("length", [1, 2, 4, 7, 15, 16, 31, 32, 33, 63, 64])
def test_all_secret_lengths_round_trip(length: int) -> None:
    secret = secrets.token_bytes(length)
    shares = split(secret, threshold=3, xs=[1, 2, 3, 4])
    assert shares.shape == (4, limbs(length))
    assert combine([2, 3, 4], shares[1:], length) == secret


def test_shares_lie_on_one_polynomial_per_limb_with_the_secret_at_zero() -> None:
    # Independent check of split: interpolate each limb with Python integers.
    secret = secrets.token_bytes(32)
    xs = [4, 9, 11, 12]
    shares = split(secret, threshold=3, xs=xs)
    for j, limb in enumerate(limb_values(secret)):
        points = [(x, int(shares[i, j])) for i, x in enumerate(xs)]
        assert lagrange_at(points[:3], 0) == limb
        # The fourth share is the degree-2 polynomial through the first three.
        assert lagrange_at(points[:3], xs[3]) == points[3][1]


def test_leading_zero_bytes_survive() -> None:
    for secret in (bytes(31) + b"\x01", bytes(32), b"\x00\x00\xff" + bytes(29)):
        shares = split(secret, threshold=2, xs=[1, 2, 3])
        assert combine([2, 3], shares[1:], 32) == secret
        assert len(combine([1, 3], shares[[0, 2]], 32)) == 32


# -- secrecy ---------------------------------------------------------------------------------------


def test_t_minus_1_shares_are_consistent_with_every_candidate_secret() -> None:
    # A one-byte secret is one limb. Hold t − 1 = 2 real shares of a threshold-3 sharing;
    # for every candidate value c of the secret there is a degree-2 polynomial through
    # (0, c) and the two shares, and its value at a third x completes a sharing that the
    # module's own combine decodes to c. So the two shares rule out no candidate.
    t, xs = 3, [5, 8, 13]
    real = b"\x2a"
    shares = split(real, threshold=t, xs=xs)
    held = [(xs[0], int(shares[0, 0])), (xs[1], int(shares[1, 0]))]
    decoded = set()
    for c in range(256):
        third = lagrange_at([(0, c), *held], xs[2])
        ys = np.array([[held[0][1]], [held[1][1]], [third]], dtype=np.uint64)
        decoded.add(combine(xs, ys, 1))
    assert decoded == {bytes([c]) for c in range(256)}
    # ... while the real third share decodes to the real secret, and only it.
    assert combine(xs, shares, 1) == real


@pytest.mark.parametrize(("n", "t"), [(4, 3), (5, 3), (6, 4)])
def test_forced_interpolation_through_t_minus_1_shares_misses_the_secret(n: int, t: int) -> None:
    secret = secrets.token_bytes(32)
    xs = list(range(1, n + 1))
    shares = split(secret, threshold=t, xs=xs)
    true_limbs = limb_values(secret)
    for subset in itertools.combinations(range(n), t - 1):
        # Interpolating a degree-(t − 2) polynomial through t − 1 shares gives, per limb, an
        # unrelated field element: equal to the true limb with probability 1/p, and all nine
        # limbs equal with probability p^-9.
        forced = [
            lagrange_at([(xs[i], int(shares[i, j])) for i in subset], 0)
            for j in range(limbs(32))
        ]
        assert forced != true_limbs
        # The module's combine with too few shares almost surely refuses (a limb or the
        # value out of range); when it does decode something, that is not the secret.
        try:
            out = combine([xs[i] for i in subset], shares[list(subset)], 32)
        except ValueError as error:
            assert "inconsistent" in str(error)
        else:
            assert out != secret


def test_one_share_is_uniform_whatever_the_secret() -> None:
    # With t = 2, the share at x = 1 of a limb is s + a mod p for uniform a: the same
    # distribution for the secrets 0x00.. and 0xff.. Chi-square on the top 4 bits of the
    # first limb's share over 4000 splits each (p-value uniform if correct; a fixed share,
    # or a coefficient drawn from a narrow range, puts everything in one or few bins).
    for secret in (bytes(32), b"\xff" * 32):
        tops = [int(split(secret, threshold=2, xs=[1, 2])[0, 0]) >> 27 for _ in range(4000)]
        counts = np.bincount(tops, minlength=16)
        assert chisquare(counts).pvalue > 1e-9


def test_coefficients_come_from_os_urandom(monkeypatch: pytest.MonkeyPatch) -> None:
    # split draws its t − 1 coefficients per limb from os.urandom as little-endian 32-bit
    # words masked to 31 bits, redrawing the value p itself.
    calls: list[int] = []
    queue = [
        (0xFFFFFFFF).to_bytes(4, "little"),  # masks to p: must be redrawn
        (123456789).to_bytes(4, "little"),
    ]

    def fake_urandom(size: int) -> bytes:
        calls.append(size)
        return queue.pop(0)

    monkeypatch.setattr("fedclust.crypto.shamir.os.urandom", fake_urandom)
    shares = split(b"\x07", threshold=2, xs=[1, 2, 10])
    assert calls == [4, 4] and not queue
    assert [int(v) for v in shares[:, 0]] == [(7 + 123456789 * x) % PRIME for x in (1, 2, 10)]

    # With several limbs and a larger threshold, exactly 4 (t − 1) m bytes are requested.
    calls.clear()

    def counting(size: int) -> bytes:
        calls.append(size)
        return b"\x01\x00\x00\x00" * (size // 4)

    monkeypatch.setattr("fedclust.crypto.shamir.os.urandom", counting)
    shares = split(bytes(32), threshold=4, xs=[1, 2, 3, 4])
    assert calls == [4 * 3 * limbs(32)]
    # Every coefficient is 1: f(x) = x + x^2 + x^3 for every limb of the zero secret.
    assert all(
        int(shares[i, j]) == (x + x**2 + x**3) % PRIME
        for i, x in enumerate([1, 2, 3, 4]) for j in range(limbs(32))
    )


# -- refusals --------------------------------------------------------------------------------------


def test_duplicate_x_is_refused() -> None:
    with pytest.raises(ValueError, match="distinct"):
        split(b"secret", threshold=2, xs=[1, 2, 2])
    shares = split(b"secret", threshold=2, xs=[1, 2, 3])
    with pytest.raises(ValueError, match="distinct"):
        combine([1, 1], shares[[0, 0]], 6)
    with pytest.raises(ValueError, match="distinct"):
        combine_many(
            np.array([[1, 2], [3, 3]], dtype=np.uint64),
            np.stack([shares[[0, 1]], shares[[2, 2]]]),
            6,
        )


def test_inconsistent_shares_are_rejected() -> None:
    # Shares of two different sharings (same length, same threshold) do not determine a
    # secret: a limb or the value comes out of range (all limbs in range by chance: ~2^-23).
    xs = [1, 2, 3]
    a = split(b"a" * 32, threshold=2, xs=xs)
    b = split(b"b" * 32, threshold=2, xs=xs)
    with pytest.raises(ValueError, match="inconsistent"):
        combine([1, 2], np.stack([a[0], b[1]]), 32)
    # Flipping bit 30 of a low limb of one share moves that limb of the result by ±2^30
    # (the Lagrange weight of x = 2 among {1, 2} is −1): out of the 30-bit range whatever
    # the share's value ("a" * 32 has no limb equal to 0 or 2^30 − 1).
    assert all(0 < v < (1 << 30) - 1 for v in limb_values(b"a" * 32))
    for j in range(1, limbs(32)):
        bad = a.copy()
        bad[1, j] ^= np.uint64(1 << 30)
        with pytest.raises(ValueError, match=r"inconsistent|out of range"):
            combine([1, 2], bad[:2], 32)
    # A value at or above p is refused before interpolating.
    bad = a.copy()
    bad[0, 3] = np.uint64(PRIME)
    with pytest.raises(ValueError, match="out of range"):
        combine([1, 2], bad[:2], 32)


def test_limbs_in_range_but_a_value_too_long_are_rejected() -> None:
    # Every limb below 2^30, yet the value needs more than 8L bits: not a secret of L bytes.
    # (With t = 1 the share is the secret's limbs themselves.)
    with pytest.raises(ValueError, match="inconsistent"):
        combine([1], np.array([[256]], dtype=np.uint64), 1)
    top = np.zeros((1, limbs(32)), dtype=np.uint64)
    top[0, 0] = 1 << 16  # a 32-byte secret's top limb holds 256 − 8·30 = 16 bits
    with pytest.raises(ValueError, match="inconsistent"):
        combine([1], top, 32)
    top[0, 0] = (1 << 16) - 1
    assert combine([1], top, 32) == b"\xff\xff" + bytes(30)
    assert combine([1], np.array([[255]], dtype=np.uint64), 1) == b"\xff"


def test_split_and_combine_validate_their_arguments() -> None:
    with pytest.raises(ValueError, match="1 to 64 bytes"):
        split(bytes(MAX_SECRET_BYTES + 1), threshold=2, xs=[1, 2, 3])
    with pytest.raises(ValueError, match="1 to 64 bytes"):
        split(b"", threshold=2, xs=[1, 2, 3])
    with pytest.raises(ValueError, match="threshold"):
        split(b"s", threshold=4, xs=[1, 2, 3])
    with pytest.raises(ValueError, match="threshold"):
        split(b"s", threshold=0, xs=[1, 2, 3])
    for bad_x in (0, PRIME):
        with pytest.raises(ValueError, match="x coordinates"):
            split(b"s", threshold=2, xs=[1, bad_x])
    shares = split(b"s" * 8, threshold=2, xs=[1, 2])
    with pytest.raises(ValueError, match="shape"):
        combine([1, 2], shares, 1)  # a 1-byte secret has one limb, an 8-byte one three
    with pytest.raises(ValueError, match="shape"):
        combine_many(np.array([1, 2], dtype=np.uint64), shares, 8)


# -- vectorised combine ----------------------------------------------------------------------------


def test_combine_many_equals_per_secret_combine() -> None:
    rng = np.random.default_rng(3)
    S, t, length = 200, 4, 32
    secret_list = [secrets.token_bytes(length) for _ in range(S)]
    secret_list[0] = bytes(length)  # include the zero secret and leading zeros
    xs_rows, ys_rows = [], []
    for secret in secret_list:
        xs = rng.choice(np.arange(1, 50), size=7, replace=False).tolist()  # each its own x set
        shares = split(secret, threshold=t, xs=xs)
        pick = rng.choice(7, size=t, replace=False)
        xs_rows.append([xs[i] for i in pick])
        ys_rows.append(shares[pick])
    X = np.asarray(xs_rows, dtype=np.uint64)
    Y = np.stack(ys_rows)
    many = combine_many(X, Y, length)
    assert many == secret_list
    assert many == [combine(X[s].tolist(), Y[s], length) for s in range(S)]
    assert combine_many(np.zeros((0, t), dtype=np.uint64), np.zeros((0, t, 9), np.uint64), 32) == []


def test_combine_many_refuses_the_batch_when_one_row_is_inconsistent() -> None:
    xs = [1, 2, 3]
    good = split(b"g" * 32, threshold=2, xs=xs)
    other = split(b"h" * 32, threshold=2, xs=xs)
    X = np.array([[1, 2], [1, 2]], dtype=np.uint64)
    assert combine_many(X, np.stack([good[:2], other[:2]]), 32) == [b"g" * 32, b"h" * 32]
    with pytest.raises(ValueError, match="inconsistent"):
        combine_many(X, np.stack([good[:2], np.stack([good[0], other[1]])]), 32)


# -- serialisation ---------------------------------------------------------------------------------


def test_share_bytes_round_trip() -> None:
    for length in (1, 32, 64):
        secret = secrets.token_bytes(length)
        xs = [1, 2**31 - 2, 9]
        shares = split(secret, threshold=2, xs=xs)
        encoded = [share_bytes(x, shares[i]) for i, x in enumerate(xs)]
        assert all(len(e) == 4 * (limbs(length) + 1) for e in encoded)
        assert encoded[1][:4] == (2**31 - 2).to_bytes(4, "big")  # x first, big-endian
        decoded = [share_from_bytes(e, length) for e in encoded]
        for (x, y), x0, row in zip(decoded, xs, shares, strict=True):
            assert x == x0 and y.dtype == np.uint64 and np.array_equal(y, row)
        assert combine([decoded[0][0], decoded[2][0]], np.stack([decoded[0][1], decoded[2][1]]),
                       length) == secret


def test_malformed_share_bytes_are_refused() -> None:
    shares = split(secrets.token_bytes(32), threshold=2, xs=[1, 2])
    raw = share_bytes(2, shares[1])
    with pytest.raises(ValueError, match="bytes"):
        share_from_bytes(raw[:-1], 32)
    with pytest.raises(ValueError, match="bytes"):
        share_from_bytes(raw + b"\x00", 32)
    with pytest.raises(ValueError, match="bytes"):
        share_from_bytes(raw, 64)  # a share of another length
    with pytest.raises(ValueError, match="bytes"):
        share_from_bytes(bytearray(raw), 32)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="out of range"):
        share_from_bytes(bytes(4) + raw[4:], 32)  # x = 0
    with pytest.raises(ValueError, match="out of range"):
        share_from_bytes(PRIME.to_bytes(4, "big") + raw[4:], 32)  # x = p
    with pytest.raises(ValueError, match="out of range"):
        share_from_bytes(raw[:8] + PRIME.to_bytes(4, "big") + raw[12:], 32)  # a limb = p
