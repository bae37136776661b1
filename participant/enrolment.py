"""Joining a federation with an invitation: ``fedclust participant enrol --invite INVITE``.

The organisation's ``participant.toml`` names its id and the coordinator but holds no token
yet. :func:`enrol` sends the one-time invite with the organisation's Ed25519 identity key
(created beside the config if absent) to ``POST /api/v1/participants/join`` and writes the
bearer token it receives to ``<state_dir>/participant.token`` (mode 0600), where
:class:`~participant.config.ParticipantConfig` reads it whenever ``[participant] token`` is
absent. The user's config file is never rewritten with a secret.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from pydantic import ValidationError

from fedclust.infra.private_files import write_private
from fedclust.infra.tls import TlsSettings
from fedclust.participant.config import (
    _ENV,
    ParticipantConfig,
    _from_mapping,
    enrolled_token_path,
)
from fedclust.participant.secure import load_identity
from fedclust.protocol.wire.admin import JoinRequest, JoinResponse
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


def join_target(path: str | os.PathLike[str]) -> JoinTarget:
    """Read ``participant.toml``, with the ``FEDCLUST_`` variables laid over it as for
    ``participant run``, for joining (``[participant] token`` may be absent).

    Raises:
        ValueError: the file is missing or malformed (the message starts with its path).
    """
    layered = _ENV.load(path, what="the participant's config file")
    config: ParticipantConfig = layered.build(
        lambda doc, base: _from_mapping(_pending(doc), base=base)
    )
    return JoinTarget(
        id=config.id, coordinator_url=config.coordinator_url,
        identity_path=config.identity_path, token_path=enrolled_token_path(config.state_dir),
        tls=config.tls,
    )


def _pending(doc: Mapping[str, Any]) -> dict[str, Any]:
    """``doc`` with the stand-in token (the config reader checks everything else)."""
    pending = copy.deepcopy(dict(doc))
    section = pending.get("participant")
    if isinstance(section, dict):
        section["token"] = _PENDING
    return pending


def enrol(
    target: JoinTarget, invite: str, *, transport: httpx.BaseTransport | None = None
) -> Path:
    """Redeem ``invite`` for ``target`` and store the token received; returns its file.

    Raises:
        ValueError: the invite is not of the form the coordinator issues.
        EnrolmentError: the coordinator refused (its status and detail) or did not answer.
    """
    identity = load_identity(target.identity_path)
    try:
        request = JoinRequest(
            participant_id=target.id, invite=invite.strip(),
            identity_key=b64(identity.public_bytes()),
        )
    except ValidationError:
        raise ValueError(
            "--invite must be the invite printed by `fedclust federation invite` "
            "(32-128 characters of letters, digits, '-' and '_')"
        ) from None
    with httpx.Client(
        base_url=target.coordinator_url + "/api/v1", transport=transport, timeout=30.0,
        verify=target.tls.httpx_verify(),
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
    return target.token_path


def _detail(response: httpx.Response) -> str:
    try:
        detail = response.json().get("detail", "")
    except (ValueError, AttributeError):
        detail = response.text
    if isinstance(detail, list):
        detail = "; ".join(str(d.get("msg", d)) for d in detail if isinstance(d, dict))
    return str(detail)[:300]
