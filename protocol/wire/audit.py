"""Anchoring a participant's audit log at the coordinator (see ``participant.audit``).

The agent sends its log's head now and then: the number of its last line and the SHA-256 of
that line's text, signed with its identity key over ``("head", seq, line_sha256)``. The
coordinator checks the signature against the key registered at enrolment, refuses a head
behind one it already holds, and keeps each as a receipt an auditor can compare the log with.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from fedclust.core.models import Sha256Hex
from fedclust.protocol.wire.messages import Identifier

__all__ = ["AuditHead", "AuditReceipt"]

_SIGNATURE = Annotated[
    str, Field(min_length=88, max_length=88, pattern=r"^[A-Za-z0-9+/]{86}==$",
               description="Ed25519 signature (64 bytes, base64)"),
]
_LINE = Annotated[int, Field(ge=1, le=2**53, description="a line number of the log (1-based)")]


class AuditHead(BaseModel):
    """Participant → coordinator: the log's last line number and the SHA-256 of its text."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seq: _LINE
    line_sha256: Sha256Hex
    signature: _SIGNATURE


class AuditReceipt(BaseModel):
    """What the coordinator holds of a participant's audit log: one head as it arrived."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    participant: Identifier
    seq: _LINE
    line_sha256: Sha256Hex
    signature: _SIGNATURE
    received_at: datetime
