"""GET /participants/jobs/{job_id}/result: a job's centers for its own members only."""

from __future__ import annotations

from pathlib import Path

from fedclust.protocol.wire.assignment import ParticipantResult
from fedclust.protocol.wire.messages import ResultDocument
from tests.coordinator._service import (
    ANALYST,
    API,
    NAMES,
    OUTSIDER,
    SPEC,
    FakeCounting,
    Federation,
    auth,
    blobs,
    create_job,
    enrol,
    running_app,
    token,
    wait_for_state,
)


def _path(job_id: str) -> str:
    return f"{API}/participants/jobs/{job_id}/result"


def test_members_get_the_result_without_the_local_ks(tmp_path: Path) -> None:
    counting = FakeCounting()
    federation = Federation(blobs(), counting)
    with running_app(tmp_path, counting) as client:
        for name in NAMES:
            enrol(client, name)
        job = create_job(client, **SPEC, m=1.8)
        pending = client.get(_path(job["id"]), headers=auth(token(NAMES[0])))
        assert pending.status_code == 409
        assert pending.json()["detail"].startswith(f"job {job['id']!r} is ")
        with federation.agents(client):
            done = wait_for_state(client, job["id"], ("succeeded", "failed"))
        assert done["state"] == "succeeded", done["error"]
        analysts = ResultDocument.model_validate_json(
            client.get(f"{API}/jobs/{job['id']}/result", headers=ANALYST).content
        )
        for name in NAMES:
            response = client.get(_path(job["id"]), headers=auth(token(name)))
            assert response.status_code == 200, response.text
            got = ParticipantResult.model_validate_json(response.content)
            assert got.job_id == job["id"] and got.m == 1.8
            assert analysts.local_k is not None and got.result.local_k is None
            assert got.result.k_range_rule_of_thumb is None
            assert got.result.sweep == analysts.sweep
            assert got.result.k_selected == analysts.k_selected

        outsider = client.get(_path(job["id"]), headers=auth(token(OUTSIDER)))
        unknown = client.get(_path("no-such-job"), headers=auth(token(NAMES[0])))
        # a non-member learns nothing: the answer is the one for a job that does not exist
        assert outsider.status_code == unknown.status_code == 404
        assert outsider.json()["detail"] == f"job {job['id']!r} does not exist"
        assert client.get(_path(job["id"]), headers=ANALYST).status_code == 403
        assert client.get(_path(job["id"])).status_code == 401
