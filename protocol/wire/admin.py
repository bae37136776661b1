"""Onboarding without restarts: invitations, joining, revocation and the admin trail.

An admin analyst asks the coordinator for an invitation naming a participant id; the
coordinator answers a one-time secret (it keeps only its SHA-256, with an expiry). The new
organisation redeems it once (:class:`JoinRequest`, no bearer token) with its Ed25519
identity key and receives its bearer token (:class:`JoinResponse`); the coordinator tells
the counting service the token's SHA-256 (:class:`MemberToken`). Revoking a member refuses
its token at both services at once. Every change is an :class:`AdminEvent` of the trail,
which never holds a secret.

What the admin hands the organisation is a self-contained invite (:class:`InviteBundle`, one
line ``fci1.<base64url JSON>``): the secret with the participant id, the coordinator's URL
and the SHA-256 of the CA certificate its TLS chain ends in, so the organisation enrols with
the invite alone and pins that CA. A bare secret (the format before bundles) still enrols
where ``participant.toml`` names the coordinator.
"""

from __future__ import annotations

import base64
import binascii
from datetime import datetime
from typing import Annotated, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fedclust.core.models import Sha256Hex
from fedclust.protocol.wire.messages import Identifier

__all__ = [
    "DEFAULT_INVITE_SECONDS",
    "MAX_INVITE_SECONDS",
    "AdminAction",
    "AdminEvent",
    "Invitation",
    "InvitationCreate",
    "InviteBundle",
    "JoinRequest",
    "JoinResponse",
    "MemberToken",
    "ServiceUrl",
]

#: An invitation's lifetime unless the admin says otherwise (24 h), and the longest (30 days).
DEFAULT_INVITE_SECONDS: Final = 24 * 3600
MAX_INVITE_SECONDS: Final = 30 * 24 * 3600

#: What the trail records: an invitation issued, redeemed (the member joined), a revocation.
AdminAction = Literal["invited", "enrolled", "revoked"]

_SECRET = Annotated[str, Field(min_length=32, max_length=128, pattern=r"^[A-Za-z0-9_-]+$")]
_PUBLIC_KEY = Annotated[
    str, Field(min_length=44, max_length=44, pattern=r"^[A-Za-z0-9+/]{43}=$",
               description="The organisation's Ed25519 public key (32 bytes, base64)"),
]
#: A service's http(s) URL, as an invite carries it (and ``coordinator.public_url`` must be).
ServiceUrl = Annotated[
    str, Field(min_length=8, max_length=2048, pattern=r"^https?://[^\s/]+")
]
#: The prefix of a bundled invite and its format version.
_BUNDLE_PREFIX: Final = "fci"
_BUNDLE_VERSION: Final = 1


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class InvitationCreate(_Strict):
    """Admin → coordinator: invite ``participant_id``, redeemable once within the lifetime."""

    participant_id: Identifier
    expires_in_seconds: int = Field(
        default=DEFAULT_INVITE_SECONDS, ge=60, le=MAX_INVITE_SECONDS,
        description="How long the invitation can be redeemed (60 s to 30 days)",
    )


class Invitation(_Strict):
    """Coordinator → admin: the one-time secret, shown once (the coordinator keeps its hash),
    with what a bundled invite (:class:`InviteBundle`) needs from the coordinator."""

    participant_id: Identifier
    invite: _SECRET
    expires_at: datetime
    coordinator_url: ServiceUrl | None = Field(
        default=None, description="The coordinator's configured public_url, if any",
    )
    ca_sha256: Sha256Hex | None = Field(
        default=None,
        description="SHA-256 (hex, of the DER) of the CA certificate the coordinator's TLS "
        "chain ends in; absent without HTTPS or when that CA is not among its [tls] files",
    )


class InviteBundle(_Strict):
    """The invite an organisation receives: everything enrolment needs besides its own
    config. Encoded as ``fci1.`` and the unpadded base64url of its JSON."""

    participant_id: Identifier
    invite: _SECRET
    coordinator_url: ServiceUrl
    ca_sha256: Sha256Hex | None = None

    def encode(self) -> str:
        """The one line to hand over."""
        body = base64.urlsafe_b64encode(self.model_dump_json(exclude_none=True).encode())
        return f"{_BUNDLE_PREFIX}{_BUNDLE_VERSION}.{body.decode('ascii').rstrip('=')}"

    @classmethod
    def decode(cls, text: str) -> InviteBundle | None:
        """The bundle in ``text``; None for a bare secret (the format before bundles).

        Raises:
            ValueError: ``text`` starts like a bundle but is damaged, or is of a newer
                format version than this one reads.
        """
        text = text.strip()
        if not text.startswith(_BUNDLE_PREFIX) or "." not in text:
            return None
        version, _, body = text.partition(".")
        if version != f"{_BUNDLE_PREFIX}{_BUNDLE_VERSION}":
            raise ValueError(
                f"the invite is of format {version!r}; this fedclust reads "
                f"{_BUNDLE_PREFIX}{_BUNDLE_VERSION}: upgrade fedclust"
            )
        try:
            raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
            return cls.model_validate_json(raw)
        except (binascii.Error, ValueError, ValidationError):
            raise ValueError(
                "the invite is damaged (copy the whole line `fedclust federation invite` "
                "printed)"
            ) from None


class JoinRequest(_Strict):
    """A new organisation → coordinator, without a bearer token: redeem an invitation."""

    participant_id: Identifier
    invite: _SECRET
    identity_key: _PUBLIC_KEY


class JoinResponse(_Strict):
    """Coordinator → the new member: its bearer token for both services (shown once)."""

    participant_id: Identifier
    token: _SECRET


class MemberToken(_Strict):
    """Coordinator → counting service: the SHA-256 of a member's new bearer token."""

    token_sha256: Sha256Hex


class AdminEvent(_Strict):
    """One entry of the admin trail: who did what to which participant, when."""

    seq: int = Field(ge=1)
    at: datetime
    actor: str = Field(
        max_length=80, description="'analyst:<name>' or 'participant:<id>' (for 'enrolled')"
    )
    action: AdminAction
    participant_id: Identifier
    expires_at: datetime | None = Field(
        default=None, description="The invitation's expiry (action 'invited' only)"
    )
