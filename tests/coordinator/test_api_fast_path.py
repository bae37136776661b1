"""The fast paths of the per-round routes answer every request as FastAPI's handlers do.

``coordinator.api.fast_path``: a request in its plain form is answered by the route's fast
path, any other by FastAPI's handler; the same request to an app without fast paths gets the
same status, body and challenge.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.testclient import TestClient

from fedclust.coordinator.api import fast_path
from fedclust.coordinator.api.fast_path import FastPathRoute, canonical_query
from fedclust.infra import app as app_skeleton
from fedclust.protocol.wire import messages as msg
from tests.coordinator._service import (
    ANALYST,
    API,
    NAMES,
    FakeCounting,
    auth,
    running_app,
    token,
)

ME = auth(token(NAMES[0]))
JSON = {"Content-Type": "application/json"}
REPLY = msg.AckReply().model_dump_json()


def contribution(job_id: str = "nojob", task_id: int = 3, reply: str = REPLY) -> bytes:
    return b'{"job_id":"%s","task_id":%d,"reply":%s}' % (
        job_id.encode(), task_id, reply.encode()
    )


#: (method, path and query, headers, body): plain forms and every other kind of request.
REQUESTS: list[tuple[str, str, dict[str, str], bytes | None]] = [
    ("GET", "/tasks/next", ME, None),
    ("GET", "/tasks/next?wait=0&blobs=true", ME, None),
    ("GET", "/tasks/next?wait=0.0&blobs=false&other=1", ME, None),
    ("GET", "/tasks/next?wait=0e0&blobs=1", ME, None),
    ("GET", "/tasks/next?wait=0&wait=0", ME, None),
    ("GET", "/tasks/next?wait=%30", ME, None),
    ("GET", "/tasks/next?wait=61", ME, None),
    ("GET", "/tasks/next?wait=-1", ME, None),
    ("GET", "/tasks/next?wait=abc&blobs=maybe", ME, None),
    ("GET", "/tasks/next?wait=0", {}, None),
    ("GET", "/tasks/next?wait=0", auth("wrong"), None),
    ("GET", "/tasks/next?wait=0", ANALYST, None),
    ("POST", "/jobs/nojob/tasks/3/answer?wait=0&blobs=true", {**ME, **JSON}, contribution()),
    ("POST", "/jobs/nojob/tasks/3/answer", {**ME, **JSON}, contribution()),
    ("POST", "/jobs/nojob/tasks/03/answer?wait=0", {**ME, **JSON}, contribution()),
    ("POST", "/jobs/nojob/tasks/3/answer?wait=0&blobs=yes", {**ME, **JSON}, contribution()),
    ("POST", "/jobs/nojob/tasks/3/answer?wait=60.5", {**ME, **JSON}, contribution()),
    ("POST", "/jobs/nojob/tasks/3/answer?wait=0",
     {**ME, "Content-Type": "application/json; charset=utf-8"}, contribution()),
    ("POST", "/jobs/nojob/tasks/3/answer?wait=0",
     {**ME, "Content-Type": "text/plain"}, contribution()),
    ("POST", "/jobs/nojob/tasks/3/answer?wait=0", ME, contribution()),
    ("POST", "/jobs/nojob/tasks/4/answer?wait=0", {**ME, **JSON}, contribution()),
    ("POST", "/jobs/other/tasks/3/answer?wait=0", {**ME, **JSON}, contribution()),
    ("POST", "/jobs/nojob/tasks/3/answer?wait=0", {**ME, **JSON}, b'{"job_id": "nojob",'),
    ("POST", "/jobs/nojob/tasks/3/answer?wait=0", {**ME, **JSON},
     contribution(reply='{"kind": "ack", "extra": 1}')),
    ("POST", "/jobs/nojob/tasks/3/answer?wait=0", {**ME, **JSON},
     b'{"job_id":"nojob","task_id":"3","reply":' + REPLY.encode() + b"}"),
    ("POST", "/jobs/nojob/tasks/3/answer?wait=0", {**ME, **JSON}, b""),
    ("POST", "/jobs/no%20job/tasks/3/answer?wait=0", {**ME, **JSON},
     contribution(job_id="no job")),
    ("POST", f"/jobs/{'j' * 65}/tasks/3/answer?wait=0", {**ME, **JSON},
     contribution(job_id="j" * 65)),
    ("POST", f"/jobs/nojob/tasks/{2**53 + 1}/answer?wait=0", {**ME, **JSON},
     contribution(task_id=2**53 + 1)),
    ("POST", "/jobs/nojob/tasks/-1/answer?wait=0", {**ME, **JSON}, contribution(task_id=-1)),
    ("POST", "/jobs/nojob/tasks/3/answer?wait=0", {**ANALYST, **JSON}, contribution()),
    ("POST", "/jobs/nojob/tasks/3/answer?wait=0", JSON, contribution()),
]


def _answers(client: TestClient) -> list[tuple[int, Any, str | None]]:
    found = []
    for method, url, headers, body in REQUESTS:
        response = client.request(method, API + url, headers=headers, content=body)
        found.append((
            response.status_code,
            response.json() if response.content else None,
            response.headers.get("www-authenticate"),
        ))
    return found


def test_the_routes_register_their_fast_paths() -> None:
    names = {endpoint.__name__ for endpoint in fast_path._FAST_PATHS}
    assert {"next_task", "answer_task"} <= names


def test_fast_paths_answer_as_fastapi_does(tmp_path: Path) -> None:
    answered: list[str] = []  # by a fast path, not raising

    def counted(path: fast_path.FastPath) -> fast_path.FastPath:
        async def spy(request: Request) -> Response | None:
            response = await path(request)
            if response is not None:
                answered.append(request.url.query)
            return response

        return spy

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fast_path, "_FAST_PATHS",
                      {endpoint: counted(path) for endpoint, path in fast_path._FAST_PATHS.items()})
        with running_app(tmp_path / "fast", FakeCounting()) as client:
            fast = _answers(client)
    assert answered == ["", "wait=0&blobs=true", "wait=0.0&blobs=false&other=1"]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fast_path, "_FAST_PATHS", {})
        with running_app(tmp_path / "plain", FakeCounting()) as client:
            plain = _answers(client)
    for request, got, expected in zip(REQUESTS, fast, plain, strict=True):
        assert got == expected, request[:2]
    statuses = {status for status, _, _ in fast}
    assert {204, 401, 403, 404, 422} <= statuses  # the list reaches every outcome


def test_a_streamed_body_over_the_limit_is_refused_413_by_either_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(app_skeleton, "MAX_BODY_BYTES", 1000)

    def chunks() -> Iterator[bytes]:
        yield contribution()
        for _ in range(20):
            yield b" " * 100

    answers = []
    for name, paths in (("fast", fast_path._FAST_PATHS), ("plain", {})):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(fast_path, "_FAST_PATHS", paths)
            with running_app(tmp_path / name, FakeCounting()) as client:
                response = client.post(f"{API}/jobs/nojob/tasks/3/answer?wait=0",
                                       content=chunks(), headers={**ME, **JSON})
                answers.append((response.status_code, response.json()))
    assert answers[0] == answers[1]
    assert answers[0] == (413, {"detail": "request body larger than 1000 bytes"})


def test_a_request_the_fast_path_declines_reaches_fastapi_with_its_body() -> None:
    calls: list[str] = []

    async def fast(request: Request) -> Response | None:
        body = await request.body()  # read here, then again by FastAPI's handler
        calls.append("fast")
        return Response(b"fast") if body == b'{"n": 1}' else None

    router = APIRouter(route_class=FastPathRoute)

    @router.post("/echo")
    @fast_path.fast_path(fast)
    async def echo(payload: dict[str, int]) -> dict[str, int]:
        calls.append("fastapi")
        return payload

    app = FastAPI()
    app.include_router(router)
    client = TestClient(app)
    assert client.post("/echo", content=b'{"n": 1}', headers=JSON).content == b"fast"
    assert client.post("/echo", content=b'{"n": 2}', headers=JSON).json() == {"n": 2}
    assert client.post("/echo", content=b"[").status_code == 422
    assert calls == ["fast", "fast", "fastapi", "fast"]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        (b"", {}),
        (b"wait=20.0&blobs=true", {"wait": "20.0", "blobs": "true"}),
        (b"a=", {"a": ""}),
        (b"wait=1&wait=2", None),
        (b"wait=%32", None),
        (b"wait=2+0", None),
        (b"wait", None),
        (b"wait=1&", None),
    ],
)
def test_canonical_query(query: bytes, expected: dict[str, str] | None) -> None:
    assert canonical_query(query) == expected
