"""Participant enrolment and the analysts' view of the federation."""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter, Request

from fedclust.coordinator.api.deps import Analyst, CurrentParticipant, ServicesDep, error_responses
from fedclust.coordinator.db import ParticipantRecord
from fedclust.protocol.messages import Algorithm, Enrolment, ParticipantPublic

__all__ = ["router"]

router = APIRouter(tags=["participants"])


def _public(
    participant_id: str, record: ParticipantRecord | None, last_contact: datetime | None = None
) -> ParticipantPublic:
    if record is None:
        return ParticipantPublic(id=participant_id, enrolled=False, last_contact=last_contact)
    algorithms: list[Algorithm] = [a for a in record.allowed_algorithms]  # type: ignore[misc]
    return ParticipantPublic(
        id=participant_id,
        enrolled=True,
        n_features=record.n_features,
        allowed_algorithms=algorithms,
        enrolled_at=record.enrolled_at,
        identity_key=record.identity_key,
        last_contact=last_contact,
    )


@router.post(
    "/participants/enrol",
    response_model=ParticipantPublic,
    operation_id="enrol_participant",
    summary="Enrol (or re-enrol) the calling participant",
    responses=error_responses(401, 403, 422),
)
def enrol_participant(
    body: Enrolment, participant: CurrentParticipant, services: ServicesDep
) -> ParticipantPublic:
    """Record the participant's schema width and the algorithms its policy allows."""
    return _public(participant.id, services.db.enrol(participant.id, body))


@router.get(
    "/participants",
    response_model=list[ParticipantPublic],
    operation_id="list_participants",
    summary="List the configured participants and their enrolment",
    responses=error_responses(401, 403),
)
def list_participants(
    request: Request, analyst: Analyst, services: ServicesDep
) -> list[ParticipantPublic]:
    """Every participant of the configuration, enrolled or not, with its last contact."""
    enrolled = services.db.participants()
    contacts: dict[str, datetime] = request.app.state.authenticator.last_contact
    return [
        _public(p.id, enrolled.get(p.id), contacts.get(p.id))
        for p in services.settings.participants
    ]
