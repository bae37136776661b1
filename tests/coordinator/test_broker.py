"""The broker's storage and delivery: batched writes, blobs by hash, long-poll wake-ups, the
move of an older database's replies out of the task rows, and a timed-out task."""

from __future__ import annotations

import hashlib
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from fedclust.coordinator.api.deps import Services
from fedclust.coordinator.broker import (
    Broker,
    ContributionRejectedError,
    JobChannel,
    TaskTimeoutError,
)
from fedclust.coordinator.db import Batch, Database, TaskRecord
from fedclust.coordinator.disclosures import ledger
from fedclust.coordinator.journal import Journal
from fedclust.protocol.wire import messages as msg
from fedclust.protocol.wire.blobs import BLOB_KEY, inline
from tests.coordinator._service import (
    ANALYST,
    API,
    NAMES,
    FakeCounting,
    auth,
    running_app,
    token,
)

LARGE = np.arange(3 * 400, dtype=np.float64).reshape(3, 400)  # base64 well above 4096 chars


def _services(client: TestClient) -> Services:
    services: Services = client.app.state.services  # type: ignore[attr-defined]
    return services


def _open_job(client: TestClient) -> tuple[Services, JobChannel]:
    """A job created in the database (never started by the runner) and its broker channel."""
    services = _services(client)
    spec = msg.JobCreate(algorithm="ffcm", participants=list(NAMES), k=3, protection="none")
    services.db.create_job("job-broker", spec, n_features=400)
    record = services.db.job("job-broker")
    assert record is not None
    return services, services.broker.open_job(record)


def _count(db: Database, table: str) -> int:
    with db.engine.connect() as connection:
        return int(connection.execute(text(f"SELECT count(*) FROM {table}")).scalar_one())


def test_a_large_payload_is_stored_once_and_fetched_by_hash(tmp_path: Path) -> None:
    spec = msg.StatisticTask.of("fcm_sums", msg.WireArray.of(LARGE), m=2.0)
    with running_app(tmp_path, FakeCounting()) as client:
        services, channel = _open_job(client)
        with ThreadPoolExecutor(len(NAMES)) as pool:
            asks: list[Future[msg.Reply]] = [
                pool.submit(channel.ask, name, spec) for name in NAMES
            ]
            for name in NAMES[:2]:  # two fetch with references, the third inline
                response = client.get(
                    f"{API}/tasks/next", params={"wait": 30, "blobs": "true"},
                    headers=auth(token(name)),
                )
                assert response.status_code == 200, response.text
                doc = response.json()
                name_ref = doc["spec"]["centers"]["data"][BLOB_KEY]
                blob = client.get(f"{API}/blobs/{name_ref}", headers=auth(token(name)))
                assert blob.status_code == 200
                assert hashlib.sha256(blob.content).hexdigest() == name_ref
                fetched = {name_ref: blob.content}
                task = msg.Task.model_validate(inline(doc, fetched.__getitem__))
                assert task.spec == spec
            third = client.get(f"{API}/tasks/next", params={"wait": 30},
                               headers=auth(token(NAMES[2])))
            assert msg.Task.model_validate_json(third.content).spec == spec
            # a participant that fetched no reference to it, and an analyst, get nothing
            assert client.get(f"{API}/blobs/{name_ref}",
                              headers=auth(token(NAMES[2]))).status_code == 404
            assert client.get(f"{API}/blobs/{name_ref}", headers=ANALYST).status_code == 403
            assert client.get(f"{API}/blobs/not-a-digest",
                              headers=auth(token(NAMES[0]))).status_code == 422
            for name in NAMES:
                refusal = {"job_id": "job-broker", "task_id": 0,
                           "reply": {"kind": "refusal", "reason": f"{name} says no"}}
                response = client.post(f"{API}/jobs/job-broker/tasks/0/contribution",
                                       json=refusal, headers=auth(token(name)))
                assert response.status_code == 202, response.text
            replies = [ask.result(timeout=30) for ask in asks]
        assert [r.reason for r in replies if isinstance(r, msg.RefusalReply)] == [
            f"{name} says no" for name in NAMES
        ]
        services.broker.close_job("job-broker")
        db = services.db
        assert (_count(db, "tasks"), _count(db, "replies"), _count(db, "blobs")) == (3, 3, 1)
        stored = db.tasks("job-broker")  # blobs put back for the disclosure ledger
        assert all(msg.StatisticTask.model_validate_json(t.spec_json) == spec for t in stored)


def test_a_waiting_poll_is_woken_by_a_new_task(tmp_path: Path) -> None:
    with running_app(tmp_path, FakeCounting()) as client:
        services, channel = _open_job(client)
        polled: list[int] = []
        started = threading.Event()

        def poll() -> None:
            started.set()
            response = client.get(f"{API}/tasks/next", params={"wait": 60},
                                  headers=auth(token(NAMES[0])))
            polled.append(response.status_code)
            body = {"job_id": "job-broker", "task_id": 0, "reply": {"kind": "ack"}}
            client.post(f"{API}/jobs/job-broker/tasks/0/contribution", json=body,
                        headers=auth(token(NAMES[0])))

        poller = threading.Thread(target=poll)
        poller.start()
        started.wait()
        reply = channel.ask(NAMES[0], msg.ReportCountTask())
        poller.join()
        services.broker.close_job("job-broker")
    assert polled == [200]
    assert isinstance(reply, msg.AckReply)


def test_an_answer_returns_the_next_task(tmp_path: Path) -> None:
    me = auth(token(NAMES[0]))
    ack = {"kind": "ack"}
    with running_app(tmp_path, FakeCounting()) as client:
        services, channel = _open_job(client)

        def two_tasks() -> list[msg.Reply]:
            return [channel.ask(NAMES[0], msg.ReportCountTask()) for _ in range(2)]

        with ThreadPoolExecutor(1) as pool:
            asked = pool.submit(two_tasks)
            first = client.get(f"{API}/tasks/next", params={"wait": 60}, headers=me)
            assert msg.Task.model_validate_json(first.content).task_id == 0
            wrong = client.post(f"{API}/jobs/job-broker/tasks/5/answer",
                                json={"job_id": "job-broker", "task_id": 5, "reply": ack},
                                headers=me)
            assert wrong.status_code == 404  # refused: nothing fetched
            answered = client.post(f"{API}/jobs/job-broker/tasks/0/answer",
                                   params={"wait": 60},
                                   json={"job_id": "job-broker", "task_id": 0, "reply": ack},
                                   headers=me)
            assert answered.status_code == 200, answered.text
            assert msg.Task.model_validate_json(answered.content).task_id == 1
            last = client.post(f"{API}/jobs/job-broker/tasks/1/answer",
                               json={"job_id": "job-broker", "task_id": 1, "reply": ack},
                               headers=me)
            assert last.status_code == 204  # no third task
            replies = asked.result(timeout=30)
        services.broker.close_job("job-broker")
    assert all(isinstance(r, msg.AckReply) for r in replies) and len(replies) == 2


class _CountingDatabase(Database):
    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.writes = 0

    def write(self, batch: Batch) -> None:
        self.writes += 1
        super().write(batch)


def test_a_journal_flush_writes_a_round_in_one_transaction(tmp_path: Path) -> None:
    db = _CountingDatabase(f"sqlite:///{tmp_path / 'c.db'}")
    db.create_all()
    spec = msg.JobCreate(algorithm="ffcm", participants=list(NAMES), k=3, protection="none")
    db.create_job("job-j", spec, n_features=2)
    journal = Journal(db)
    for i, name in enumerate(NAMES):
        journal.add_task(TaskRecord("job-j", name, 0, "report_count", "{}", None), {})
        journal.add_reply(TaskRecord("job-j", name, 0, "report_count", "", f'{{"n":{i}}}'))
    journal.set_progress("job-j", msg.JobProgress(stage="counting"))
    journal.flush_replies()
    journal.flush()  # nothing left: no second transaction
    assert db.writes == 1
    log = db.job_log("job-j")
    assert [log[(name, 0)].reply_json for name in NAMES] == ['{"n":0}', '{"n":1}', '{"n":2}']
    job = db.job("job-j")
    assert job is not None and job.progress == msg.JobProgress(stage="counting")
    db.dispose()


def test_an_older_database_has_its_replies_moved_out_of_the_tasks(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'old.db'}")
    spec = msg.JobCreate(algorithm="ffcm", participants=list(NAMES), k=3, protection="none")
    with db.engine.begin() as connection:
        connection.execute(text(
            "CREATE TABLE jobs (id VARCHAR(64) PRIMARY KEY, algorithm VARCHAR(32), spec TEXT, "
            "n_features INTEGER, state VARCHAR(16), result TEXT, error TEXT, progress TEXT, "
            "created_at DATETIME, updated_at DATETIME)"
        ))
        connection.execute(text(
            "CREATE TABLE tasks (job_id VARCHAR(64), participant VARCHAR(64), task_id INTEGER, "
            "kind VARCHAR(32), spec TEXT, reply TEXT, created_at DATETIME, answered_at "
            "DATETIME, open BOOLEAN NOT NULL, PRIMARY KEY (job_id, participant, task_id))"
        ))
        connection.execute(text("CREATE INDEX ix_tasks_open ON tasks (open)"))
        connection.execute(
            text("INSERT INTO jobs VALUES ('job-old', 'ffcm', :spec, 2, 'running', NULL, NULL, "
                 "NULL, '2026-01-01 00:00:00', '2026-01-01 00:00:00')"),
            {"spec": spec.model_dump_json()},
        )
        connection.execute(text(
            "INSERT INTO tasks VALUES ('job-old', 'participant-0', 0, 'report_count', "
            "'{\"kind\":\"report_count\"}', '{\"kind\":\"ack\"}', '2026-01-01 00:00:00', "
            "'2026-01-01 00:00:01', 0), ('job-old', 'participant-0', 1, 'report_count', "
            "'{\"kind\":\"report_count\"}', NULL, '2026-01-01 00:00:02', NULL, 1)"
        ))
    db.migrate()  # fedclust coordinator migrate
    log = db.job_log("job-old")
    assert {key: (r.spec_json, r.reply_json) for key, r in log.items()} == {
        ("participant-0", 0): ('{"kind":"report_count"}', '{"kind":"ack"}'),
        ("participant-0", 1): ('{"kind":"report_count"}', None),
    }
    with db.engine.connect() as connection:
        columns = {row[1] for row in connection.execute(text("PRAGMA table_info(tasks)"))}
    assert "reply" not in columns
    db.dispose()


def test_a_timed_out_task_is_withdrawn_and_a_resumed_run_replays_the_dropout(
    tmp_path: Path,
) -> None:
    """The participant that did not answer in time finds no task and its late answer is
    refused; a restarted coordinator replaying the job raises the same timeout at once
    (instead of asking again and perhaps getting an answer the first run never used), and
    the disclosure ledger counts nothing for the unanswered task."""
    db = Database(f"sqlite:///{tmp_path / 'c.db'}")
    db.create_all()
    spec = msg.JobCreate(algorithm="ffcm", participants=list(NAMES), k=3, protection="none")
    job = db.create_job("job-t", spec, n_features=2)
    gone = NAMES[0]
    broker = Broker(db, timeout=0.2)
    channel = broker.open_job(job)
    with pytest.raises(TaskTimeoutError) as info:
        channel.ask(gone, msg.ReportCountTask())
    reason = str(info.value)
    assert reason == f"participant '{gone}' did not answer task 0 (report_count) within 0.2 s"
    assert broker.poll(gone, blobs=False) is None
    late = msg.Contribution(job_id="job-t", task_id=0, reply=msg.AckReply())
    with pytest.raises(ContributionRejectedError) as refused:
        broker.submit(gone, late)
    assert refused.value.status_code == 409
    assert "no longer open" in refused.value.message
    broker.close_job("job-t")
    broker.close()

    restarted = Broker(db, timeout=60.0)
    replay = restarted.open_job(job)
    start = time.monotonic()
    with pytest.raises(TaskTimeoutError) as again:
        replay.ask(gone, msg.ReportCountTask())
    assert str(again.value) == reason and time.monotonic() - start < 5
    assert [t.timed_out for t in db.tasks("job-t")] == [reason]
    assert ledger(job, db.tasks("job-t")).disclosures == []
    restarted.close()
    db.dispose()
