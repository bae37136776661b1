"""Paillier protection: fixed-point slots, packing, homomorphic sums, minimum cohort, wire form.

Keys here are 1024-bit: correctness of the encoding, the packing and the homomorphic sum does
not depend on the key size beyond the plaintext width (a 1024-bit key still holds 28 slots of
35 bits, so vectors span several ciphertexts), and tests need no security. 1024 bits keep key
generation at milliseconds and encryption near 2 ms. The benchmark uses 2048 bits.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedclust.core.errors import ProtocolError, RefusedError
from fedclust.crypto.paillier import (
    EncryptedVector,
    Packing,
    PaillierKeyPair,
    SlotSpec,
    add,
    decrypt_sum,
    encrypt_vector,
)

SPEC = SlotSpec("local_sums", scale_bits=20, bound=1000.0, max_parties=10)


@pytest.fixture(scope="module")
def keys() -> PaillierKeyPair:
    return PaillierKeyPair.generate(bits=1024)


def _parties(keys: PaillierKeyPair, xs: list[np.ndarray], spec: SlotSpec = SPEC) -> EncryptedVector:
    return add([encrypt_vector(keys.public_key, x, spec) for x in xs])


def _tolerance(spec: SlotSpec, n_parties: int) -> float:
    # Encoding error n·2^-(f+1), plus float64 rounding of the decoded value and of the exact
    # (math.fsum) reference: each at most half an ulp of a number <= n·bound.
    return spec.error_bound(n_parties) + n_parties * spec.bound * 2.0**-51


def test_known_answer_slots_with_negative_values() -> None:
    # f=2, bound=3: B = 12, contributions in [0, 24] (5 bits), 3 parties: sums <= 72 (7 bits).
    spec = SlotSpec("toy", scale_bits=2, bound=3.0, max_parties=3)
    assert (spec.offset, spec.value_bits, spec.slot_bits, spec.headroom_bits) == (12, 5, 7, 2)
    packing = Packing(spec, plaintext_bits=64)  # 64 // 7 = 9 slots: counter + 8 values
    assert packing.slots_per_plaintext == 8
    # -3 -> 0, 0.25 -> 13, 1.5 -> 18; slot 0 is the counter 1.
    assert packing.pack([-3.0, 0.25, 1.5]) == [1 + (0 << 7) + (13 << 14) + (18 << 21)]
    # Three parties' plaintexts summed: counter 3, slots decode with 3·B subtracted.
    total = sum(packing.pack(v)[0] for v in ([-3.0, 0.25, 1.5], [-3.0, 1.0, 3.0], [2.0, 0, -1]))
    np.testing.assert_array_equal(packing.unpack([total], 3, 3), [-4.0, 1.25, 3.5])


def test_pack_unpack_round_trip_spans_plaintexts() -> None:
    packing = Packing(SPEC, plaintext_bits=1023)
    x = np.linspace(-1000.0, 1000.0, 61)
    plaintexts = packing.pack(x)
    assert len(plaintexts) == math.ceil(61 / packing.slots_per_plaintext) == 3
    np.testing.assert_allclose(packing.unpack(plaintexts, 61, 1), x, rtol=0,
                               atol=_tolerance(SPEC, 1))


def test_encrypted_round_trip_of_three_parties(keys: PaillierKeyPair) -> None:
    rng = np.random.default_rng(0)
    xs = [rng.uniform(-1000.0, 1000.0, size=(4, 15)) for _ in range(3)]
    total = _parties(keys, xs)
    assert total.n_contributions == 3 and len(total.ciphertexts) == 3  # 60 values / 28 slots
    result = decrypt_sum(keys.private_key, total, n_parties=3)
    assert result.shape == (4, 15)
    np.testing.assert_allclose(result, xs[0] + xs[1] + xs[2], rtol=0, atol=_tolerance(SPEC, 3))


@settings(max_examples=25, deadline=None)
@given(
    n_parties=st.integers(3, 6),
    n_values=st.integers(1, 60),
    scale_bits=st.integers(0, 40),
    data=st.data(),
)
def test_sums_equal_plaintext_sums_within_bound(
    keys: PaillierKeyPair, n_parties: int, n_values: int, scale_bits: int, data: st.DataObject
) -> None:
    spec = SlotSpec("moments", scale_bits=scale_bits, bound=500.0, max_parties=6)
    values = st.floats(-500.0, 500.0, allow_nan=False, allow_infinity=False)
    xs = [np.array(data.draw(st.lists(values, min_size=n_values, max_size=n_values)))
          for _ in range(n_parties)]
    result = decrypt_sum(keys.private_key, _parties(keys, xs, spec), n_parties=n_parties)
    exact = np.array([math.fsum(col) for col in zip(*xs, strict=True)])
    assert np.all(np.abs(result - exact) <= _tolerance(spec, n_parties))


def test_full_headroom_does_not_carry(keys: PaillierKeyPair) -> None:
    # max_parties contributions all at +bound or -bound: the extreme slot sums, exact.
    spec = SlotSpec("counts", scale_bits=8, bound=7.5, max_parties=5)
    for v in (7.5, -7.5):
        xs = [np.array([v, -v, v] * 20) for _ in range(5)]
        result = decrypt_sum(keys.private_key, _parties(keys, xs, spec), n_parties=5)
        np.testing.assert_array_equal(result, 5 * xs[0])


@pytest.mark.parametrize("bad", [1000.001, -2000.0, np.nan, np.inf])
def test_out_of_bound_values_are_refused(keys: PaillierKeyPair, bad: float) -> None:
    with pytest.raises(ValueError, match="statistic 'local_sums'") as info:
        encrypt_vector(keys.public_key, [0.0, bad], SPEC)
    if np.isfinite(bad):
        assert str(bad) not in str(info.value)  # the value itself is never echoed


def test_too_many_parties_for_the_headroom_is_refused(keys: PaillierKeyPair) -> None:
    spec = SlotSpec("spread", scale_bits=10, bound=1.0, max_parties=3)
    vectors = [encrypt_vector(keys.public_key, [0.5], spec) for _ in range(4)]
    with pytest.raises(ValueError, match=r"statistic 'spread'.*max_parties=3"):
        add(vectors)
    three = add(vectors[:3])
    with pytest.raises(ValueError, match=r"statistic 'spread'.*headroom"):
        decrypt_sum(keys.private_key, three, n_parties=4, min_parties=4)


def test_fewer_than_three_contributions_are_refused(keys: PaillierKeyPair) -> None:
    one = encrypt_vector(keys.public_key, [1.0, 2.0], SPEC)
    two = add([one, encrypt_vector(keys.public_key, [1.0, 2.0], SPEC)])
    for vector, n in ((one, 1), (two, 2), (two, 3)):
        with pytest.raises(RefusedError, match="minimum cohort of 3"):
            decrypt_sum(keys.private_key, vector, n_parties=n)
    with pytest.raises(ValueError, match="'min_parties'"):
        decrypt_sum(keys.private_key, two, n_parties=2, min_parties=2)
    three = add([two, encrypt_vector(keys.public_key, [1.0, 2.0], SPEC)])
    with pytest.raises(RefusedError, match="minimum cohort of 4"):
        decrypt_sum(keys.private_key, three, n_parties=3, min_parties=4)
    np.testing.assert_allclose(decrypt_sum(keys.private_key, three, n_parties=3), [3.0, 6.0])


def test_claimed_count_must_match(keys: PaillierKeyPair) -> None:
    total = _parties(keys, [np.ones(3)] * 4)
    with pytest.raises(ProtocolError, match="claims 4"):
        decrypt_sum(keys.private_key, total, n_parties=3)
    # A forged count field is caught by the encrypted counter slots.
    forged = EncryptedVector(total.public_key, SPEC, total.shape, 5, total.ciphertexts)
    with pytest.raises(ProtocolError, match="not a sum of 5"):
        decrypt_sum(keys.private_key, forged, n_parties=5)
    # One party's vector relabelled as an aggregate of 3 is not decrypted into its values.
    single = encrypt_vector(keys.public_key, np.ones(3), SPEC)
    relabelled = EncryptedVector(single.public_key, SPEC, single.shape, 3, single.ciphertexts)
    with pytest.raises(ProtocolError, match="not a sum of 3"):
        decrypt_sum(keys.private_key, relabelled, n_parties=3)


def test_ciphertexts_mixed_across_aggregates_are_detected(keys: PaillierKeyPair) -> None:
    xs = [np.full(40, float(i)) for i in range(3)]  # 40 values: 2 ciphertexts
    total = _parties(keys, xs)
    single = encrypt_vector(keys.public_key, xs[0], SPEC)
    mixed = EncryptedVector(total.public_key, SPEC, total.shape, 3,
                            (total.ciphertexts[0], single.ciphertexts[1]))
    with pytest.raises(ProtocolError, match="not a sum of 3"):
        decrypt_sum(keys.private_key, mixed, n_parties=3)


def test_same_contribution_twice_is_refused(keys: PaillierKeyPair) -> None:
    v = encrypt_vector(keys.public_key, [1.0], SPEC)
    with pytest.raises(ProtocolError, match="appears twice"):
        add([v, v, encrypt_vector(keys.public_key, [1.0], SPEC)])


def test_vectors_under_other_keys_or_specs_are_refused(keys: PaillierKeyPair) -> None:
    other = PaillierKeyPair.generate(bits=1024)
    a = encrypt_vector(keys.public_key, [1.0], SPEC)
    with pytest.raises(ProtocolError, match="different public keys"):
        add([a, encrypt_vector(other.public_key, [1.0], SPEC)])
    with pytest.raises(ProtocolError, match="specs or shapes"):
        add([a, encrypt_vector(keys.public_key, [1.0, 2.0], SPEC)])
    total = add([a] + [encrypt_vector(keys.public_key, [1.0], SPEC) for _ in range(2)])
    with pytest.raises(ProtocolError, match="another key"):
        decrypt_sum(other.private_key, total, n_parties=3)


def test_ciphertexts_are_fresh_and_all_of_one_size(keys: PaillierKeyPair) -> None:
    # No per-value exponent exists; every ciphertext travels with the same byte width
    # whatever the magnitude (tiny, huge, negative), and equal inputs encrypt differently.
    x = np.array([1e-6, -999.9, 0.0, 1000.0] * 15)
    a, b = (encrypt_vector(keys.public_key, x, SPEC) for _ in range(2))
    assert set(a.ciphertexts).isdisjoint(b.ciphertexts)
    wire = a.to_dict()["ciphertexts"] + add([a, b]).to_dict()["ciphertexts"]
    assert len({len(c) for c in wire}) == 1
    assert len(wire[0]) == 4 * math.ceil(256 / 3)  # base64 of n² bytes: 2048 bits for n of 1024


def test_serialisation_round_trip(keys: PaillierKeyPair) -> None:
    total = _parties(keys, [np.arange(6.0).reshape(2, 3)] * 3)
    wire = json.loads(json.dumps(total.to_dict()))
    assert set(wire) == {"spec", "shape", "n_contributions", "key_sha256", "ciphertexts"}
    back = EncryptedVector.from_dict(wire, keys.public_key)
    assert back == total
    np.testing.assert_allclose(decrypt_sum(keys.private_key, back, n_parties=3),
                               3 * np.arange(6.0).reshape(2, 3))
    with pytest.raises(ProtocolError, match="different public key"):
        EncryptedVector.from_dict(wire, PaillierKeyPair.generate(1024).public_key)
    with pytest.raises(ProtocolError, match="exactly the fields"):
        EncryptedVector.from_dict({**wire, "exponent": 0}, keys.public_key)
    truncated = {**wire, "ciphertexts": [wire["ciphertexts"][0][:-4]]}
    with pytest.raises(ProtocolError, match="bytes encoding"):
        EncryptedVector.from_dict(truncated, keys.public_key)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"statistic": ""}, "'statistic'"),
        ({"bound": 0.0}, "'bound'"),
        ({"max_parties": 2}, "'max_parties'"),
        ({"scale_bits": 60, "bound": 2.0**962}, "2\\^1022"),
    ],
)
def test_spec_is_validated(kwargs: dict[str, object], message: str) -> None:
    args: dict[str, object] = {"statistic": "s", "scale_bits": 10, "bound": 1.0,
                               "max_parties": 3, **kwargs}
    with pytest.raises(ValueError, match=message):
        SlotSpec(**args)  # type: ignore[arg-type]


def test_private_key_never_in_repr(keys: PaillierKeyPair) -> None:
    text = repr(keys)
    assert str(keys.private_key.p) not in text and str(keys.private_key.q) not in text
    assert "private" in text
