"""Fixed-point encoding into Z_2^(64·w): bounds, overflow refusal, two's-complement decode,
error; rings of several words (carries, exactness, correct rounding)."""

from __future__ import annotations

import re
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedclust.core.errors import ProtocolError
from fedclust.crypto import fixedpoint
from fedclust.crypto.fixedpoint import (
    MAX_WORDS,
    BoundError,
    Statistic,
    add,
    check_aggregate,
    decode,
    encode,
    fixed_integers,
    subtract_into,
)

SUMS = Statistic("local_sums", scale_bits=20, bound=1000.0)


def test_hand_worked_negative_sum() -> None:
    # -1.5 + 0.25 = -1.25: both exactly representable, so the decode is exact.
    stat = Statistic("toy", scale_bits=2, bound=2.0)
    a, b = encode(stat, [-1.5]), encode(stat, [0.25])
    assert a[0] == np.uint64(2**64 - 6)  # two's complement of -6 = -1.5 · 2^2
    assert decode(stat, add([a, b]), n_parties=2).tolist() == [-1.25]


def test_wrap_around_is_exact() -> None:
    # Adding a vector and its negation wraps through 2^64 back to exactly zero.
    x = encode(SUMS, [999.0, -999.0, 0.5])
    neg = encode(SUMS, [-999.0, 999.0, -0.5])
    assert add([x, neg]).tolist() == [0, 0, 0]


def test_value_above_bound_is_refused_not_clipped() -> None:
    with pytest.raises(BoundError, match="local_sums") as info:
        encode(SUMS, [1.0, 1000.5, -1234.0])
    message = str(info.value).replace("1000.0", "")  # the bound is public
    assert re.search(r"\d", message) is None  # neither the values, nor how many, nor by how much
    assert (info.value.over, info.value.largest, info.value.bound) == (2, 1234.0, 1000.0)
    assert encode(SUMS, [1000.0, -1000.0]).shape == (2,)  # the bound itself is allowed


def test_non_finite_values_are_refused() -> None:
    with pytest.raises(ValueError, match="NaN or infinity"):
        encode(SUMS, [np.nan])


def test_statistic_declaration_is_validated() -> None:
    with pytest.raises(ValueError, match="scale_bits"):
        Statistic("s", scale_bits=61, bound=1.0)
    with pytest.raises(ValueError, match="bound"):
        Statistic("s", scale_bits=2, bound=0.0)
    with pytest.raises(ValueError, match="'big'"):
        Statistic("big", scale_bits=22, bound=2.0**40)  # one party already reaches 2^62


def test_check_aggregate_refuses_possible_overflow() -> None:
    stat = Statistic("spread", scale_bits=20, bound=2.0**40)  # one party: 2^60
    assert check_aggregate(stat, 3, 10) == 3 * 2.0**-21  # 3 · 2^60 < 2^62
    with pytest.raises(ValueError, match=r"'spread'.*overflow"):
        check_aggregate(stat, 4, 10)  # 4 · 2^60 = 2^62
    with pytest.raises(ValueError, match="n_parties"):
        check_aggregate(stat, 0, 10)


def test_decode_rejects_sums_outside_the_band() -> None:
    # A value still masked is (almost surely) far outside ±n·bound: loud, not a wrong number.
    with pytest.raises(ProtocolError, match="local_sums"):
        decode(SUMS, np.array([2**63], dtype=np.uint64), n_parties=3)
    with pytest.raises(ValueError, match="uint64"):
        decode(SUMS, np.array([1.0]), n_parties=1)


@settings(max_examples=60, deadline=None)
@given(
    scale_bits=st.integers(0, 40),
    data=st.data(),
)
def test_decoding_error_is_within_the_documented_bound(
    scale_bits: int, data: st.DataObject
) -> None:
    # Each party rounds once by <= 2^-(f+1) and the integer sum is exact, so the error per
    # coordinate is <= n · 2^-(f+1); the float64 result adds at most a relative 2^-53 once the
    # integer sum exceeds 2^53 (tolerance below). The reference is the exact rational sum.
    bound = 1e4
    stat = Statistic("h", scale_bits=scale_bits, bound=bound)
    n_parties = data.draw(st.integers(1, 8))
    n_values = data.draw(st.integers(1, 5))
    values = [
        data.draw(
            st.lists(
                st.floats(-bound, bound, allow_nan=False), min_size=n_values, max_size=n_values
            )
        )
        for _ in range(n_parties)
    ]
    decoded = decode(stat, add([encode(stat, v) for v in values]), n_parties)
    for j in range(n_values):
        exact = sum((Fraction(v[j]) for v in values), Fraction(0))
        tol = Fraction(n_parties, 2 ** (scale_bits + 1)) + abs(exact) * Fraction(1, 2**52)
        assert abs(Fraction(float(decoded[j])) - exact) <= tol


# -- rings of several 64-bit words ----------------------------------------------------------------

WIDE = Statistic("sum_sq", scale_bits=40, bound=2.0**100, words=3)  # 2^140 < 2^190


def _integer(limbs: np.ndarray) -> int:
    """The unsigned integer of one value's limbs (least significant first)."""
    return sum(int(limb) << (64 * j) for j, limb in enumerate(limbs))


def test_wide_encoding_is_the_exact_twos_complement() -> None:
    values = [1e30, -1e30, 2.0**-40, -(2.0**-41), 0.0, 3.0 * 2.0**-42, -(2.0**99) - 2.0**47]
    encoded = encode(WIDE, values)
    assert encoded.shape == (len(values), 3) and encoded.dtype == np.uint64
    for v, limbs in zip(values, encoded, strict=True):
        exact = round(Fraction(v) * 2**40)  # half to even: 2^-41 → 0, 3·2^-42 → 1
        assert _integer(limbs) == exact % 2**192
    assert encoded[4].tolist() == [0, 0, 0]
    assert _integer(encoded[0]) + _integer(encoded[1]) == 2**192  # x + (−x) wraps to 0


def test_carries_cross_every_limb() -> None:
    # 2^23 · 2^40 = 2^63 twice is 2^64: the low limb wraps to 0 and carries 1 into the second;
    # -2^-40 (all ones in both limbs) + 2^-40 carries through both back to zero; subtracting
    # borrows the other way.
    stat = Statistic("c", scale_bits=40, bound=2.0**80, words=2)
    a = encode(stat, [2.0**23, -(2.0**-40)])
    assert a.tolist() == [[2**63, 0], [2**64 - 1, 2**64 - 1]]
    b = encode(stat, [2.0**23, 2.0**-40])
    total = add([a, b], words=2)
    assert total.tolist() == [[0, 1], [0, 0]]
    assert decode(stat, total, n_parties=2).tolist() == [2.0**24, 0.0]
    subtract_into(total, b, 2)
    assert np.array_equal(total, a)


def test_wide_sums_decode_correctly_rounded() -> None:
    # Sums whose exact value needs more than 53 bits come back as the float64 nearest to the
    # exact rational sum (ties to even), negative ones included.
    rng = np.random.default_rng(0)
    parts = [
        rng.choice([-1.0, 1.0], size=50) * 2.0 ** rng.uniform(-40, 99, size=50)
        for _ in range(4)
    ]
    total = add([encode(WIDE, p) for p in parts], words=3)
    decoded = decode(WIDE, total, n_parties=4)
    for j in range(50):
        exact = sum((round(Fraction(p[j]) * 2**40) for p in parts), 0)
        assert decoded[j] == float(Fraction(exact, 2**40))


def test_values_near_the_wide_bound_and_over_it() -> None:
    stat = Statistic("s", scale_bits=40, bound=2.0**100, words=3)
    edge = encode(stat, [2.0**100, -(2.0**100)])
    assert decode(stat, add([edge] * 4, words=3), n_parties=4).tolist() == [2.0**102, -(2.0**102)]
    with pytest.raises(BoundError, match="'s'") as info:
        encode(stat, [1.0, 2.0**100 * (1 + 2.0**-52)])
    assert info.value.over == 1  # refused, never clipped


def test_wide_declarations_and_aggregates_are_checked() -> None:
    with pytest.raises(ValueError, match=r"2\^126 in 2 word"):
        Statistic("s", scale_bits=40, bound=2.0**86, words=2)
    with pytest.raises(ValueError, match="words"):
        Statistic("s", scale_bits=40, bound=1.0, words=MAX_WORDS + 1)
    stat = Statistic("s", scale_bits=40, bound=2.0**84, words=2)  # one party: 2^124
    assert check_aggregate(stat, 3, 5) == 3 * 2.0**-41
    with pytest.raises(ValueError, match="overflow"):
        check_aggregate(stat, 4, 5)  # 4 · 2^124 = 2^126


def test_decode_rejects_wide_sums_outside_the_band() -> None:
    total = add([encode(WIDE, [1.0, 2.0])] * 3, words=3)
    total[1, 2] ^= np.uint64(1 << 40)  # a mask left in: far outside ±n·bound
    with pytest.raises(ProtocolError, match="sum_sq"):
        decode(WIDE, total, n_parties=3)
    with pytest.raises(ValueError, match="last axis of 3"):
        decode(WIDE, total[:, :2], n_parties=3)


def test_one_word_encoding_is_unchanged() -> None:
    # The default ring is one word, the encoding of every field before wider rings existed.
    assert encode(SUMS, [-1.5, 2.25]).tolist() == [2**64 - 3 * 2**19, 9 * 2**18]
    assert SUMS.words == 1


@settings(max_examples=60, deadline=None)
@given(words=st.integers(2, 4), data=st.data())
def test_wide_sums_are_exact_for_any_finite_values(words: int, data: st.DataObject) -> None:
    # Any finite float64 within the bound: the decoded sum is the float64 nearest to the
    # exact sum of the values rounded to 2^-40 (no other error).
    bound = 2.0 ** (64 * words - 48)
    stat = Statistic("h", scale_bits=40, bound=bound, words=words)
    n_parties = data.draw(st.integers(1, 8))
    values = [
        data.draw(st.lists(st.floats(-bound, bound, allow_nan=False), min_size=3, max_size=3))
        for _ in range(n_parties)
    ]
    decoded = decode(stat, add([encode(stat, v) for v in values], words=words), n_parties)
    for j in range(3):
        exact = sum((round(Fraction(v[j]) * 2**40) for v in values), 0)
        assert decoded[j] == float(Fraction(exact, 2**40))
    ints = fixed_integers("h", [v[0] for v in values], bound=bound, scale_bits=40)
    assert ints == [round(Fraction(v[0]) * 2**40) for v in values]


@pytest.mark.parametrize("words", [2, 3])
def test_the_one_word_fast_paths_give_the_general_limbs_and_sums(words: int) -> None:
    """Values whose scaled magnitude fits an int64 take a shortcut (rint, then sign
    extension into the limbs; a total whose upper limbs only extend the sign decodes from its
    low word): the same limbs and the same decoded sums as the general multi-limb code."""
    rng = np.random.default_rng(7)
    stat = Statistic("s", scale_bits=40, bound=2.0**40, words=words)
    small = rng.normal(scale=1e4, size=500)
    small[:3] = [0.0, -0.0, 2.0**-41]  # a zero, a negative zero, a tie below the grid
    m, shift = fixedpoint._mantissa_shift(small, 40)
    np.testing.assert_array_equal(encode(stat, small), fixedpoint._place(m, shift, words))
    factors = (1.0, -0.5, 0.25)
    for values in (small, np.concatenate([small, [2.0**39, -(2.0**39)]])):  # 2nd: general
        total = add([encode(stat, values * k) for k in factors], words)
        exact = [  # the sum of the rounded encodings, correctly rounded to float64
            float(Fraction(sum(round(Fraction(float(v) * k) * 2**40) for k in factors), 2**40))
            for v in values
        ]
        np.testing.assert_array_equal(decode(stat, total, 3), exact)
    one_word = Statistic("s", scale_bits=40, bound=2.0**20)
    np.testing.assert_array_equal(
        decode(stat, add([encode(stat, small), encode(stat, -small / 3)], words), 2),
        decode(one_word, add([encode(one_word, small), encode(one_word, -small / 3)]), 2),
    )
