"""Participant routes for work: fetch the next task (long poll), fetch a task's blobs, submit
a contribution — or submit one and fetch the next task in one request (``answer``).

The long poll waits on the event loop, not in a worker thread: the broker calls back when a
task arrives for the participant, so hundreds of participants can wait at once.

``next_task`` and ``answer_task``, which every participant calls once per round, have fast
paths (:mod:`coordinator.api.fast_path`): a request in its plain form (the parameters as the
agents send them, a JSON contribution parsed once from its bytes) is answered without
FastAPI's dependency solving, by the same functions; any other goes to FastAPI's handler.
``answer_task`` is registered first: a router tries its routes in order (twice per request:
to match, then to pick), and that is the route of every round.
"""

from __future__ import annotations

import asyncio
import re
import threading
import weakref
from typing import Annotated, Any, ClassVar, Final

from fastapi import APIRouter, HTTPException, Path, Query, Request, Response, status
from pydantic import ValidationError

from fedclust.coordinator.api.deps import (
    CurrentParticipant,
    JobId,
    Services,
    ServicesDep,
    error_responses,
    get_services,
    participant_caller,
    unprocessable,
)
from fedclust.coordinator.api.fast_path import (
    FastPathRoute,
    body_bytes,
    canonical_query,
    fast_path,
    json_body,
)
from fedclust.coordinator.broker import Broker, ContributionRejectedError
from fedclust.core.validation import SHA256_HEX_PATTERN, is_identifier
from fedclust.protocol.wire.messages import (
    MAX_WIRE_INT,
    Contribution,
    ContributionReceipt,
    Task,
)

__all__ = ["router"]

router = APIRouter(tags=["tasks"], route_class=FastPathRoute)


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
# The plain forms the fast paths take (a subset of what the declarations above accept, read
# alike): a job id (:func:`core.validation.is_identifier`), a task id without leading zeros,
# ``wait`` as a decimal of at most two integer digits (at most 60), ``blobs`` as true or false.
_TASK_ID: Final = re.compile(r"0|[1-9][0-9]{0,15}")
_WAIT: Final = re.compile(r"(0|[1-9][0-9]?)(\.[0-9]{1,6})?")
_BOOLEANS: Final = {"true": True, "false": False}


def _plain_poll(request: Request) -> tuple[float, bool] | None:
    """``wait`` and ``blobs`` of a request's query in their plain forms (defaults 0 and
    false), or None."""
    query = canonical_query(request.scope.get("query_string", b""))
    if query is None:
        return None
    wait_text, blobs_text = query.get("wait", "0"), query.get("blobs", "false")
    if _WAIT.fullmatch(wait_text) is None or blobs_text not in _BOOLEANS:
        return None
    wait = float(wait_text)
    return (wait, _BOOLEANS[blobs_text]) if wait <= 60 else None


async def _long_poll(broker: Broker, participant: str, wait: float, blobs: bool) -> Response:
    """The participant's oldest open task, waiting up to ``wait`` seconds on the event loop
    (the broker calls back when a task arrives; a future and a timer, no task per poll);
    204 without one."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    wakeups = _Wakeups.of(loop)
    while True:
        arrived: asyncio.Future[bool] = loop.create_future()

        def wake(arrived: asyncio.Future[bool] = arrived) -> None:
            wakeups.settle(arrived)

        body = broker.poll(participant, blobs=blobs, wake=wake)
        if body is not None:
            return Response(content=body, media_type="application/json")
        remaining = deadline - loop.time()
        timer = None
        woken = False
        try:
            if remaining <= 0 or broker.closed:
                return Response(status_code=status.HTTP_204_NO_CONTENT)
            timer = loop.call_later(remaining, _settle, arrived, False)
            woken = await arrived
        finally:
            if timer is not None:
                timer.cancel()
            if not woken:  # the broker forgets a wake-up when it calls it
                broker.unwatch(participant, wake)
        if loop.time() >= deadline:
            return Response(status_code=status.HTTP_204_NO_CONTENT)


def _settle(future: asyncio.Future[bool], by_broker: bool) -> None:
    """Wake a waiting long poll (once: by the broker or its timer, whichever comes first)."""
    if not future.done():
        future.set_result(by_broker)


class _Wakeups:
    """The long polls of one event loop that the broker wakes from another thread, settled
    together: a round wakes each of its participants, and every ``call_soon_threadsafe``
    writes to the loop's wake-up pipe, so one call settles every poll woken until it runs."""

    _of_loop: ClassVar[weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Wakeups]] = (
        weakref.WeakKeyDictionary()
    )

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = weakref.ref(loop)  # held weakly: the loop is the key of its entry
        self._lock = threading.Lock()
        self._due: list[asyncio.Future[bool]] = []

    @classmethod
    def of(cls, loop: asyncio.AbstractEventLoop) -> _Wakeups:
        """The wake-ups of ``loop`` (called on that loop)."""
        wakeups = cls._of_loop.get(loop)
        if wakeups is None:
            wakeups = cls._of_loop[loop] = cls(loop)
        return wakeups

    def settle(self, future: asyncio.Future[bool]) -> None:
        """Settle ``future`` on its loop soon (from any thread; RuntimeError when the loop
        has closed)."""
        with self._lock:
            self._due.append(future)
            if len(self._due) > 1:  # a call already scheduled settles it too
                return
        loop = self._loop()
        if loop is None:
            raise RuntimeError("the event loop of this long poll is gone")
        loop.call_soon_threadsafe(self._settle_due)

    def _settle_due(self) -> None:
        with self._lock:
            due, self._due = self._due, []
        for future in due:
            _settle(future, True)


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


async def _answer_task_fast(request: Request) -> Response | None:
    """:func:`answer_task` of a request in its plain form; None otherwise (a contribution
    its model does not take included: FastAPI's handler says why)."""
    job_id, task_text = request.path_params.get("job_id"), request.path_params.get("task_id")
    poll = _plain_poll(request)
    if (
        poll is None or not is_identifier(job_id)
        or not isinstance(task_text, str) or _TASK_ID.fullmatch(task_text) is None
        or int(task_text) > MAX_WIRE_INT or not json_body(request)
    ):
        return None
    try:
        body = Contribution.model_validate_json(await body_bytes(request))
    except ValidationError:
        return None
    participant = await participant_caller(request)
    services = await get_services(request)
    _accept(services, participant.id, job_id, int(task_text), body)
    return await _long_poll(services.broker, participant.id, *poll)


@router.post(
    "/jobs/{job_id}/tasks/{task_id}/answer",
    response_model=Task,
    operation_id="answer_task",
    summary="Answer a task and fetch the next one (long poll)",
    responses={**_NEXT_TASK_RESPONSES, **error_responses(401, 403, 404, 409, 422)},
)
@fast_path(_answer_task_fast)
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


async def _next_task_fast(request: Request) -> Response | None:
    """:func:`next_task` of a request in its plain form; None otherwise."""
    poll = _plain_poll(request)
    if poll is None:
        return None
    participant = await participant_caller(request)
    services = await get_services(request)
    return await _long_poll(services.broker, participant.id, *poll)


@router.get(
    "/tasks/next",
    response_model=Task,
    operation_id="next_task",
    summary="Fetch this participant's oldest open task (long poll)",
    responses={**_NEXT_TASK_RESPONSES, **error_responses(401, 403, 422)},
)
@fast_path(_next_task_fast)
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
    sha256: Annotated[str, Path(pattern=SHA256_HEX_PATTERN)],
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
