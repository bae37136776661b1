"""Secure-sum messages between their crypto objects (``crypto.masking``) and the wire models.

Keys, signatures, ciphertexts and shares travel as base64 text; the job id (and the round of
a share) is not repeated in each wire object but bound back on receipt (it is part of what is
signed and of the AEAD associated data, so a message moved to another job or round fails its
check).
"""

from __future__ import annotations

import base64
import binascii

from phe.paillier import PaillierPublicKey

from fedclust.core.errors import ProtocolError, RefusedError
from fedclust.crypto.masking import EncryptedShare, KeyAdvert
from fedclust.crypto.paillier import key_fingerprint
from fedclust.protocol.wire import messages as msg

__all__ = [
    "b64", "encrypted_share", "paillier_key_message", "public_key_of", "raw", "sealed_share",
    "setup_job_id", "signed_keys", "to_key_advert",
]


def b64(data: bytes) -> str:
    """Base64 text of bytes."""
    return base64.b64encode(data).decode("ascii")


def raw(text: str, what: str) -> bytes:
    """The bytes of base64 ``text``; malformed text is refused, naming ``what``."""
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise RefusedError(f"{what} is not valid base64: refused.") from None


def setup_job_id(job_id: str, setup: int) -> str:
    """The id every key and message of key setup ``setup`` of a job is bound to."""
    return job_id if setup == 1 else f"{job_id}#setup-{setup}"


def signed_keys(advert: KeyAdvert) -> msg.SignedKeys:
    """A key advert in its wire form."""
    return msg.SignedKeys(
        sender=advert.sender,
        enc_public=b64(advert.enc_public),
        mask_public=b64(advert.mask_public),
        nonce=b64(advert.nonce),
        signature=b64(advert.signature),
    )


def to_key_advert(wire: msg.SignedKeys, *, job_id: str) -> KeyAdvert:
    """The key advert of a wire message, bound to ``job_id`` (signed with it)."""
    return KeyAdvert(
        job_id, wire.sender,
        raw(wire.enc_public, "enc_public"),
        raw(wire.mask_public, "mask_public"),
        raw(wire.nonce, "nonce"),
        raw(wire.signature, "signature"),
    )


def sealed_share(share: EncryptedShare) -> msg.SealedShare:
    """A sealed seed share in its wire form."""
    return msg.SealedShare(
        sender=share.sender, recipient=share.recipient, ciphertext=b64(share.ciphertext)
    )


def encrypted_share(wire: msg.SealedShare, *, job_id: str, round_no: int) -> EncryptedShare:
    """The sealed share of a wire message, bound to ``job_id`` and the round (AEAD data)."""
    return EncryptedShare(
        job_id, round_no, wire.sender, wire.recipient, raw(wire.ciphertext, "ciphertext")
    )


def paillier_key_message(public_key: PaillierPublicKey) -> msg.PaillierKey:
    """The wire form of a public key: ``n`` big-endian in base64 and its fingerprint."""
    n = int(public_key.n)
    return msg.PaillierKey(
        n=base64.b64encode(n.to_bytes((n.bit_length() + 7) // 8, "big")).decode("ascii"),
        key_sha256=key_fingerprint(public_key),
    )


def public_key_of(key: msg.PaillierKey) -> PaillierPublicKey:
    """The phe public key of a wire key; ProtocolError if its fingerprint does not match."""
    try:
        n = int.from_bytes(base64.b64decode(key.n, validate=True), "big")
    except ValueError:
        raise ProtocolError("the Paillier public key's modulus is not valid base64.") from None
    if n < 3 or n % 2 == 0:
        raise ProtocolError("the Paillier public key's modulus is not an odd integer > 1.")
    public_key = PaillierPublicKey(n)
    if key_fingerprint(public_key) != key.key_sha256:
        raise ProtocolError("the Paillier public key does not match its fingerprint.")
    return public_key
