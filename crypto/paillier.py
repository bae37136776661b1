"""Paillier protection of sum-type statistics: fixed-point slots packed into one plaintext.

Paillier (1999) over phe: E(a)·E(b) mod n² = E(a + b mod n), so whoever holds the public key
adds contributions; the counting service, which holds the private key, decrypts only the sum.
Encoding (:class:`SlotSpec`, one per statistic per job): offset binary s = round(v·2^f) + B
with B = ceil(bound·2^f) and f = ``scale_bits``; a sum S of P contributions decodes as
(S − P·B)/2^f, within P·2^-(f+1). Packing: slots of ``slot_bits = bit_length(2·B·max_parties)``
bits (a sum never carries), ``bits(n) − 1`` usable bits per plaintext, slot 0 a contribution
counter: m = 1 + Σ_j s_j·2^(j·slot_bits).

:func:`decrypt_sum` refuses fewer than ``min_parties`` (>= 3) contributions and checks the
counter slots. Assumption: the coordinator and the counting service do not collude.

Design notes: ``docs/secure-sums.md`` (§ Paillier packing).
"""

from __future__ import annotations

import base64
import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from phe import paillier
from phe.paillier import PaillierPrivateKey as PrivateKey
from phe.paillier import PaillierPublicKey as PublicKey

from fedclust.core.errors import ProtocolError, RefusedError
from fedclust.core.validation import check_float, check_int
from fedclust.crypto.fixedpoint import MAX_WORDS, fixed_integers, limit_bits

__all__ = [
    "MIN_COHORT",
    "EncryptedVector",
    "Packing",
    "PaillierKeyPair",
    "SlotSpec",
    "add",
    "decrypt_sum",
    "encrypt_vector",
    "key_fingerprint",
]

MIN_COHORT = 3
"""The floor of the minimum cohort: with two parties each learns the other's value."""

_MAX_PARTIES = 2**20


@dataclass(frozen=True)
class SlotSpec:
    """Fixed-point encoding of one statistic: ``|v| <= bound``, ``f = scale_bits``.

    ``max_parties`` is the largest number of contributions an aggregate may sum; it sets the
    headroom of each slot.
    """

    statistic: str
    scale_bits: int
    bound: float
    max_parties: int

    def __post_init__(self) -> None:
        owner = "SlotSpec"
        if not isinstance(self.statistic, str) or not self.statistic:
            raise ValueError("The 'statistic' parameter of SlotSpec must be a non-empty str.")
        check_int(self.scale_bits, name="scale_bits", owner=owner, low=0, high=61)
        bound = check_float(self.bound, name="bound", owner=owner, low=0.0, low_open=True)
        object.__setattr__(self, "bound", bound)
        check_int(self.max_parties, name="max_parties", owner=owner, low=MIN_COHORT,
                  high=_MAX_PARTIES)
        limit = limit_bits(MAX_WORDS)
        if Fraction(self.bound) * 2**self.scale_bits >= 2**limit:
            raise ValueError(
                f"SlotSpec of statistic {self.statistic!r}: bound·2^scale_bits must be "
                f"< 2^{limit}; got scale_bits={self.scale_bits}."
            )

    @cached_property
    def offset(self) -> int:
        """``B = ceil(bound·2^f)``: the encoded value of 0; slots hold ``round(v·2^f) + B``."""
        offset: int = math.ceil(Fraction(self.bound) * 2**self.scale_bits)
        return offset

    @property
    def value_bits(self) -> int:
        """Bits of one encoded contribution, ``bit_length(2B)``."""
        return (2 * self.offset).bit_length()

    @property
    def slot_bits(self) -> int:
        """Bits of a slot: the sum of ``max_parties`` contributions, ``bit_length(2B·P)``."""
        return (2 * self.offset * self.max_parties).bit_length()

    @property
    def headroom_bits(self) -> int:
        return self.slot_bits - self.value_bits

    def error_bound(self, n_parties: int) -> float:
        """Largest encoding error of a decoded sum of ``n_parties`` contributions."""
        return n_parties * 2.0 ** -(self.scale_bits + 1)

    def encode(self, values: ArrayLike) -> list[int]:
        """Offset-binary slots ``round(v·2^f) + B``, flattened; loud errors name the statistic."""
        offset = self.offset
        scaled = fixed_integers(
            self.statistic, values, bound=self.bound, scale_bits=self.scale_bits
        )
        return [v + offset for v in scaled]

    def to_dict(self) -> dict[str, Any]:
        return {
            "statistic": self.statistic,
            "scale_bits": self.scale_bits,
            "bound": self.bound,
            "max_parties": self.max_parties,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SlotSpec:
        _check_keys(data, {"statistic", "scale_bits", "bound", "max_parties"}, "spec")
        return cls(data["statistic"], data["scale_bits"], data["bound"], data["max_parties"])


@dataclass(frozen=True)
class Packing:
    """How a spec's slots fill the plaintexts of one key: slot 0 counter, then values."""

    spec: SlotSpec
    plaintext_bits: int

    def __post_init__(self) -> None:
        if self.slots_per_plaintext < 1:
            raise ValueError(
                f"statistic {self.spec.statistic!r}: slots of {self.spec.slot_bits} bits do "
                f"not fit twice into a {self.plaintext_bits}-bit plaintext; use a larger key."
            )

    @classmethod
    def for_key(cls, spec: SlotSpec, public_key: PublicKey) -> Packing:
        return cls(spec, int(public_key.n).bit_length() - 1)

    @property
    def slots_per_plaintext(self) -> int:
        """Value slots per plaintext (the counter slot excluded)."""
        return self.plaintext_bits // self.spec.slot_bits - 1

    def n_plaintexts(self, n_values: int) -> int:
        return max(1, -(-n_values // self.slots_per_plaintext))

    def pack(self, values: ArrayLike) -> list[int]:
        """One party's values as plaintext integers ``1 + Σ_j s_j·2^(j·slot_bits)``."""
        slots = self.spec.encode(values)
        per, sb = self.slots_per_plaintext, self.spec.slot_bits
        out: list[int] = []
        for i in range(self.n_plaintexts(len(slots))):
            acc = 0
            for s in reversed(slots[i * per:(i + 1) * per]):
                acc = (acc << sb) | s
            out.append((acc << sb) | 1)
        return out

    def unpack(self, totals: Sequence[int], n_values: int, n_parties: int) -> NDArray[np.float64]:
        """Decode summed plaintexts of ``n_parties`` contributions: ``(S - n_parties·B) / 2^f``.

        Raises ProtocolError if a counter slot differs from ``n_parties`` or a slot or the
        plaintext lies outside what ``n_parties`` honest contributions can produce.
        """
        spec = self.spec
        per, sb = self.slots_per_plaintext, spec.slot_bits
        if len(totals) != self.n_plaintexts(n_values):
            raise ProtocolError(
                f"statistic {spec.statistic!r}: {len(totals)} plaintexts for {n_values} values; "
                f"expected {self.n_plaintexts(n_values)}."
            )
        mask = (1 << sb) - 1
        shift = n_parties * spec.offset
        top = 2 * shift
        scale = 1 << spec.scale_bits
        out = np.empty(n_values, dtype=np.float64)
        for i, total in enumerate(totals):
            count = min(per, n_values - i * per)
            if total >> (sb * (count + 1)) or (total & mask) != n_parties:
                raise ProtocolError(
                    f"statistic {spec.statistic!r}: the aggregate is not a sum of {n_parties} "
                    f"contributions (counter or padding slots disagree)."
                )
            rest = total >> sb
            for j in range(count):
                s = rest & mask
                if s > top:
                    raise ProtocolError(
                        f"statistic {spec.statistic!r}: a slot exceeds the range of "
                        f"{n_parties} contributions."
                    )
                out[i * per + j] = (s - shift) / scale  # correctly rounded
                rest >>= sb
        return out


def key_fingerprint(public_key: PublicKey) -> str:
    """SHA-256 hex of the modulus ``n`` (big-endian), naming the key an aggregate is under."""
    n = int(public_key.n)
    return hashlib.sha256(n.to_bytes((n.bit_length() + 7) // 8, "big")).hexdigest()


@dataclass(frozen=True, repr=False)
class PaillierKeyPair:
    """A Paillier key pair; the private key stays with the counting service."""

    public_key: PublicKey
    private_key: PrivateKey

    @classmethod
    def generate(cls, bits: int = 2048) -> PaillierKeyPair:
        """A fresh key pair with an ``n`` of exactly ``bits`` bits (primes from the OS CSPRNG)."""
        bits = check_int(bits, name="bits", owner="PaillierKeyPair.generate", low=1024)
        public_key, private_key = paillier.generate_paillier_keypair(n_length=bits)
        return cls(public_key, private_key)

    def __repr__(self) -> str:
        return f"PaillierKeyPair(key_sha256={key_fingerprint(self.public_key)[:16]}…, private)"


@dataclass(frozen=True, repr=False)
class EncryptedVector:
    """Ciphertexts of one statistic (one party's, or an aggregate of ``n_contributions``)."""

    public_key: PublicKey
    spec: SlotSpec
    shape: tuple[int, ...]
    n_contributions: int
    ciphertexts: tuple[int, ...]

    @cached_property
    def key_sha256(self) -> str:
        """:func:`key_fingerprint` of the public key the ciphertexts are under."""
        return key_fingerprint(self.public_key)

    @property
    def n_values(self) -> int:
        return math.prod(self.shape)

    def __repr__(self) -> str:
        return (
            f"EncryptedVector(statistic={self.spec.statistic!r}, shape={self.shape}, "
            f"n_contributions={self.n_contributions}, n_ciphertexts={len(self.ciphertexts)})"
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form: spec, shape, count, key fingerprint, fixed-width base64 ciphertexts."""
        width = _ciphertext_bytes(self.public_key)
        return {
            "spec": self.spec.to_dict(),
            "shape": list(self.shape),
            "n_contributions": self.n_contributions,
            "key_sha256": self.key_sha256,
            "ciphertexts": [
                base64.b64encode(c.to_bytes(width, "big")).decode("ascii")
                for c in self.ciphertexts
            ],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], public_key: PublicKey) -> EncryptedVector:
        """Parse :meth:`to_dict` output under the job's ``public_key`` (fingerprint checked)."""
        _check_keys(
            data, {"spec", "shape", "n_contributions", "key_sha256", "ciphertexts"}, "vector"
        )
        if not isinstance(data["spec"], Mapping):
            raise ProtocolError("encrypted vector field 'spec' must be an object.")
        spec = SlotSpec.from_dict(data["spec"])
        if data["key_sha256"] != key_fingerprint(public_key):
            raise ProtocolError(
                f"statistic {spec.statistic!r}: encrypted under a different public key."
            )
        shape_raw = data["shape"]
        if not isinstance(shape_raw, list) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape_raw
        ):
            raise ProtocolError("encrypted vector field 'shape' must be a list of ints >= 0.")
        shape = tuple(shape_raw)
        count = check_int(data["n_contributions"], name="n_contributions",
                          owner="EncryptedVector.from_dict", low=1, high=spec.max_parties)
        raw = data["ciphertexts"]
        packing = Packing.for_key(spec, public_key)
        if not isinstance(raw, list) or len(raw) != packing.n_plaintexts(math.prod(shape)):
            raise ProtocolError(
                f"statistic {spec.statistic!r}: field 'ciphertexts' must be a list of "
                f"{packing.n_plaintexts(math.prod(shape))} base64 strings."
            )
        width = _ciphertext_bytes(public_key)
        nsquare = int(public_key.nsquare)
        ciphertexts = []
        for item in raw:
            try:
                blob = base64.b64decode(item, validate=True)
            except (TypeError, ValueError) as exc:
                raise ProtocolError("a ciphertext is not valid base64.") from exc
            c = int.from_bytes(blob, "big")
            if len(blob) != width or not 0 < c < nsquare:
                raise ProtocolError(
                    f"a ciphertext must be {width} bytes encoding an integer in (0, n²)."
                )
            ciphertexts.append(c)
        return cls(public_key, spec, shape, count, tuple(ciphertexts))


def encrypt_vector(public_key: PublicKey, values: ArrayLike, spec: SlotSpec) -> EncryptedVector:
    """One party's contribution: pack ``values`` and encrypt each plaintext with fresh ``r``.

    ``E(m) = (1 + n)^m · r^n mod n²`` (phe ``raw_encrypt``), ``r`` uniform in [1, n) from the
    OS CSPRNG, so equal inputs give unrelated ciphertexts.
    """
    if not isinstance(public_key, PublicKey):
        raise ValueError(
            "public_key must be a phe PaillierPublicKey; "
            f"got {type(public_key).__name__}."
        )
    if not isinstance(spec, SlotSpec):
        raise ValueError(f"spec must be a SlotSpec; got {type(spec).__name__}.")
    shape = tuple(int(d) for d in np.shape(values))
    plaintexts = Packing.for_key(spec, public_key).pack(values)
    ciphertexts = tuple(int(public_key.raw_encrypt(m)) for m in plaintexts)
    return EncryptedVector(public_key, spec, shape, 1, ciphertexts)


def add(vectors: Sequence[EncryptedVector]) -> EncryptedVector:
    """Homomorphic sum ``Π_i c_i mod n²`` per ciphertext; counts add up.

    Refuses vectors of different keys, statistics or shapes, the same ciphertexts twice,
    and a total count beyond the spec's ``max_parties`` (its headroom).
    """
    if len(vectors) < 2 or not all(isinstance(v, EncryptedVector) for v in vectors):
        raise ValueError("vectors must be a sequence of at least 2 EncryptedVector.")
    first = vectors[0]
    name = first.spec.statistic
    for v in vectors[1:]:
        if v.key_sha256 != first.key_sha256:
            raise ProtocolError(f"statistic {name!r}: vectors under different public keys.")
        if v.spec != first.spec or v.shape != first.shape:
            raise ProtocolError(f"statistic {name!r}: vectors of different specs or shapes.")
    if len({v.ciphertexts[0] for v in vectors}) != len(vectors):
        raise ProtocolError(f"statistic {name!r}: the same contribution appears twice.")
    total = sum(v.n_contributions for v in vectors)
    if total > first.spec.max_parties:
        raise ValueError(
            f"statistic {name!r}: an aggregate of {total} contributions exceeds the headroom "
            f"of max_parties={first.spec.max_parties}."
        )
    nsquare = int(first.public_key.nsquare)
    summed = []
    for cs in zip(*(v.ciphertexts for v in vectors), strict=True):
        acc = cs[0]
        for c in cs[1:]:
            acc = acc * c % nsquare
        summed.append(acc)
    return EncryptedVector(first.public_key, first.spec, first.shape, total, tuple(summed))


def decrypt_sum(
    private_key: PrivateKey,
    vector: EncryptedVector,
    n_parties: int,
    min_parties: int = MIN_COHORT,
) -> NDArray[np.float64]:
    """Decrypt and decode an aggregate of exactly ``n_parties`` contributions.

    Refuses (RefusedError, before any decryption) if fewer than ``min_parties`` contributed,
    so one party's vector is never decrypted. ``n_parties`` is the caller's own count (the
    counting service's record); it must equal the aggregate's count and its counter slots.
    Each result is within ``spec.error_bound(n_parties)`` (plus one float64 rounding) of the
    exact sum of the contributions.
    """
    owner = "decrypt_sum"
    if not isinstance(private_key, PrivateKey):
        raise ValueError(
            f"private_key must be a phe PaillierPrivateKey; got {type(private_key).__name__}."
        )
    if not isinstance(vector, EncryptedVector):
        raise ValueError(f"vector must be an EncryptedVector; got {type(vector).__name__}.")
    n_parties = check_int(n_parties, name="n_parties", owner=owner, low=1)
    min_parties = check_int(min_parties, name="min_parties", owner=owner, low=MIN_COHORT)
    spec = vector.spec
    if n_parties > spec.max_parties:
        raise ValueError(
            f"statistic {spec.statistic!r}: n_parties={n_parties} exceeds the headroom of "
            f"max_parties={spec.max_parties}."
        )
    if n_parties < min_parties or vector.n_contributions < min_parties:
        raise RefusedError(
            f"statistic {spec.statistic!r}: an aggregate of "
            f"{min(n_parties, vector.n_contributions)} contribution(s) is below the minimum "
            f"cohort of {min_parties}; refusing to decrypt."
        )
    if n_parties != vector.n_contributions:
        raise ProtocolError(
            f"statistic {spec.statistic!r}: the aggregate claims {vector.n_contributions} "
            f"contributions but n_parties={n_parties}."
        )
    if key_fingerprint(private_key.public_key) != vector.key_sha256:
        raise ProtocolError(f"statistic {spec.statistic!r}: encrypted under another key.")
    totals = [int(private_key.raw_decrypt(c)) for c in vector.ciphertexts]
    packing = Packing.for_key(spec, private_key.public_key)
    return packing.unpack(totals, vector.n_values, n_parties).reshape(vector.shape)


def _ciphertext_bytes(public_key: PublicKey) -> int:
    return (int(public_key.nsquare).bit_length() + 7) // 8


def _check_keys(data: Mapping[str, Any], expected: set[str], what: str) -> None:
    if not isinstance(data, Mapping) or set(data) != expected:
        raise ProtocolError(
            f"encrypted {what} must be an object with exactly the fields {sorted(expected)}."
        )
