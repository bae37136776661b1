"""Joining a federation with an invitation: ``fedclust participant enrol --invite INVITE``.

The organisation's ``participant.toml`` names its id but holds no token yet. :func:`enrol`
sends the one-time invite with the organisation's Ed25519 identity key (created beside the
config if absent) to ``POST /api/v1/participants/join`` and writes the bearer token it
receives to ``<state_dir>/participant.token`` (mode 0600), where
:class:`~participant.config.ParticipantConfig` reads it whenever ``[participant] token`` is
absent. The user's config file is never rewritten with a secret.

A bundled invite (:class:`~protocol.wire.admin.InviteBundle`) also names the coordinator and
the SHA-256 of its CA certificate, so the config needs neither ``coordinator_url`` nor
``[tls] ca``: :func:`enrol` fetches the CA certificate (``GET /api/v1/ca``, over a connection
it does not yet trust), refuses it unless its SHA-256 is the invite's, then joins over a
connection verified against it, and records the URL and the CA in the state folder for
``participant run``. A bare secret (the format before bundles) enrols at the config's
``coordinator_url`` as before.
"""

from __future__ import annotations

import copy
import hmac
import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding
from pydantic import ValidationError

from fedclust.infra.private_files import write_private
from fedclust.infra.tls import TlsSettings, certificate_sha256
from fedclust.participant.config import (
    _ENV,
    ParticipantConfig,
    _from_mapping,
    enrolled_ca_path,
    enrolled_token_path,
    enrolled_url_path,
)
from fedclust.participant.secure import load_identity
from fedclust.protocol.wire.admin import InviteBundle, JoinRequest, JoinResponse
from fedclust.protocol.wire.secure import b64

__all__ = ["EnrolmentError", "JoinTarget", "enrol", "join_target"]

# Stands in for the token a config awaiting enrolment lacks, only to reuse the config
# reader for everything else; it never leaves join_target.
_PENDING = "pending-enrolment"


class EnrolmentError(RuntimeError):
    """The coordinator refused the invite, or could not be reached."""


@dataclass(frozen=True)
class JoinTarget:
    """What joining needs from ``participant.toml``: no token."""

    id: str
    coordinator_url: str
    identity_path: Path
    token_path: Path
    tls: TlsSettings
    state_dir: Path


def join_target(path: str | os.PathLike[str], *, invite: str | None = None) -> JoinTarget:
    """Read ``participant.toml``, with the ``FEDCLUST_`` variables laid over it as for
    ``participant run``, for joining with ``invite`` (``[participant] token`` may be absent;
    with a bundled invite ``coordinator_url`` too).

    Raises:
        ValueError: the file is missing or malformed (the message starts with its path), or
            the bundled invite is damaged, for another id or another coordinator.
    """
    bundle = InviteBundle.decode(invite) if invite is not None else None
    layered = _ENV.load(path, what="the participant's config file")
    config: ParticipantConfig = layered.build(
        lambda doc, base: _from_mapping(_pending(doc, bundle), base=base)
    )
    if bundle is not None and bundle.participant_id != config.id:
        raise ValueError(
            f"the invite is for participant {bundle.participant_id!r}, but participant.toml "
            f"names {config.id!r}"
        )
    if bundle is not None and config.coordinator_url != bundle.coordinator_url:
        raise ValueError(
            f"the invite names the coordinator {bundle.coordinator_url}, but participant.toml "
            f"names {config.coordinator_url}: remove [participant] coordinator_url (the "
            "invite's is recorded at enrolment) or make it the invite's"
        )
    return JoinTarget(
        id=config.id, coordinator_url=config.coordinator_url,
        identity_path=config.identity_path, token_path=enrolled_token_path(config.state_dir),
        tls=config.tls, state_dir=config.state_dir,
    )


def _pending(doc: Mapping[str, Any], bundle: InviteBundle | None) -> dict[str, Any]:
    """``doc`` with the stand-in token and, from a bundled invite, the coordinator's URL where
    the file names none (the config reader checks everything else)."""
    pending = copy.deepcopy(dict(doc))
    section = pending.get("participant")
    if isinstance(section, dict):
        section["token"] = _PENDING
        if bundle is not None:
            section.setdefault("coordinator_url", bundle.coordinator_url)
    return pending


def enrol(
    target: JoinTarget, invite: str, *, transport: httpx.BaseTransport | None = None
) -> Path:
    """Redeem ``invite`` for ``target`` and store the token received; returns its file. A
    bundled invite's CA is pinned first (the module docstring), and its URL and CA recorded
    in the state folder.

    Raises:
        ValueError: the invite is not of the form ``fedclust federation invite`` prints, or is
            a bundle for another id or coordinator than ``target``.
        EnrolmentError: the coordinator refused (its status and detail) or did not answer, or
            its CA certificate is not the one the invite pins.
    """
    bundle = InviteBundle.decode(invite)
    secret = invite.strip() if bundle is None else bundle.invite
    if bundle is not None and (bundle.participant_id, bundle.coordinator_url) != (
        target.id, target.coordinator_url
    ):
        raise ValueError("the invite is not the one the join target was read with")
    identity = load_identity(target.identity_path)
    try:
        request = JoinRequest(
            participant_id=target.id, invite=secret, identity_key=b64(identity.public_bytes()),
        )
    except ValidationError:
        raise ValueError(
            "--invite must be the invite printed by `fedclust federation invite` (one line: "
            "fci1. and its contents, or, from an earlier version, 32-128 characters of "
            "letters, digits, '-' and '_')"
        ) from None
    pinned = None
    verify = target.tls.httpx_verify()
    if bundle is not None and bundle.ca_sha256 is not None:
        pinned = _pinned_ca(target, bundle.ca_sha256, transport)
        verify = _trusting(pinned, target.tls)
    with httpx.Client(
        base_url=target.coordinator_url + "/api/v1", transport=transport, timeout=30.0,
        verify=verify,
    ) as client:
        try:
            response = client.post("/participants/join", json=request.model_dump(mode="json"))
        except httpx.TransportError as exc:
            raise EnrolmentError(
                f"cannot reach the coordinator at {target.coordinator_url} "
                f"({type(exc).__name__})"
            ) from None
    if response.status_code != 201:
        raise EnrolmentError(
            f"the coordinator refused the enrolment of {target.id!r}: HTTP "
            f"{response.status_code} {_detail(response)}"
        )
    try:
        joined = JoinResponse.model_validate_json(response.content)
    except ValidationError:
        raise EnrolmentError("the coordinator's answer to the enrolment is malformed") from None
    write_private(target.token_path, joined.token + "\n")  # 0600, folders 0700
    if bundle is not None:
        write_private(enrolled_url_path(target.state_dir), bundle.coordinator_url + "\n")
    if pinned is not None:
        write_private(enrolled_ca_path(target.state_dir), pinned)
    return target.token_path


def _pinned_ca(
    target: JoinTarget, ca_sha256: str, transport: httpx.BaseTransport | None
) -> str:
    """The coordinator's CA certificate (PEM), fetched over a connection not yet verified
    and accepted only if its SHA-256 is ``ca_sha256``."""
    url = target.coordinator_url
    if not url.startswith("https://"):
        raise EnrolmentError(
            f"the invite pins a CA certificate but names the plain-HTTP URL {url}: ask the "
            "admin for an invite with the coordinator's https:// URL"
        )
    unverified = ssl.create_default_context()
    unverified.check_hostname = False
    unverified.verify_mode = ssl.CERT_NONE  # the fingerprint below is the check
    if target.tls.certificate is not None:  # under mutual TLS the handshake needs it
        unverified.load_cert_chain(target.tls.certificate, target.tls.key)
    with httpx.Client(
        base_url=url + "/api/v1", transport=transport, timeout=30.0, verify=unverified
    ) as client:
        try:
            response = client.get("/ca")
        except httpx.TransportError as exc:
            raise EnrolmentError(
                f"cannot reach the coordinator at {url} ({type(exc).__name__})"
            ) from None
    try:
        served = x509.load_pem_x509_certificate(response.content)
    except ValueError:
        served = None
    if response.status_code != 200 or served is None:
        raise EnrolmentError(
            f"the coordinator at {url} serves no CA certificate (HTTP "
            f"{response.status_code}), but the invite pins one: is {url} the coordinator "
            "that issued the invite?"
        )
    got = certificate_sha256(served)
    if not hmac.compare_digest(got, ca_sha256):
        raise EnrolmentError(
            f"refusing the coordinator at {url}: its CA certificate has SHA-256 {got}, but "
            f"the invite pins {ca_sha256}. Either the invite was altered or {url} is not the "
            "coordinator that issued it; nothing was sent. Ask the admin for a new invite"
        )
    return served.public_bytes(Encoding.PEM).decode("ascii")


def _trusting(ca_pem: str, tls: TlsSettings) -> ssl.SSLContext:
    """A client context that trusts only ``ca_pem`` and presents ``tls``'s certificate."""
    context = ssl.create_default_context(cadata=ca_pem)
    if tls.certificate is not None:
        context.load_cert_chain(tls.certificate, tls.key)
    return context


def _detail(response: httpx.Response) -> str:
    try:
        detail = response.json().get("detail", "")
    except (ValueError, AttributeError):
        detail = response.text
    if isinstance(detail, list):
        detail = "; ".join(str(d.get("msg", d)) for d in detail if isinstance(d, dict))
    return str(detail)[:300]
