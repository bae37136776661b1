"""A coordinator stopped mid-job resumes from its database and gives the same result."""

from __future__ import annotations

import time
from pathlib import Path

from sqlalchemy import text

from fedclust.coordinator.db import Database
from fedclust.protocol.wire.messages import ResultDocument
from tests.coordinator._service import (
    ANALYST,
    API,
    NAMES,
    SPEC,
    FakeCounting,
    Federation,
    assert_same_result,
    blobs,
    create_job,
    enrol,
    expected_document,
    running_app,
    wait_for_state,
)

PARTWAY = 8  # answers per participant before the coordinator stops


def test_restart_resumes_with_the_same_result(tmp_path: Path, database_url: str) -> None:
    """On SQLite and on PostgreSQL (tests/pg.py)."""
    parts = blobs()
    counting = FakeCounting()  # a separate service: it outlives the coordinator
    federation = Federation(parts, counting)  # the agents keep their per-job state
    with running_app(tmp_path, counting, database_url=database_url) as client:
        for name in NAMES:
            enrol(client, name)
        job_id = create_job(client, **SPEC)["id"]
        with federation.agents(client, max_answers=PARTWAY):
            deadline = time.monotonic() + 30
            while min(federation.answered.values()) < PARTWAY:
                assert time.monotonic() < deadline, federation.answered
                time.sleep(0.01)
        assert client.get(f"{API}/jobs/{job_id}", headers=ANALYST).json()["state"] == "running"
    answered_before = sum(federation.answered.values())

    stored = Database(database_url)
    job = stored.job(job_id)
    assert job is not None and job.state == "running"  # left resumable

    with running_app(tmp_path, counting, database_url=database_url) as client:
        with federation.agents(client):
            done = wait_for_state(client, job_id, ("succeeded", "failed"))
        assert done["state"] == "succeeded", done["error"]
        got = ResultDocument.model_validate_json(
            client.get(f"{API}/jobs/{job_id}/result", headers=ANALYST).content
        )
    assert sum(federation.answered.values()) > answered_before
    with stored.engine.connect() as connection:
        n_tasks = connection.execute(text("SELECT count(*) FROM tasks")).scalar_one()
    stored.dispose()
    # every task was computed exactly once: the resumed run replayed, never re-asked
    assert sum(federation.answered.values()) == n_tasks
    assert_same_result(got, expected_document(parts))
