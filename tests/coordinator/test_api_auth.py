"""Authentication and authorisation of every coordinator route."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.coordinator._service import (
    ANALYST,
    API,
    NAMES,
    OUTSIDER,
    FakeCounting,
    auth,
    create_job,
    enrol,
    running_app,
    token,
)

JOB = "job-placeholder"
ANALYST_ROUTES = [
    ("GET", "/participants"),
    ("POST", "/jobs"),
    ("GET", "/jobs"),
    ("GET", f"/jobs/{JOB}"),
    ("GET", f"/jobs/{JOB}/result"),
    ("GET", f"/jobs/{JOB}/result/sweep.csv"),
    ("POST", f"/jobs/{JOB}/cancel"),
    ("GET", f"/jobs/{JOB}/disclosures"),
    ("GET", f"/jobs/{JOB}/history"),
    ("GET", "/algorithms"),
]
PARTICIPANT_ROUTES = [
    ("POST", "/participants/enrol"),
    ("GET", "/tasks/next"),
    ("POST", f"/jobs/{JOB}/tasks/0/contribution"),
]


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with running_app(tmp_path, FakeCounting()) as c:
        yield c


@pytest.mark.parametrize(("method", "path"), ANALYST_ROUTES + PARTICIPANT_ROUTES)
def test_missing_or_unknown_token_is_401(client: TestClient, method: str, path: str) -> None:
    for headers in ({}, auth("not-a-known-token"), {"Authorization": "Basic abc"}):
        # An empty body: authentication must be refused before the body is looked at.
        response = client.request(method, API + path, json={}, headers=headers)
        assert response.status_code == 401, (headers, response.text)
        assert response.headers["WWW-Authenticate"] == "Bearer"


@pytest.mark.parametrize(("method", "path"), ANALYST_ROUTES)
def test_participant_token_on_analyst_route_is_403(
    client: TestClient, method: str, path: str
) -> None:
    response = client.request(method, API + path, json={}, headers=auth(token(NAMES[0])))
    assert response.status_code == 403


@pytest.mark.parametrize(("method", "path"), PARTICIPANT_ROUTES)
def test_analyst_token_on_participant_route_is_403(
    client: TestClient, method: str, path: str
) -> None:
    response = client.request(method, API + path, json={}, headers=ANALYST)
    assert response.status_code == 403


def test_health_needs_no_token(client: TestClient) -> None:
    response = client.get(f"{API}/health")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_participant_cannot_touch_another_participants_job(client: TestClient) -> None:
    for name in (*NAMES, OUTSIDER):
        enrol(client, name)
    job = create_job(client)
    # participant-0 has task 0 (declare) of this job; the outsider may neither see it nor
    # answer it.
    response = client.get(
        f"{API}/tasks/next", params={"wait": 5}, headers=auth(token(NAMES[0]))
    )
    assert response.status_code == 200
    assert response.json()["job_id"] == job["id"]
    assert client.get(f"{API}/tasks/next", headers=auth(token(OUTSIDER))).status_code == 204
    declaration = {
        "kind": "declaration", "row_bound": 64, "value_bound": 1.0,
        "row_bound_source": "derived", "value_bound_source": "derived",
        "enforces_fcm_rule": True,
    }
    body = {"job_id": job["id"], "task_id": 0, "reply": declaration}
    response = client.post(
        f"{API}/jobs/{job['id']}/tasks/0/contribution", json=body, headers=auth(token(OUTSIDER))
    )
    assert response.status_code == 403
    # the refused attempt changed nothing: the owner still answers its task
    response = client.post(
        f"{API}/jobs/{job['id']}/tasks/0/contribution", json=body, headers=auth(token(NAMES[0]))
    )
    assert response.status_code == 202


def test_error_bodies_do_not_echo_values(client: TestClient) -> None:
    secret_value = "VALUE-THAT-MUST-NOT-COME-BACK"
    response = client.post(
        f"{API}/participants/enrol",
        json={"n_features": secret_value, "allowed_algorithms": [secret_value]},
        headers=auth(token(NAMES[0])),
    )
    assert response.status_code == 422
    assert secret_value not in response.text
