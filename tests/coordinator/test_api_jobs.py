"""Job creation, validation, progress, cancellation and failures through the coordinator API."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from fedclust.protocol.wire import messages as msg
from tests.coordinator._service import (
    ANALYST,
    API,
    NAMES,
    OUTSIDER,
    FakeCounting,
    Federation,
    auth,
    blobs,
    create_job,
    enrol,
    post_reply,
    running_app,
    token,
    wait_for_state,
)


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    with running_app(tmp_path, FakeCounting()) as c:
        for name in NAMES:
            enrol(client=c, participant=name)
        yield c


def post_job(client: TestClient, **spec: Any) -> Any:
    body: dict[str, Any] = {
        "algorithm": "fedfcm", "participants": list(NAMES), "k": 3, "protection": "none"
    }
    body.update(spec)
    return client.post(f"{API}/jobs", json=body, headers=ANALYST)


def messages(response: Any) -> str:
    return " ".join(item["msg"] for item in response.json()["detail"])


def test_unknown_algorithm_is_422(client: TestClient) -> None:
    response = post_job(client, algorithm="dbscan")
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "algorithm"]


def test_bad_k_spec_is_422(client: TestClient) -> None:
    assert post_job(client, k=3, k_range=[2, 4]).status_code == 422
    assert post_job(client, k=1).status_code == 422
    assert post_job(client, participants=[NAMES[0], NAMES[0]]).status_code == 422


def test_unknown_participant_is_422(client: TestClient) -> None:
    response = post_job(client, participants=[*NAMES, "nobody"])
    assert response.status_code == 422
    assert "'nobody' is unknown" in messages(response)


def test_unenrolled_participant_is_422(client: TestClient) -> None:
    response = post_job(client, participants=[*NAMES, OUTSIDER])
    assert response.status_code == 422
    assert f"{OUTSIDER!r} has not enrolled" in messages(response)


def test_mismatched_n_features_is_422(client: TestClient) -> None:
    enrol(client, OUTSIDER, n_features=3)
    response = post_job(client, participants=[*NAMES, OUTSIDER])
    assert response.status_code == 422
    assert "do not share one schema" in messages(response)
    assert client.get(f"{API}/jobs", headers=ANALYST).json() == []  # nothing was stored


def test_feature_names_of_another_width_are_422(client: TestClient) -> None:
    response = post_job(client, feature_names=["a", "b", "c"])
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "feature_names"]
    assert "names 3 features; the participants have 2" in messages(response)
    assert post_job(client, feature_names=["a", "a"]).status_code == 422
    assert client.get(f"{API}/jobs", headers=ANALYST).json() == []  # nothing was stored


def test_algorithm_outside_a_policy_is_422(client: TestClient) -> None:
    enrol(client, NAMES[1], allowed_algorithms=["fkm"])
    response = post_job(client, algorithm="kfed")
    assert response.status_code == 422
    assert f"{NAMES[1]!r} does not allow algorithm 'kfed'" in messages(response)


def test_participants_list_shows_enrolment(client: TestClient) -> None:
    listed = client.get(f"{API}/participants", headers=ANALYST).json()
    assert {p["id"]: p["enrolled"] for p in listed} == {**dict.fromkeys(NAMES, True),
                                                        OUTSIDER: False}
    assert {p["n_features"] for p in listed if p["enrolled"]} == {2}


def test_seed_is_drawn_and_stored(client: TestClient) -> None:
    job = create_job(client)
    assert isinstance(job["spec"]["seed"], int)
    again = client.get(f"{API}/jobs/{job['id']}", headers=ANALYST).json()
    assert again["spec"]["seed"] == job["spec"]["seed"]
    assert [j["id"] for j in client.get(f"{API}/jobs", headers=ANALYST).json()] == [job["id"]]


def test_unknown_job_is_404(client: TestClient) -> None:
    for path in ("/jobs/job-x", "/jobs/job-x/result"):
        assert client.get(API + path, headers=ANALYST).status_code == 404
    assert client.post(f"{API}/jobs/job-x/cancel", headers=ANALYST).status_code == 404


def test_next_task_is_204_when_idle(client: TestClient) -> None:
    headers = auth(token(NAMES[0]))
    assert client.get(f"{API}/tasks/next", headers=headers).status_code == 204
    start = time.monotonic()
    response = client.get(f"{API}/tasks/next", params={"wait": 0.5}, headers=headers)
    assert response.status_code == 204
    assert time.monotonic() - start >= 0.45  # the long poll waited
    assert client.get(f"{API}/tasks/next", params={"wait": 61}, headers=headers).status_code == 422


def test_progress_and_cancel(client: TestClient) -> None:
    job = create_job(client)
    headers = auth(token(NAMES[0]))
    task = msg.Task.model_validate_json(
        client.get(f"{API}/tasks/next", params={"wait": 5}, headers=headers).content
    )
    assert isinstance(task.spec, msg.DeclareTask)
    deadline = time.monotonic() + 5
    while True:  # every participant is awaited for its declaration
        progress = client.get(f"{API}/jobs/{job['id']}", headers=ANALYST).json()["progress"]
        if progress and progress["waiting_for"] == sorted(NAMES):
            break
        assert time.monotonic() < deadline, progress
        time.sleep(0.02)
    assert progress["stage"] == "declaring"
    assert client.get(f"{API}/jobs/{job['id']}/result", headers=ANALYST).status_code == 409

    cancelled = client.post(f"{API}/jobs/{job['id']}/cancel", headers=ANALYST)
    assert cancelled.status_code == 200
    assert cancelled.json()["state"] == "cancelled"
    assert client.get(f"{API}/tasks/next", headers=headers).status_code == 204
    post_reply(client, NAMES[0], task, msg.AckReply(), expect=409)  # task no longer open
    again = client.post(f"{API}/jobs/{job['id']}/cancel", headers=ANALYST)
    assert again.json()["state"] == "cancelled"  # idempotent
    response = client.get(f"{API}/jobs/{job['id']}/result", headers=ANALYST)
    assert response.status_code == 409
    assert "cancelled" in response.json()["detail"]


def test_timeout_fails_the_job_and_late_answers_are_409(tmp_path: Path) -> None:
    with running_app(tmp_path, FakeCounting(), timeout=0.3) as client:
        for name in NAMES:
            enrol(client, name)
        job = create_job(client)
        headers = auth(token(NAMES[0]))
        task = msg.Task.model_validate_json(
            client.get(f"{API}/tasks/next", params={"wait": 5}, headers=headers).content
        )
        done = wait_for_state(client, job["id"], ("failed",), timeout=10)
        assert done["error"].startswith(
            "participants unavailable: every participant has dropped out (the last: "
        )
        assert done["error"].endswith("did not answer task 0 (declare) within 0.3 s)")
        post_reply(client, NAMES[0], task, msg.AckReply(), expect=409)
        # a finished job cannot be cancelled
        assert client.post(f"{API}/jobs/{job['id']}/cancel", headers=ANALYST).status_code == 409


def test_every_participant_gone_after_the_declarations_is_a_clear_error(
    tmp_path: Path,
) -> None:
    counting = FakeCounting()
    federation = Federation(blobs(), counting)
    # 1 s: each agent's declaration must arrive in time even on a loaded machine (at 0.3 s
    # one came late there and dropped out at the declaration instead).
    with running_app(tmp_path, counting, timeout=1.0) as client:
        for name in NAMES:
            enrol(client, name)
        job = create_job(client)
        with federation.agents(client, max_answers=1):  # the declaration, then silence
            done = wait_for_state(client, job["id"], ("failed", "succeeded"), timeout=20)
    assert done["state"] == "failed"
    assert done["error"].startswith(
        "participants unavailable: every participant has dropped out (the last: participant "
    )
    assert done["error"].endswith("did not answer task 1 (report_count) within 1 s)")


def test_refusal_fails_the_job_with_its_reason(tmp_path: Path) -> None:
    counting = FakeCounting()
    federation = Federation(blobs(), counting)

    def refuse(client: TestClient, task: msg.Task, reply: msg.Reply) -> None:
        post_reply(client, NAMES[2], task, msg.RefusalReply(reason="not today"), expect=202)

    with running_app(tmp_path, counting) as client:
        for name in NAMES:
            enrol(client, name)
        job = create_job(client)
        with federation.agents(client, submit={NAMES[2]: refuse}):
            done = wait_for_state(client, job["id"], ("failed", "succeeded"))
    assert done["state"] == "failed"
    assert done["error"] == f"refused: participant {NAMES[2]!r} refused: not today"


def test_counting_service_refusal_is_a_clear_error(tmp_path: Path) -> None:
    counting = FakeCounting(min_participants=4)
    federation = Federation(blobs(), counting)
    with running_app(tmp_path, counting) as client:
        for name in NAMES:
            enrol(client, name)
        job = create_job(client, standardise=True)
        with federation.agents(client):
            done = wait_for_state(client, job["id"], ("failed", "succeeded"))
    assert done["state"] == "failed"
    assert done["error"].startswith("counting service: ")
    assert "only 3 of min 4 participants have reported" in done["error"]
