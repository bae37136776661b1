"""Participant enrolment and the analysts' view of the federation."""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter, HTTPException, Request, status

from fedclust.coordinator.api.deps import Analyst, CurrentParticipant, ServicesDep, error_responses
from fedclust.coordinator.db import ParticipantRecord
from fedclust.protocol.wire.messages import Enrolment, ParticipantPublic

__all__ = ["router"]

router = APIRouter(tags=["participants"])


def _public(
    participant_id: str, record: ParticipantRecord | None, last_contact: datetime | None = None
) -> ParticipantPublic:
    if record is None:
        return ParticipantPublic(id=participant_id, enrolled=False, last_contact=last_contact)
    return ParticipantPublic(
        id=participant_id,
        enrolled=True,
        n_features=record.n_features,
        allowed_algorithms=list(record.allowed_algorithms),
        enrolled_at=record.enrolled_at,
        identity_key=record.identity_key,
        last_contact=last_contact,
    )


@router.post(
    "/participants/enrol",
    response_model=ParticipantPublic,
    operation_id="enrol_participant",
    summary="Enrol (or re-enrol) the calling participant",
    responses=error_responses(401, 403, 409, 422),
)
def enrol_participant(
    body: Enrolment, participant: CurrentParticipant, services: ServicesDep
) -> ParticipantPublic:
    """Record the participant's schema width and the algorithms its policy allows; a member
    that joined with an invitation must enrol with the identity key it registered then (409)."""
    joined = services.db.joined_identity_key(participant.id)
    if joined is not None and body.identity_key != joined:
        raise HTTPException(
            status.HTTP_409_CONFLICT,
            "the identity key differs from the one registered when this participant joined",
        )
    return _public(participant.id, services.db.enrol(participant.id, body))


@router.get(
    "/participants",
    response_model=list[ParticipantPublic],
    operation_id="list_participants",
    summary="List the federation's members and their enrolment",
    responses=error_responses(401, 403),
)
def list_participants(
    request: Request, analyst: Analyst, services: ServicesDep
) -> list[ParticipantPublic]:
    """Every current member (configured or joined, not revoked), enrolled or not, with its
    last contact."""
    enrolled = services.db.participants()
    authenticator = request.app.state.authenticator
    contacts: dict[str, datetime] = authenticator.last_contact
    return [
        _public(pid, enrolled.get(pid), contacts.get(pid))
        for pid in authenticator.participant_ids()
    ]
