"""The coordinator's repository on SQLite and on PostgreSQL (tests/pg.py): every kind of value
it stores comes back as it went in."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from fedclust.coordinator.db import AuditHeadRefusedError, Batch, Database, TaskRecord
from fedclust.protocol.wire import messages as msg
from fedclust.protocol.wire.blobs import externalise
from tests.coordinator._service import NAMES

KEY = "A" * 43 + "="  # an identity key's shape: 32 bytes, base64
SPEC = msg.JobCreate(algorithm="ffcm", participants=list(NAMES), k=3, protection="none")


@pytest.fixture
def db(database_url: str) -> Iterator[Database]:
    database = Database(database_url)
    database.create_all()
    yield database
    database.dispose()


def test_enrolments_round_trip_and_update(db: Database) -> None:
    enrolment = msg.Enrolment(n_features=4, allowed_algorithms=["fkm", "ffcm", "fkm"],
                              agent_version="v" * 64, identity_key=KEY)
    first = db.enrol("participant-0", enrolment)
    assert first.allowed_algorithms == ("ffcm", "fkm") and first.identity_key == KEY
    db.enrol("participant-0", enrolment.model_copy(update={"n_features": 5}))
    assert db.participants()["participant-0"].n_features == 5
    assert db.participants()["participant-0"].enrolled_at.utcoffset() is not None


def test_jobs_keep_their_state_owner_and_order(db: Database) -> None:
    for i in range(3):
        db.create_job(f"job-{i}", SPEC, n_features=2, owner="a" * 64)
    assert db.set_state("job-1", "running", only_from=["pending"])
    assert not db.set_state("job-1", "running", only_from=["pending"])  # moved already
    assert [j.id for j in db.jobs()] == ["job-0", "job-1", "job-2"]
    assert [j.id for j in db.jobs(["running"])] == ["job-1"]
    job = db.job("job-1")
    assert job is not None and job.spec == SPEC and job.owner == "a" * 64


def test_a_batch_stores_tasks_replies_blobs_and_progress(db: Database) -> None:
    db.create_job("job-b", SPEC, n_features=2)
    blobs: dict[str, bytes] = {}
    large = {"kind": "report_count", "values": ["x" * 5000, "ünïcode ✓" * 600]}
    spec_json = json.dumps(externalise(large, blobs))
    assert len(blobs) == 2
    batch = Batch(
        tasks=[TaskRecord("job-b", name, 2**31 - 1, "report_count", spec_json, None)
               for name in NAMES],
        replies=[TaskRecord("job-b", NAMES[0], 2**31 - 1, "report_count", "", '{"n":1}')],
        blobs=blobs,
        progress={"job-b": msg.JobProgress(stage="counting")},
    )
    db.write(batch)
    db.write(Batch(blobs=blobs))  # the same blobs again: stored once, no conflict
    tasks = db.tasks("job-b")
    assert [(t.participant, t.task_id) for t in tasks] == [(n, 2**31 - 1) for n in NAMES]
    assert all(json.loads(t.spec_json) == large for t in tasks)
    assert [t.reply_json for t in tasks] == ['{"n":1}', None, None]
    assert all(db.blob(name) == data for name, data in blobs.items())
    job = db.job("job-b")
    assert job is not None and job.progress == msg.JobProgress(stage="counting")


def test_audit_heads_are_kept_and_refused_going_back(db: Database) -> None:
    signature = "s" * 88
    first = db.add_audit_head("participant-0", seq=5, line_sha256="a" * 64, signature=signature)
    assert db.add_audit_head("participant-0", seq=5, line_sha256="a" * 64,
                             signature=signature) == first
    db.add_audit_head("participant-0", seq=9, line_sha256="b" * 64, signature=signature)
    with pytest.raises(AuditHeadRefusedError, match="behind line 9"):
        db.add_audit_head("participant-0", seq=7, line_sha256="c" * 64, signature=signature)
    with pytest.raises(AuditHeadRefusedError, match="another hash"):
        db.add_audit_head("participant-0", seq=5, line_sha256="d" * 64, signature=signature)
    assert [h.seq for h in db.audit_heads("participant-0")] == [5, 9]
