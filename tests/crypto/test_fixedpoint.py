"""Fixed-point encoding into Z_2^64: bounds, overflow refusal, two's-complement decode, error."""

from __future__ import annotations

import re
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedclust.crypto.fixedpoint import BoundError, Statistic, add, check_aggregate, decode, encode
from fedclust.protocol.errors import ProtocolError

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
