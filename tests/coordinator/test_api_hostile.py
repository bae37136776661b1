"""Hostile requests to the coordinator get a clean 4xx, never a 5xx (issue 11)."""

from __future__ import annotations

import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from fedclust.coordinator.app import create_app
from tests.asgi_raw import call
from tests.coordinator._service import (
    ANALYST,
    API,
    NAMES,
    FakeCounting,
    auth,
    running_app,
    settings,
    token,
)

PARTICIPANT = auth(token(NAMES[0]))
MIB = 1 << 20


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with running_app(tmp_path, FakeCounting()) as c:
        yield c


@pytest.mark.parametrize("task_id", [2**53 + 1, 2**63, 2**64, 2**70])
@pytest.mark.parametrize("route", ["contribution", "answer"])
def test_a_task_id_beyond_64_bits_in_the_path_is_422(
    client: TestClient, task_id: int, route: str
) -> None:
    body = {"job_id": "j", "task_id": 0, "reply": {"kind": "ack"}}
    response = client.post(
        f"{API}/jobs/j/tasks/{task_id}/{route}", json=body, headers=PARTICIPANT
    )
    assert response.status_code == 422, response.text
    assert ["path", "task_id"] in [e["loc"] for e in response.json()["detail"]]


@pytest.mark.parametrize("shape", [[2**70], [2**32, 2**32]], ids=["2^70", "wraps"])
def test_an_oversized_array_shape_is_422(client: TestClient, shape: list[int]) -> None:
    spec = {
        "algorithm": "fed-distill", "participants": list(NAMES), "protection": "none",
        "distill": {"n_classes": 2, "public": {"dtype": "float64", "shape": shape, "data": ""}},
    }
    response = client.post(f"{API}/jobs", json=spec, headers=ANALYST)
    assert response.status_code == 422, response.text
    locs = [e["loc"][:4] for e in response.json()["detail"]]
    assert ["body", "distill", "public", "shape"] in locs


@pytest.mark.parametrize("value", [b"NaN", b"Infinity", b"-Infinity"])
def test_a_non_finite_float_is_422(client: TestClient, value: bytes) -> None:
    empty = b'{"dtype": "float64", "shape": [0], "data": ""}'
    reply = b'{"kind": "local_fcm", "centers": %s, "weights": %s, "n_iter": 0, ' % (empty, empty)
    body = b'{"job_id": "j", "task_id": 0, "reply": ' + reply + b'"global_objective": %s}}'
    response = client.post(
        f"{API}/jobs/j/tasks/0/contribution", content=body % value,
        headers={**PARTICIPANT, "Content-Type": "application/json"},
    )
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["type"] == "finite_number"
    assert value.decode() not in response.text  # the value is not echoed


def test_405_names_every_method_of_the_path(client: TestClient) -> None:
    response = client.put(f"{API}/jobs", headers=ANALYST)
    assert response.status_code == 405
    assert response.headers["Allow"] == "GET, POST"
    assert client.delete(f"{API}/participants/enrol").headers["Allow"] == "POST"


@pytest.mark.parametrize(
    "path", ["/jobs", "/participants/enrol", "/audit/heads", "/jobs/j/tasks/0/contribution"]
)
def test_an_unauthenticated_50_mb_body_is_refused_unread(tmp_path: Path, path: str) -> None:
    app = create_app(settings(tmp_path))
    for headers in ({}, auth("not-a-known-token")):
        response = call(app, "POST", API + path, headers=headers, body_bytes=50 * MIB)
        assert (response.status, response.consumed) == (401, 0)
        assert response.headers["www-authenticate"] == "Bearer"


@pytest.mark.parametrize(
    ("path", "headers", "limit"),
    [("/participants/enrol", PARTICIPANT, 64 * 1024), ("/audit/heads", PARTICIPANT, 16 * 1024),
     ("/jobs/j/cancel", ANALYST, 16 * 1024)],
)
def test_small_messages_have_small_limits(
    tmp_path: Path, path: str, headers: dict[str, str], limit: int
) -> None:
    app = create_app(settings(tmp_path))
    response = call(app, "POST", API + path, headers=headers, body_bytes=limit + 1)
    assert (response.status, response.consumed) == (413, 0)


def test_the_database_file_is_private(tmp_path: Path) -> None:
    with running_app(tmp_path, FakeCounting()):
        pass
    mode = stat.S_IMODE((tmp_path / "coordinator.db").stat().st_mode)
    assert mode == 0o600
