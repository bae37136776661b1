"""Bearer credentials: random tokens, and the SHA-256 digests services keep instead of them.

A service stores only ``token_sha256(token)``; presenting the token proves the credential.
Comparisons use :func:`hmac.compare_digest` over every stored digest, so timing reveals
neither which credential matched nor how much of a guess was right.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Iterable
from typing import TypeVar

from fedclust.core.validation import SHA256_HEX_PATTERN

__all__ = ["check_sha256_hex", "identify", "new_token", "token_sha256"]

_SHA256_HEX = re.compile(SHA256_HEX_PATTERN)
T = TypeVar("T")


def new_token() -> str:
    """A fresh bearer token: 32 bytes from the OS CSPRNG, URL-safe base64, drawn again when it
    starts with "-" (1 in 64), so that it can follow a flag on a command line
    (``fedclust participant enrol --invite TOKEN``) without being read as one."""
    while True:
        token = secrets.token_urlsafe(32)
        if not token.startswith("-"):
            return token


def token_sha256(token: str) -> str:
    """The lowercase SHA-256 hex digest under which services store a bearer token."""
    if not token:
        raise ValueError("token must be a non-empty string.")
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def check_sha256_hex(value: object, *, where: str) -> str:
    """``value`` as a lowercase SHA-256 hex digest, or a ValueError naming ``where``."""
    if not isinstance(value, str) or not value:
        raise ValueError(f"{where} must be a non-empty SHA-256 hex digest (64 hex digits).")
    digest = value.lower()
    if not _SHA256_HEX.fullmatch(digest):
        raise ValueError(
            f"{where} must be a SHA-256 hex digest (64 hexadecimal digits), "
            "not a token or other text."
        )
    return digest


def identify(token: str, credentials: Iterable[tuple[str, T]]) -> T | None:
    """The identity whose stored digest matches ``token``; every digest is compared."""
    digest = token_sha256(token) if token else ""
    found: T | None = None
    for stored, identity in credentials:
        if hmac.compare_digest(stored, digest) and digest:
            found = identity
    return found
