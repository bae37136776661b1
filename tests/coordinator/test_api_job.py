"""A whole job through the coordinator API equals the in-process simulator's document."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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


def test_full_job_matches_simulator(tmp_path: Path, database_url: str) -> None:
    """On SQLite and on PostgreSQL (tests/pg.py)."""
    parts = blobs()
    counting = FakeCounting()
    federation = Federation(parts, counting)
    with running_app(tmp_path, counting, database_url=database_url) as client:
        for name in NAMES:
            enrol(client, name)
        job = create_job(client, **SPEC)
        assert job["state"] in ("pending", "running")
        seen: list[dict[str, Any]] = []
        with federation.agents(client):
            done = wait_for_state(client, job["id"], ("succeeded", "failed"), seen=seen)
        assert done["state"] == "succeeded", done["error"]
        assert done["progress"]["stage"] == "done"
        # the live progress showed the sweep's rounds: K, round number and center shift
        rounds = [p for p in seen if p["stage"] == "clustering" and p["round"] is not None]
        assert rounds, [p["stage"] for p in seen]
        assert all(p["k"] in (2, 3, 4) and p["shift"] >= 0 for p in rounds)
        assert all(set(p["answered"]) | set(p["waiting_for"]) <= set(NAMES) for p in seen)
        response = client.get(f"{API}/jobs/{job['id']}/result", headers=ANALYST)
        assert response.status_code == 200
        got = ResultDocument.model_validate_json(response.content)
    assert counting.rosters[job["id"]] == list(NAMES)
    assert_same_result(got, expected_document(parts))
