"""The participant's audit log: the hash chain, continuing it, tampering, and the summary."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from fedclust.participant.audit import GENESIS, AuditError, AuditLog, canonical, show, verify
from fedclust.protocol.wire import messages as msg


def contribution(task_id: int, k: int = 3) -> bytes:
    reply = msg.StatisticReply(
        fields={"u_sum": msg.WireArray.of(np.ones(k)),
                "weighted_sum": msg.WireArray.of(np.ones((k, 2)))}
    )
    body = msg.Contribution(job_id="job-1", task_id=task_id, reply=reply)
    return body.model_dump_json().encode("utf-8")


def enrolment() -> bytes:
    body = msg.Enrolment(n_features=2, allowed_algorithms=["ffcm", "fkm"])
    return body.model_dump_json().encode("utf-8")


def count_report() -> bytes:
    return msg.CountReport(job_id="job-1", count=137).model_dump_json().encode("utf-8")


def write_log(path: Path, n_contributions: int = 3) -> list[bytes]:
    log = AuditLog(path)
    bodies = [enrolment()]
    log.record(job=None, task_id=None, recipient="coordinator", what="enrolment",
               kind="enrolment", body=bodies[0])
    bodies.append(count_report())
    log.record(job="job-1", task_id=0, recipient="counting", what="count_report",
               kind="count_report", body=bodies[-1])
    for i in range(n_contributions):
        bodies.append(contribution(i + 1, k=2 + i % 2))
        log.record(job="job-1", task_id=i + 1, recipient="coordinator", what="contribution",
                   kind="fcm_sums", body=bodies[-1])
    return bodies


def lines(path: Path) -> list[str]:
    return path.read_text(encoding="ascii").splitlines()


def test_records_chain_and_hash_the_exact_bytes(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    bodies = write_log(path)
    records = [json.loads(line) for line in lines(path)]
    assert [r["seq"] for r in records] == [1, 2, 3, 4, 5]
    assert records[0]["prev"] == GENESIS
    for before, after, line in zip(records, records[1:], lines(path), strict=False):
        assert after["prev"] == hashlib.sha256(line.encode()).hexdigest()
        assert before["hash"] == hashlib.sha256(
            canonical({k: v for k, v in before.items() if k != "hash"}).encode()
        ).hexdigest()
    assert [r["sha256"] for r in records] == [hashlib.sha256(b).hexdigest() for b in bodies]
    assert records[1]["recipient"] == "counting" and records[1]["job"] == "job-1"
    assert records[0]["task_id"] is None and records[0]["job"] is None
    fields = {f["name"]: f for f in records[2]["fields"]}
    assert fields["reply.fields.u_sum"] == {
        "name": "reply.fields.u_sum", "shape": [2], "protection": "plain"
    }
    assert fields["reply.fields.weighted_sum"]["shape"] == [2, 2]
    assert fields["task_id"]["shape"] is None
    # names, shapes and protection only: no value (such as the count 137) is ever written
    assert all(set(f) == {"name", "shape", "protection"} for r in records for f in r["fields"])
    report = verify(path)
    assert report.ok and report.records == 5


def test_reopening_continues_the_chain(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_log(path, n_contributions=1)
    last = lines(path)[-1]
    AuditLog(path).record(job="job-2", task_id=0, recipient="coordinator",
                          what="contribution", kind="fcm_sums", body=contribution(0))
    new = json.loads(lines(path)[-1])
    assert new["seq"] == 4
    assert new["prev"] == hashlib.sha256(last.encode()).hexdigest()
    assert verify(path).ok and verify(path).records == 4


def test_reopening_a_log_with_a_damaged_last_line_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_log(path, n_contributions=1)
    text = lines(path)
    text[-1] = text[-1].replace('"counting"', '"coordinator"').replace(
        '"what":"contribution"', '"what":"enrolment"'
    )
    path.write_text("\n".join(text) + "\n", encoding="ascii")
    with pytest.raises(AuditError, match="line 3"):
        AuditLog(path)
    path.write_text("\n".join(lines(path)) + "\n" + '{"seq": 4', encoding="ascii")
    with pytest.raises(AuditError, match="line 4 is incomplete"):
        AuditLog(path)


def rewrite(path: Path, text: list[str]) -> None:
    path.write_text("\n".join(text) + "\n", encoding="ascii")


def test_changing_one_value_is_detected_at_that_line(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_log(path)
    text = lines(path)
    text[2] = text[2].replace('"shape":[2]', '"shape":[9]', 1)
    rewrite(path, text)
    report = verify(path)
    assert (report.ok, report.broken_line, report.records) == (False, 3, 2)
    assert report.reason is not None and "hash" in report.reason


def test_a_changed_value_with_a_recomputed_hash_breaks_the_next_link(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_log(path)
    text = lines(path)
    record = json.loads(text[1])
    record["recipient"] = "coordinator"
    del record["hash"]
    record["hash"] = hashlib.sha256(canonical(record).encode()).hexdigest()
    text[1] = canonical(record)
    rewrite(path, text)
    report = verify(path)
    assert report.broken_line == 3
    assert report.reason is not None and "link" in report.reason


def test_deleting_a_line_is_detected(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_log(path)
    text = lines(path)
    del text[1]
    rewrite(path, text)
    report = verify(path)
    assert report.broken_line == 2
    assert report.reason is not None and "seq" in report.reason


def test_reordering_lines_is_detected(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_log(path)
    text = lines(path)
    text[2], text[3] = text[3], text[2]
    rewrite(path, text)
    assert verify(path).broken_line == 3


def test_a_reformatted_line_is_detected(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_log(path)
    text = lines(path)
    text[3] = json.dumps(json.loads(text[3]), indent=None)  # same content, spaces added
    rewrite(path, text)
    report = verify(path)
    assert report.broken_line == 4
    assert report.reason is not None and "canonical" in report.reason


def test_show_summarises_per_job_recipient_and_kind(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    write_log(path, n_contributions=3)
    summary = show(path)
    assert summary.records == 5
    assert set(summary.jobs) == {None, "job-1"}
    assert [k.kind for k in summary.jobs[None]["coordinator"]] == ["enrolment"]
    job = summary.jobs["job-1"]
    assert set(job) == {"coordinator", "counting"}
    (counts,) = job["counting"]
    assert (counts.what, counts.messages) == ("count_report", 1)
    assert {f.name: f.shapes for f in counts.fields}["count"] is None
    (sums,) = job["coordinator"]
    assert (sums.what, sums.kind, sums.messages) == ("contribution", "fcm_sums", 3)
    fields = {f.name: f for f in sums.fields}
    assert fields["reply.fields.u_sum"].shapes == ((2,), (3,))  # K = 2 and 3 were sent
    assert fields["reply.fields.weighted_sum"].shapes == ((2, 2), (3, 2))
    assert {f.protection for f in sums.fields} == {"plain"}
    only = show(path, job="job-1")
    assert only.records == 4 and set(only.jobs) == {"job-1"}
    assert json.loads(json.dumps(only.to_json()))["jobs"][0]["job"] == "job-1"
