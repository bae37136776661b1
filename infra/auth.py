"""Bearer-token authentication as both services do it, and their participants' credentials.

- :class:`ParticipantCredential`: a configured participant's id and its token's SHA-256
  (tokens themselves are never stored: :func:`crypto.tokens.token_sha256`);
- :func:`bound_caller`: the principal a request authenticates as: the holder of a known
  bearer token or, where ``[tls] participant_auth = "certificate"``, the member its client
  certificate alone names (:func:`infra.tls.certified_member`); 401 (``WWW-Authenticate:
  Bearer``) otherwise. Under mutual TLS a token counts only with a certificate naming its
  holder (:func:`infra.tls.certificate_mismatch`), else 403. The routes and the body guard
  (before a body is read) both ask it, so tokens are checked once, alike, everywhere.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, Protocol, TypeVar

from fastapi import HTTPException, status
from pydantic import ConfigDict, with_config

from fedclust.core.validation import IDENTIFIER_TEXT, is_identifier
from fedclust.crypto.tokens import check_sha256_hex
from fedclust.infra.body_limit import bearer_token
from fedclust.infra.tls import TlsSettings, certificate_mismatch, certified_member

__all__ = ["ParticipantCredential", "ParticipantIdentity", "Principal", "bound_caller"]

_CHALLENGE: Final = {"WWW-Authenticate": "Bearer"}


@with_config(ConfigDict(extra="forbid"))
@dataclass(frozen=True)
class ParticipantCredential:
    """A participant allowed to enrol or report: its id (an identifier,
    :func:`core.validation.is_identifier`) and the SHA-256 of its token (lowercased): a
    ``[[participants]]`` entry of a service's config file (unknown keys refused). A subclass
    may name the digest otherwise (:attr:`DIGEST_WHERE`, with ``{id!r}``)."""

    DIGEST_WHERE: ClassVar[str] = "participant {id!r}: token_sha256"

    id: str
    token_sha256: str = field(repr=False)

    def __post_init__(self) -> None:
        if not is_identifier(self.id):
            raise ValueError(f"participant id must be {IDENTIFIER_TEXT}.")
        where = self.DIGEST_WHERE.format(id=self.id)
        object.__setattr__(self, "token_sha256", check_sha256_hex(self.token_sha256, where=where))


class Principal(Protocol):
    """An authenticated caller."""

    def certificate_name(self, tls: TlsSettings) -> tuple[str, str]:
        """The role and the name its client certificate must carry under mutual TLS."""
        ...


@dataclass(frozen=True)
class ParticipantIdentity:
    """An authenticated participant; under mutual TLS its certificate must carry ``id``."""

    id: str

    def certificate_name(self, tls: TlsSettings) -> tuple[str, str]:
        return "participant", self.id


P = TypeVar("P", bound=Principal)


def bound_caller(
    scope: Mapping[str, Any],
    *,
    tls: TlsSettings,
    identify: Callable[[str], P | None],
    is_member: Callable[[str], bool],
    missing: str,
    unknown: str,
) -> P | ParticipantIdentity:
    """The principal of the request ``scope``, its token bound to its certificate.

    ``identify`` maps a presented token to its holder (None: unknown); ``is_member`` says
    whether an id is a current member's. 401 with detail ``missing`` (no token, no certificate
    standing for one) or ``unknown`` (an unknown token); 403 with a certificate naming anyone
    but the token's holder.
    """
    token = bearer_token(scope.get("headers", []))
    if token is None:
        certified = certified_member(scope, tls=tls, is_member=is_member)
        if certified is None:
            raise HTTPException(status.HTTP_401_UNAUTHORIZED, missing, headers=_CHALLENGE)
        return ParticipantIdentity(certified)
    found = identify(token)
    if found is None:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, unknown, headers=_CHALLENGE)
    role, name = found.certificate_name(tls)
    mismatch = certificate_mismatch(scope, name, tls=tls, role=role)
    if mismatch is not None:
        raise HTTPException(status.HTTP_403_FORBIDDEN, mismatch)
    return found
