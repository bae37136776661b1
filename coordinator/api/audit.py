"""Receipts for participants' audit logs: heads in, receipts out (``protocol.wire.audit``)."""

from __future__ import annotations

import base64
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, status

from fedclust.coordinator.api.deps import (
    CurrentParticipant,
    Identity,
    ParticipantId,
    ParticipantIdentity,
    ServicesDep,
    authenticate,
    error_responses,
)
from fedclust.coordinator.db import AuditHeadRecord, AuditHeadRefusedError
from fedclust.crypto.masking import audit_signature_valid
from fedclust.protocol.wire.audit import AuditHead, AuditReceipt

__all__ = ["router"]

router = APIRouter(tags=["audit"])


def _receipt(record: AuditHeadRecord) -> AuditReceipt:
    return AuditReceipt(
        participant=record.participant, seq=record.seq, line_sha256=record.line_sha256,
        signature=record.signature, received_at=record.received_at,
    )


@router.post(
    "/audit/heads",
    response_model=AuditReceipt,
    operation_id="anchor_audit_head",
    summary="Anchor the calling participant's audit-log head",
    responses=error_responses(401, 403, 409, 422),
)
def anchor_audit_head(
    body: AuditHead, participant: CurrentParticipant, services: ServicesDep
) -> AuditReceipt:
    """Keep the head as a receipt: 422 unless it is signed by the participant's registered
    identity key, 409 if it is behind (or contradicts) a head received before."""
    record = services.db.participants().get(participant.id)
    if record is None or record.identity_key is None:
        raise HTTPException(
            status.HTTP_409_CONFLICT, "enrol with an identity key before anchoring an audit log"
        )
    signature = base64.b64decode(body.signature)
    public = base64.b64decode(record.identity_key)
    if not audit_signature_valid(public, signature, "head", body.seq, body.line_sha256):
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            "the audit head is not signed by the participant's registered identity key",
        )
    try:
        stored = services.db.add_audit_head(
            participant.id, seq=body.seq, line_sha256=body.line_sha256,
            signature=body.signature,
        )
    except AuditHeadRefusedError as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from None
    return _receipt(stored)


@router.get(
    "/audit/heads/{participant_id}",
    response_model=list[AuditReceipt],
    operation_id="list_audit_receipts",
    summary="A participant's audit-log receipts (an analyst, or that participant)",
    responses=error_responses(401, 403, 422),
)
def list_audit_receipts(
    participant_id: ParticipantId,
    identity: Annotated[Identity, Depends(authenticate)],
    services: ServicesDep,
) -> list[AuditReceipt]:
    """Every head the participant anchored, oldest first, for an auditor to compare (the
    caller's certificate bound to its token by :func:`authenticate`)."""
    if isinstance(identity, ParticipantIdentity) and identity.id != participant_id:
        raise HTTPException(status.HTTP_403_FORBIDDEN, "a participant reads only its own receipts")
    return [_receipt(r) for r in services.db.audit_heads(participant_id)]
