"""Participant routes for work: fetch the next task (long poll), fetch a task's blobs, submit
a contribution — or submit one and fetch the next task in one request (``answer``).

The long poll waits on the event loop, not in a worker thread: the broker calls back when a
task arrives for the participant, so hundreds of participants can wait at once.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Query, Response, status

from fedclust.coordinator.api.deps import (
    CurrentParticipant,
    Services,
    ServicesDep,
    error_responses,
    unprocessable,
)
from fedclust.coordinator.broker import Broker, ContributionRejectedError
from fedclust.protocol.wire.messages import (
    MAX_WIRE_INT,
    Contribution,
    ContributionReceipt,
    Task,
)

__all__ = ["router"]

router = APIRouter(tags=["tasks"])


JobId = Annotated[str, Path(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")]
TaskId = Annotated[int, Path(ge=0, le=MAX_WIRE_INT, description="The task's number")]
Wait = Annotated[float, Query(ge=0, le=60, description="Seconds to wait for a task")]
Blobs = Annotated[
    bool,
    Query(description='Replace each long string of the task by {"$blob": "<sha256>"}, to be '
                      "fetched from /blobs/{sha256} (once, then cached)"),
]
_NEXT_TASK_RESPONSES: dict[int | str, dict[str, Any]] = {
    204: {"description": "No task arrived within `wait` seconds"},
}


async def _long_poll(broker: Broker, participant: str, wait: float, blobs: bool) -> Response:
    """The participant's oldest open task, waiting up to ``wait`` seconds on the event loop
    (the broker calls back when a task arrives; a future and a timer, no task per poll);
    204 without one."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    while True:
        arrived: asyncio.Future[None] = loop.create_future()

        def wake(arrived: asyncio.Future[None] = arrived) -> None:
            loop.call_soon_threadsafe(_settle, arrived)

        body = broker.poll(participant, blobs=blobs, wake=wake)
        if body is not None:
            return Response(content=body, media_type="application/json")
        remaining = deadline - loop.time()
        timer = None
        try:
            if remaining <= 0 or broker.closed:
                return Response(status_code=status.HTTP_204_NO_CONTENT)
            timer = loop.call_later(remaining, _settle, arrived)
            await arrived
        finally:
            if timer is not None:
                timer.cancel()
            broker.unwatch(participant, wake)
        if loop.time() >= deadline:
            return Response(status_code=status.HTTP_204_NO_CONTENT)


def _settle(future: asyncio.Future[None]) -> None:
    """Wake a waiting long poll (once: by the broker or its timer, whichever comes first)."""
    if not future.done():
        future.set_result(None)


def _accept(services: Services, participant: str, job_id: str, task_id: int,
            body: Contribution) -> None:
    """Hand a contribution to the broker; the HTTP error when it is refused."""
    if body.job_id != job_id or body.task_id != task_id:
        raise unprocessable("job_id", "the body's job_id and task_id must match the path")
    try:
        services.broker.submit(participant, body)
    except ContributionRejectedError as exc:
        if exc.status_code == status.HTTP_422_UNPROCESSABLE_CONTENT:
            raise unprocessable("reply", exc.message) from None
        raise HTTPException(exc.status_code, exc.message) from None


@router.get(
    "/tasks/next",
    response_model=Task,
    operation_id="next_task",
    summary="Fetch this participant's oldest open task (long poll)",
    responses={**_NEXT_TASK_RESPONSES, **error_responses(401, 403, 422)},
)
async def next_task(
    participant: CurrentParticipant, services: ServicesDep, wait: Wait = 0, blobs: Blobs = False
) -> Task | Response:
    """The oldest open task of the calling participant, or 204 after ``wait`` seconds."""
    return await _long_poll(services.broker, participant.id, wait, blobs)


@router.get(
    "/blobs/{sha256}",
    response_class=Response,
    operation_id="get_blob",
    summary="Fetch a large value of a task handed to this participant",
    responses={
        200: {"content": {"application/octet-stream": {}},
              "description": "The UTF-8 bytes whose SHA-256 is `sha256`"},
        **error_responses(401, 403, 404, 422),
    },
)
def get_blob(
    sha256: Annotated[str, Path(pattern="^[0-9a-f]{64}$")],
    participant: CurrentParticipant,
    services: ServicesDep,
) -> Response:
    """A blob referred to by a task this participant fetched with ``blobs=true``."""
    data = services.broker.blob(participant.id, sha256)
    if data is None:
        raise HTTPException(
            status.HTTP_404_NOT_FOUND, f"no task of this participant refers to blob {sha256}"
        )
    return Response(content=data, media_type="application/octet-stream")


@router.post(
    "/jobs/{job_id}/tasks/{task_id}/contribution",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=ContributionReceipt,
    operation_id="submit_contribution",
    summary="Answer a task",
    responses=error_responses(401, 403, 404, 409, 422),
)
async def submit_contribution(
    job_id: JobId,
    task_id: TaskId,
    body: Contribution,
    participant: CurrentParticipant,
    services: ServicesDep,
) -> ContributionReceipt:
    """Accept the calling participant's answer to one of its open tasks.

    A rejected contribution changes nothing; a corrected one may follow while the task is
    open. (The broker only checks and records it in memory, so this runs on the event loop.)
    """
    _accept(services, participant.id, job_id, task_id, body)
    return ContributionReceipt(job_id=job_id, task_id=task_id)


@router.post(
    "/jobs/{job_id}/tasks/{task_id}/answer",
    response_model=Task,
    operation_id="answer_task",
    summary="Answer a task and fetch the next one (long poll)",
    responses={**_NEXT_TASK_RESPONSES, **error_responses(401, 403, 404, 409, 422)},
)
async def answer_task(
    job_id: JobId,
    task_id: TaskId,
    body: Contribution,
    participant: CurrentParticipant,
    services: ServicesDep,
    wait: Wait = 0,
    blobs: Blobs = False,
) -> Task | Response:
    """``submit_contribution`` then ``next_task`` in one request: the contribution is
    accepted (or refused with the same errors, fetching nothing), then the participant's
    oldest open task is returned, or 204 after ``wait`` seconds."""
    _accept(services, participant.id, job_id, task_id, body)
    return await _long_poll(services.broker, participant.id, wait, blobs)
