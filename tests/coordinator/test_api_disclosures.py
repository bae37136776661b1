"""The coordinator's disclosure ledger: GET /jobs/{id}/disclosures and ``fedclust job result``."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import fedclust.cli
import fedclust.client
from fedclust.client import AnalystClient, AnalystConfig
from fedclust.coordinator.db import JobRecord, TaskRecord
from fedclust.coordinator.disclosures import ledger
from fedclust.protocol.wire.messages import DisclosureLedger, JobCreate
from tests.coordinator._service import (
    ANALYST,
    ANALYST_TOKEN,
    API,
    NAMES,
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


def test_disclosures_of_a_small_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    counting = FakeCounting()
    federation = Federation(blobs(), counting)
    with running_app(tmp_path, counting) as client:
        for name in NAMES:
            enrol(client, name)
        path = f"{API}/jobs/job-none/disclosures"
        assert client.get(path).status_code == 401
        assert client.get(path, headers=auth("nobody")).status_code == 401
        assert client.get(path, headers=auth(token(NAMES[0]))).status_code == 403
        assert client.get(path, headers=ANALYST).status_code == 404
        job = create_job(client, algorithm="fedfcm", k=3, seed=5, standardise=True)
        url = f"{API}/jobs/{job['id']}/disclosures"
        with federation.agents(client):
            done = wait_for_state(client, job["id"], ("succeeded", "failed"))
        assert done["state"] == "succeeded", done["error"]
        assert client.get(url, headers=auth(token(NAMES[1]))).status_code == 403
        response = client.get(url, headers=ANALYST)
        assert response.status_code == 200, response.text
        ledger = DisclosureLedger.model_validate_json(response.content)

        # the CLI prints the ledger with the result, and alone with --disclosures
        monkeypatch.setenv("FEDCLUST_COORDINATOR_URL", "http://testserver")
        monkeypatch.setenv("FEDCLUST_TOKEN", ANALYST_TOKEN)

        def in_process(config: AnalystConfig, **kwargs: Any) -> AnalystClient:
            return AnalystClient(config, transport=client._transport)

        monkeypatch.setattr(fedclust.client, "AnalystClient", in_process)
        assert fedclust.cli.main(["job", "result", job["id"]]) == 0
        text = capsys.readouterr().out
        assert f"what the coordinator learned in job {job['id']} (fedfcm)" in text
        assert "local FCM centers stay with the participants" in text
        assert fedclust.cli.main(["job", "result", job["id"], "--disclosures"]) == 0
        assert DisclosureLedger.model_validate_json(capsys.readouterr().out) == ledger
        assert fedclust.cli.main(["job", "result", job["id"], "--json"]) == 0
        assert "disclosures" not in json.loads(capsys.readouterr().out)  # unchanged document

    assert (ledger.job_id, ledger.algorithm, ledger.state) == (job["id"], "fedfcm", "succeeded")
    by_key = {(d.participant, d.task_kind): d for d in ledger.disclosures}
    assert {p for p, _ in by_key} == set(NAMES)
    for name in NAMES:
        # k-means averaging: local centers stay home, only sums over them cross (in the
        # clear with protection "none"), shaped by the global centers, never by local ones.
        assert (name, "local_fcm") not in by_key
        held = by_key[(name, "hold_local_fcm")]
        assert (held.reply_kind, held.fields) == ("ack", [])
        sums = by_key[(name, "center_sums")]  # a statistic task, named by its statistic
        assert sums.reply_kind == "statistic"
        fields = {f.name.removeprefix("fields."): f for f in sums.fields}
        assert set(fields) == {"sums", "weights", "inertia", "contributors", "objective"}
        # (starts, at most K global centers, D): nothing scales with the local centers
        assert all(s[1] <= 3 and s[2] == 2 for s in fields["sums"].shapes or [])
        assert {f.protection for f in sums.fields} == {"plain"}
        moments = by_key[(name, "moment_sums")]
        assert {f.name: f.shapes for f in moments.fields} == {
            "fields.sum": [(2,)], "fields.sum_sq": [(2,)]
        }  # nothing but the two sums, not even the shift back
        count = by_key[(name, "report_count")]
        assert (count.reply_kind, count.fields) == ("ack", [])  # N_l went elsewhere
    notes = " ".join(ledger.notes)
    assert "each participant's own sums over them reach the coordinator in the clear" in notes
    assert "K=3: participants behind each center:" in notes
    assert "unprotected" in notes and "secure aggregation" in notes
    assert "counting service only" in notes


def test_the_ledger_names_the_cohorts_of_protected_sums() -> None:
    """Per masked or Paillier round, those that sent their input: one line per cohort, with
    how many sums were asked over it (a refusal or a timeout sent nothing)."""
    spec = JobCreate(algorithm="ffcm", participants=["a", "b", "c", "d"], k=2)
    now = datetime.now(UTC)
    job = JobRecord("j", spec, 2, "failed", now, now, None, "refused: ...", None)
    masked = '{"kind":"masked_input","vectors":{},"shares":[],"seed_commitment":""}'

    def task(who: str, round_no: int, reply: str) -> TaskRecord:
        spec_json = json.dumps({"kind": "secure_input", "setup": 1, "round": round_no})
        return TaskRecord("j", who, round_no, "secure_input", spec_json, reply)

    tasks = [task(p, r, masked) for r in (1, 2) for p in "abcd"]
    tasks += [task(p, 3, masked) for p in "abc"]
    tasks += [task("d", 3, '{"kind":"refusal","reason":"no"}')]
    tasks += [TaskRecord.timeout("j", "d", 4, "secure_input", "late")]
    tasks += [task(p, 4, masked) for p in "abc"]
    notes = ledger(job, tasks).notes
    assert "2 protected sum(s) over the cohort a, b, c, d." in notes
    assert "2 protected sum(s) over the cohort a, b, c." in notes


def test_the_ledger_says_what_a_feature_names_check_reveals() -> None:
    """The declared names went to every participant; each checked them (or only their number
    without configured column names), and a refusal reveals only that they differ."""
    spec = JobCreate(algorithm="fkm", participants=["a", "b"], k=2, feature_names=["x", "y"])
    now = datetime.now(UTC)
    job = JobRecord("j", spec, 2, "running", now, now, None, None, None)
    (note,) = [n for n in ledger(job, []).notes if n.startswith("Feature names:")]
    assert "declared its 2 features as x, y" in note
    assert "only their number where it configures no column names" in note
    assert "A refusal reveals only that they differ, never where" in note
    unnamed = JobCreate(algorithm="fkm", participants=["a", "b"], k=2)
    assert not any("Feature names" in n for n in ledger(
        JobRecord("j", unnamed, 2, "running", now, now, None, None, None), []).notes)
