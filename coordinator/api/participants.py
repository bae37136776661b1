"""Participant enrolment and the analysts' view of the federation."""

from __future__ import annotations

from fastapi import APIRouter

from fedclust.coordinator.api.deps import Analyst, CurrentParticipant, ServicesDep, error_responses
from fedclust.coordinator.db import ParticipantRecord
from fedclust.protocol.messages import Algorithm, Enrolment, ParticipantPublic

__all__ = ["router"]

router = APIRouter(tags=["participants"])


def _public(participant_id: str, record: ParticipantRecord | None) -> ParticipantPublic:
    if record is None:
        return ParticipantPublic(id=participant_id, enrolled=False)
    algorithms: list[Algorithm] = [a for a in record.allowed_algorithms]  # type: ignore[misc]
    return ParticipantPublic(
        id=participant_id,
        enrolled=True,
        n_features=record.n_features,
        allowed_algorithms=algorithms,
        enrolled_at=record.enrolled_at,
        identity_key=record.identity_key,
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
def list_participants(analyst: Analyst, services: ServicesDep) -> list[ParticipantPublic]:
    """Every participant of the configuration, enrolled or not."""
    enrolled = services.db.participants()
    return [_public(p.id, enrolled.get(p.id)) for p in services.settings.participants]
