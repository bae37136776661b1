"""Private primitives of pairwise masking (Bonawitz et al., CCS 2017; Bell et al., CCS 2020).

Nothing outside ``crypto/`` imports this module: :mod:`crypto.masking` is the recipe layer.

- Key agreement: X25519 (RFC 7748).
- Key derivation: HKDF-SHA256 (RFC 5869) with a fixed, non-empty salt and an ``info`` that
  packs the version prefix, the purpose, the job, the round, the statistic and the sorted pair of
  participant ids, each length-prefixed so no two contexts encode alike.
- Mask PRG: the AES-256-CTR keystream (zero IV; every derived key is used for one keystream
  only) read as little-endian uint64 with :func:`numpy.frombuffer`.
- Signatures: Ed25519 (RFC 8032) over the advertised public keys.
- AEAD: AES-256-GCM with a random 96-bit nonce; job, round, sender and recipient are the
  associated data.

Every verification failure raises the same bare :class:`IntegrityError`.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import os

import numpy as np
from cryptography.exceptions import InvalidSignature, InvalidTag
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from numpy.typing import NDArray

MASK_PREFIX = "fedclust/v2/mask"
SHARE_PREFIX = "fedclust/v2/share"
ADVERT_PREFIX = "fedclust/v2/advert"
COMMIT_PREFIX = "fedclust/v2/seed-commitment"
GRAPH_PREFIX = "fedclust/v2/graph"
AUDIT_PREFIX = "fedclust/v2/audit-line"
KEY_BYTES = 32
NONCE_BYTES = 12


class IntegrityError(Exception):
    """A signature, ciphertext, public key or reconstructed secret failed verification.

    Deliberately opaque: the message never says which check failed.
    """


def label(*parts: str | int | bytes) -> bytes:
    """Unambiguous encoding of a context: each part as a 4-byte length then its bytes.

    ``str`` is UTF-8, ``int`` (a round number) is 8 bytes big-endian, ``bytes`` as is.
    """
    out = bytearray()
    for part in parts:
        if type(part) is str:
            raw = part.encode("utf-8")
        elif type(part) is int:
            raw = part.to_bytes(8, "big", signed=False)
        elif isinstance(part, (int, np.integer)):  # bool, IntEnum, numpy ints: bytes(n) is n zeros
            raw = int(part).to_bytes(8, "big", signed=False)
        else:
            raw = bytes(part)  # type: ignore[arg-type]
        out += len(raw).to_bytes(4, "big")
        out += raw
    return bytes(out)


def _hkdf(ikm: bytes, *, salt: bytes, info: bytes) -> bytes:
    """HKDF-SHA256 (RFC 5869) with a 32-byte output: PRK = HMAC(salt, IKM), then
    OKM = T(1) = HMAC(PRK, info ‖ 0x01). Written with :func:`hmac.digest` (one C call each)
    because the secure sums derive tens of keys per participant and sum, and building a
    ``cryptography`` HKDF object costs ~10x the two hashes."""
    prk = hmac.digest(salt, ikm, "sha256")
    return hmac.digest(prk, info + b"\x01", "sha256")


# -- key agreement -------------------------------------------------------------------------------


def x25519_generate() -> X25519PrivateKey:
    return X25519PrivateKey.generate()


def x25519_from_bytes(raw: bytes) -> X25519PrivateKey:
    return X25519PrivateKey.from_private_bytes(raw)


def x25519_private_bytes(key: X25519PrivateKey) -> bytes:
    return key.private_bytes_raw()


def x25519_public_bytes(key: X25519PrivateKey) -> bytes:
    return key.public_key().public_bytes_raw()


def x25519_exchange(key: X25519PrivateKey, peer_public: bytes) -> bytes:
    """The X25519 shared secret; a malformed or low-order peer key is an IntegrityError."""
    try:
        return key.exchange(X25519PublicKey.from_public_bytes(peer_public))
    except ValueError:
        raise IntegrityError("integrity check failed") from None


# -- key derivation ------------------------------------------------------------------------------


def pair_mask_key(shared: bytes, *, job_id: str, round_no: int, a: str, b: str) -> bytes:
    """Key of the pairwise mask of ``a`` and ``b`` in one round (one keystream covers all
    the round's statistics, laid end to end)."""
    lo, hi = sorted((a, b))
    info = label(MASK_PREFIX, "pair", job_id, round_no, lo, hi)
    return _hkdf(shared, salt=MASK_PREFIX.encode(), info=info)


def self_mask_key(seed: bytes, *, job_id: str, round_no: int, owner: str) -> bytes:
    """Key of ``owner``'s self-mask in one round (from its round seed b_u)."""
    info = label(MASK_PREFIX, "self", job_id, round_no, owner)
    return _hkdf(seed, salt=MASK_PREFIX.encode(), info=info)


def share_encryption_key(shared: bytes, *, job_id: str, a: str, b: str) -> bytes:
    """AEAD key for the Shamir shares ``a`` and ``b`` exchange in one job (the round is in
    each message's associated data)."""
    lo, hi = sorted((a, b))
    info = label(SHARE_PREFIX, "aead-key", job_id, lo, hi)
    return _hkdf(shared, salt=SHARE_PREFIX.encode(), info=info)


def seed_commitment(seed: bytes, *, job_id: str, round_no: int, owner: str) -> bytes:
    """SHA-256 commitment to a 32-byte self-mask seed (hiding: the seed is uniformly random)."""
    return hashlib.sha256(label(COMMIT_PREFIX, job_id, round_no, owner, seed)).digest()


# -- mask PRG ------------------------------------------------------------------------------------


class Keystream:
    """AES-256-CTR keystreams (IV zero) of ``n_values`` uniform little-endian uint64 words.

    One instance reuses its buffers for every key: ``update_into`` writes straight into them
    (``update`` would allocate a bytes object, and fresh 8n-byte buffers page-fault — each
    several times slower than the cipher for 1e5 values). The array :meth:`words` returns is
    overwritten by the next call.
    """

    def __init__(self, n_values: int) -> None:
        self._n_bytes = 8 * n_values
        self._zeros = bytes(self._n_bytes)
        self._out = np.empty(self._n_bytes + 16, dtype=np.uint8)  # update_into: +block - 1
        self._words: NDArray[np.uint64] = (
            self._out[: self._n_bytes].view(np.dtype("<u8")).astype(np.uint64, copy=False)
        )

    def words(self, key: bytes) -> NDArray[np.uint64]:
        encryptor = Cipher(algorithms.AES(key), modes.CTR(bytes(16))).encryptor()
        encryptor.update_into(self._zeros, self._out.data)
        encryptor.finalize()
        return self._words


# -- signatures ----------------------------------------------------------------------------------


def ed25519_generate() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


def ed25519_from_bytes(raw: bytes) -> Ed25519PrivateKey:
    return Ed25519PrivateKey.from_private_bytes(raw)


def ed25519_private_bytes(key: Ed25519PrivateKey) -> bytes:
    return key.private_bytes_raw()


def ed25519_public_bytes(key: Ed25519PrivateKey) -> bytes:
    return key.public_key().public_bytes_raw()


def sign(key: Ed25519PrivateKey, message: bytes) -> bytes:
    return key.sign(message)


@functools.lru_cache(maxsize=1 << 16)
def _valid_signature(public: bytes, signature: bytes, message: bytes) -> bool:
    try:
        Ed25519PublicKey.from_public_bytes(public).verify(signature, message)
    except (InvalidSignature, ValueError):
        return False
    return True


def verify(public: bytes, signature: bytes, message: bytes) -> None:
    """Check an Ed25519 signature; any failure is the same IntegrityError.

    Verification is a pure function of its three byte strings, so a process remembers the
    outcome (LRU, 65,536 entries): the in-process simulator's P participants verify each
    advert once between them instead of P times.
    """
    if not _valid_signature(bytes(public), bytes(signature), bytes(message)):
        raise IntegrityError("integrity check failed")


# -- AEAD ----------------------------------------------------------------------------------------


def seal(key: bytes, plaintext: bytes, associated: bytes) -> bytes:
    """AES-256-GCM: random nonce || ciphertext || tag."""
    nonce = os.urandom(NONCE_BYTES)
    return nonce + AESGCM(key).encrypt(nonce, plaintext, associated)


def open_sealed(key: bytes, sealed: bytes, associated: bytes) -> bytes:
    """Inverse of :func:`seal`; a wrong key, nonce, tag or associated data is an IntegrityError."""
    if len(sealed) < NONCE_BYTES + 16:
        raise IntegrityError("integrity check failed")
    try:
        return AESGCM(key).decrypt(sealed[:NONCE_BYTES], sealed[NONCE_BYTES:], associated)
    except InvalidTag:
        raise IntegrityError("integrity check failed") from None
