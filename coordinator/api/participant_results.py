"""Participant route: a member of a finished job fetches its centers to label its own rows.

``fedclust participant assign`` computes labels and memberships locally from this answer;
nothing data-dependent is sent. Only a participant on the job's roster gets an answer: any
other caller gets the same 404 as for a job that does not exist, so a participant cannot
learn which jobs others take part in. The per-participant local choices of K (``local_k``
and the rule of thumb drawn from them) are left out: a member needs the centers, not what
the other members reported.
"""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, status

from fedclust.coordinator.api.deps import CurrentParticipant, ServicesDep, error_responses
from fedclust.protocol.wire.assignment import ParticipantResult

__all__ = ["router"]

router = APIRouter(tags=["participants"])


@router.get(
    "/participants/jobs/{job_id}/result",
    response_model=ParticipantResult,
    operation_id="get_participant_job_result",
    summary="Get a finished job's centers as one of its participants",
    responses=error_responses(401, 403, 404, 409),
)
def get_participant_job_result(
    job_id: str, participant: CurrentParticipant, services: ServicesDep
) -> ParticipantResult:
    """The job's result document and fuzzifier m, for a participant on its roster (404
    otherwise); 409 until the job has succeeded or when it has no centers (model-based)."""
    job = services.db.job(job_id)
    if job is None or participant.id not in job.spec.participants:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"job {job_id!r} does not exist")
    if job.state != "succeeded" or job.result is None:
        raise HTTPException(
            status.HTTP_409_CONFLICT, f"job {job_id!r} is {job.state}; no result"
        )
    if not job.result.sweep:
        raise HTTPException(
            status.HTTP_409_CONFLICT,
            f"job {job_id!r} ran {job.spec.algorithm!r}, whose result has no centers",
        )
    result = job.result.model_copy(update={"local_k": None, "k_range_rule_of_thumb": None})
    return ParticipantResult(job_id=job.id, m=job.spec.m, result=result)
