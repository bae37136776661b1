"""Analyst routes: create, list, inspect, cancel jobs and fetch their results.

A job belongs to the analyst who created it: another analyst gets 404 for it (as if it did
not exist) and does not see it listed; an analyst with role "admin" sees every job.
"""

from __future__ import annotations

import secrets

from fastapi import APIRouter, HTTPException, Request, status
from fastapi.responses import PlainTextResponse

from fedclust.coordinator.api.deps import (
    Analyst,
    AnalystIdentity,
    Authenticator,
    JobId,
    ServicesDep,
    error_responses,
    unprocessable,
)
from fedclust.coordinator.db import JobRecord
from fedclust.coordinator.disclosures import ledger
from fedclust.protocol.algorithms.fed_distill_params import DistillParams
from fedclust.protocol.wire.messages import (
    DisclosureLedger,
    JobCreate,
    JobHistory,
    JobPublic,
    ResultDocument,
    draw_seed,
)
from fedclust.protocol.wire.result_tables import TABLES, TableName, table_csv

__all__ = ["router"]

router = APIRouter(tags=["jobs"])

def _public(services: ServicesDep, job: JobRecord) -> JobPublic:
    live = services.broker.progress(job.id) if job.state == "running" else None
    return JobPublic(
        id=job.id,
        state=job.state,
        spec=job.spec,
        created_at=job.created_at,
        updated_at=job.updated_at,
        progress=live if live is not None else job.progress,
        error=job.error,
        owner=job.owner,
    )


def _job(services: ServicesDep, job_id: str, analyst: AnalystIdentity) -> JobRecord:
    """The job, or 404 if it does not exist or is not this analyst's to see."""
    job = services.db.job(job_id)
    if job is None or not analyst.sees(job.owner):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"job {job_id!r} does not exist")
    return job


def _common_schema(services: ServicesDep, spec: JobCreate, members: Authenticator) -> int:
    """The participants' shared n_features, after checking each can take part (else 422)."""
    enrolled = services.db.participants()
    widths: dict[str, int] = {}
    for name in spec.participants:
        if not members.is_member(name):
            raise unprocessable(
                "participants", f"participant {name!r} is unknown to this coordinator"
            )
        record = enrolled.get(name)
        if record is None:
            raise unprocessable("participants", f"participant {name!r} has not enrolled")
        if spec.algorithm not in record.allowed_algorithms:
            raise unprocessable(
                "participants",
                f"participant {name!r} does not allow algorithm {spec.algorithm!r}",
            )
        if spec.protection == "masking" and record.identity_key is None:
            raise unprocessable(
                "protection",
                f"participant {name!r} enrolled without an identity key, which masking needs",
            )
        widths[name] = record.n_features
    if spec.protection != "none" and len(spec.participants) < 3:
        raise unprocessable(
            "protection",
            f"a {spec.protection!r} job needs at least 3 participants (with two, each would "
            "learn the other's statistics from the sum); use protection 'none' to accept that",
        )
    first = spec.participants[0]
    for name, width in widths.items():
        if width != widths[first]:
            raise unprocessable(
                "participants",
                f"participants do not share one schema: {first!r} has {widths[first]} "
                f"features, {name!r} has {width}",
            )
    params = spec.algorithm_params
    if isinstance(params, DistillParams) and params.public.shape[1] != widths[first]:
        raise unprocessable(
            "distill",
            f"the public set has {params.public.shape[1]} columns; the participants have "
            f"{widths[first]} features",
        )
    if spec.feature_names is not None and len(spec.feature_names) != widths[first]:
        raise unprocessable(
            "feature_names",
            f"the job names {len(spec.feature_names)} features; the participants have "
            f"{widths[first]}",
        )
    if spec.init is not None and len(spec.init[0]) != widths[first]:
        raise unprocessable(
            "init",
            f"init rows have {len(spec.init[0])} values; the participants have "
            f"{widths[first]} features",
        )
    return widths[first]


@router.post(
    "/jobs",
    status_code=status.HTTP_201_CREATED,
    response_model=JobPublic,
    operation_id="create_job",
    summary="Create and start a job",
    responses=error_responses(401, 403, 422),
)
def create_job(
    body: JobCreate, request: Request, analyst: Analyst, services: ServicesDep
) -> JobPublic:
    """Start a job over enrolled participants sharing one schema.

    Without a seed the coordinator draws one and stores it, so a resumed job replays the
    same computation.
    """
    n_features = _common_schema(services, body, request.app.state.authenticator)
    spec = body
    if spec.seed is None:
        spec = JobCreate.model_validate(
            {**body.model_dump(), "seed": draw_seed()}
        )
    job_id = f"job-{secrets.token_hex(8)}"
    record = services.db.create_job(job_id, spec, n_features=n_features, owner=analyst.name)
    services.runner.start(job_id)
    return _public(services, record)


@router.get(
    "/jobs",
    response_model=list[JobPublic],
    operation_id="list_jobs",
    summary="List jobs",
    responses=error_responses(401, 403),
)
def list_jobs(analyst: Analyst, services: ServicesDep) -> list[JobPublic]:
    """The caller's jobs (an admin's: every job), oldest first."""
    return [_public(services, job) for job in services.db.jobs() if analyst.sees(job.owner)]


@router.get(
    "/jobs/{job_id}",
    response_model=JobPublic,
    operation_id="get_job",
    summary="Get a job and its progress",
    responses=error_responses(401, 403, 404),
)
def get_job(job_id: JobId, analyst: Analyst, services: ServicesDep) -> JobPublic:
    """The job's state and progress (stage, K, round, shift, who answered / is awaited)."""
    return _public(services, _job(services, job_id, analyst))


@router.get(
    "/jobs/{job_id}/result",
    response_model=ResultDocument,
    operation_id="get_job_result",
    summary="Get a finished job's result document",
    responses=error_responses(401, 403, 404, 409),
)
def get_job_result(job_id: JobId, analyst: Analyst, services: ServicesDep) -> ResultDocument:
    """The result document; 409 until the job has succeeded."""
    return _result(services, job_id, analyst)


def _result(services: ServicesDep, job_id: str, analyst: AnalystIdentity) -> ResultDocument:
    """The finished job's result document, or 404 (:func:`_job`) or 409 (not succeeded)."""
    job = _job(services, job_id, analyst)
    if job.state != "succeeded" or job.result is None:
        reason = f": {job.error}" if job.error else ""
        raise HTTPException(
            status.HTTP_409_CONFLICT, f"job {job_id!r} is {job.state}{reason}; no result"
        )
    return job.result


@router.get(
    "/jobs/{job_id}/result/{table}.csv",
    response_class=PlainTextResponse,
    operation_id="get_job_result_table",
    summary="Get a table of a finished job's result as CSV",
    responses={
        200: {"content": {"text/csv": {}}, "description": "The table, header row first"},
        **error_responses(401, 403, 404, 409),
    },
)
def get_job_result_table(
    job_id: JobId, table: TableName, analyst: Analyst, services: ServicesDep
) -> PlainTextResponse:
    """``sweep.csv`` or ``centers.csv`` (``protocol.wire.result_tables``), exactly as
    ``fedclust job result ID --out DIR`` writes them; 409 until the job has succeeded."""
    frame = TABLES[table](_result(services, job_id, analyst))
    return PlainTextResponse(
        table_csv(frame), media_type="text/csv",
        headers={"Content-Disposition": f'attachment; filename="{job_id}-{table}.csv"'},
    )


@router.get(
    "/jobs/{job_id}/disclosures",
    response_model=DisclosureLedger,
    operation_id="get_job_disclosures",
    summary="Get what the coordinator learned in a job",
    responses=error_responses(401, 403, 404),
)
def get_job_disclosures(
    job_id: JobId, analyst: Analyst, services: ServicesDep
) -> DisclosureLedger:
    """The job's disclosure ledger: per participant and task kind, the fields the
    coordinator received (names, shapes, protection) and how many such messages, with
    plain-language notes on what the algorithm reveals. Available in every state."""
    job = _job(services, job_id, analyst)
    services.broker.flush()  # replies received so far are stored
    return ledger(job, services.db.tasks(job_id))


@router.get(
    "/jobs/{job_id}/history",
    response_model=JobHistory,
    operation_id="get_job_history",
    summary="Get a job's history: its tasks, when they and their answers were stored",
    responses=error_responses(401, 403, 404),
)
def get_job_history(job_id: JobId, analyst: Analyst, services: ServicesDep) -> JobHistory:
    """The job (state, progress, error) and every task handed out so far: participant, task
    number and kind, when the task and its answer were stored, or why it timed out. What
    the progress showed over time; no answer's content. Available in every state."""
    job = _job(services, job_id, analyst)
    services.broker.flush()  # replies received so far are stored
    return JobHistory(job=_public(services, job), tasks=services.db.task_history(job_id))


@router.post(
    "/jobs/{job_id}/cancel",
    response_model=JobPublic,
    operation_id="cancel_job",
    summary="Cancel a job",
    responses=error_responses(401, 403, 404, 409),
)
def cancel_job(job_id: JobId, analyst: Analyst, services: ServicesDep) -> JobPublic:
    """Cancel a pending or running job (idempotent); 409 once it has finished."""
    job = _job(services, job_id, analyst)
    if job.state in ("succeeded", "failed"):
        raise HTTPException(
            status.HTTP_409_CONFLICT, f"job {job_id!r} has already {job.state}"
        )
    services.runner.cancel(job_id)
    return _public(services, _job(services, job_id, analyst))
