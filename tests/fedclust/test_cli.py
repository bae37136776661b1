"""The ``fedclust simulate`` command: flags as spelled in the issue, JSON document, errors;
the ``fedclust audit verify|show`` commands."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fedclust.cli import main


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fedclust", *args], capture_output=True, text=True, timeout=300
    )


def test_simulate_json_document_has_the_issue_fields() -> None:
    proc = run_cli(
        "simulate", "--dataset", "motivational", "--algorithm", "fedfcm",
        "--k-range", "2:6", "--seed", "1", "--json", "--local", "--local-range", "2:5",
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["algorithm"] == "fedfcm"
    assert [e["k"] for e in doc["sweep"]] == [2, 3, 4, 5, 6]
    for entry in doc["sweep"]:
        assert set(entry) >= {"k", "fed_fuzzy_db", "centers"}
        assert np.asarray(entry["centers"]).shape == (entry["k"], 2)
        assert entry["fed_fuzzy_db"] > 0
    scores = {e["k"]: e["fed_fuzzy_db"] for e in doc["sweep"]}
    assert doc["k_selected"] == min(scores, key=lambda k: scores[k])
    assert len(doc["local_k"]) == 3
    assert all(2 <= k <= 5 for k in doc["local_k"])


def test_simulate_single_k_gives_one_sweep_entry(capsys: pytest.CaptureFixture[str]) -> None:
    status = main(
        ["simulate", "--dataset", "garst-grid", "--participants", "4", "--beta", "1",
         "--algorithm", "fkm", "--k", "16", "--seed", "0", "--json"]
    )
    assert status == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["k_selected"] == 16
    assert len(doc["sweep"]) == 1 and doc["sweep"][0]["k"] == 16
    assert doc.get("local_k") is None  # not asked for: absent or null in the document


def test_simulate_human_table_marks_the_selected_k(capsys: pytest.CaptureFixture[str]) -> None:
    status = main(
        ["simulate", "--dataset", "motivational", "--algorithm", "ffcm", "--k-range", "2:4",
         "--seed", "3"]
    )
    assert status == 0
    out = capsys.readouterr().out
    assert "FedFuzzDB" in out
    assert "selected K =" in out
    selected = int(out.split("selected K = ")[1].split()[0])
    marked = [line.split() for line in out.splitlines() if line.lstrip().startswith("*")]
    assert len(marked) == 1
    assert int(marked[0][1]) == selected


def test_simulate_reads_a_csv_split_by_a_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = np.random.default_rng(0)
    rows = ["region,a,b"]
    for region in ("north", "south", "east"):
        for center in ((0.0, 0.0), (5.0, 5.0)):
            for x, y in rng.normal(center, 0.3, size=(40, 2)):
                rows.append(f"{region},{x:.5f},{y:.5f}")
    path = tmp_path / "table.csv"
    path.write_text("\n".join(rows) + "\n")
    status = main(
        ["simulate", "--data", str(path), "--split-by", "region", "--columns", "a,b",
         "--algorithm", "fedfcm", "--k-range", "2:4", "--seed", "0", "--json"]
    )
    assert status == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["participants"] == 3
    assert doc["k_selected"] == 2
    centers = np.sort(np.asarray(doc["sweep"][0]["centers"])[:, 0])
    np.testing.assert_allclose(centers, [0.0, 5.0], atol=0.2)  # 40 points/blob/site, sd 0.3


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--dataset", "motivational", "--algorithm", "fedfcm", "--k", "1"], "k"),
        (["--dataset", "no-such-set", "--algorithm", "fedfcm", "--k", "3"], "no-such-set"),
        (["--data", "/nonexistent/file.csv", "--algorithm", "fkm", "--k", "3"], "file.csv"),
        (["--dataset", "motivational", "--algorithm", "ffcm", "--k", "3", "--min-cohort", "4"],
         "at least 4"),
        (["--dataset", "motivational", "--algorithm", "ffcm", "--k", "3", "--max-rows", "100"],
         "declares row_bound=512, above the job's max_rows=100: raise max_rows (--max-rows)"),
        (["--dataset", "motivational", "--algorithm", "ffcm", "--k", "3", "--value-bound",
          "0.5"], "declares value_bound=1.0, above the job's value_bound=0.5"),
    ],
    ids=["k-below-2", "unknown-dataset", "missing-file", "cohort-too-small",
         "max-rows-below-a-declaration", "value-bound-below-a-declaration"],
)
def test_simulate_bad_input_is_a_clear_error(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(["simulate", *args])
    assert status == 2
    lines = capsys.readouterr().err.splitlines(keepends=True)
    err = "".join(line for line in lines if ": progress: " not in line)  # the starting line
    assert err.startswith("fedclust simulate: error:")
    assert message in err


def test_simulate_rejects_a_malformed_k_range() -> None:
    proc = run_cli("simulate", "--dataset", "motivational", "--algorithm", "fkm",
                   "--k-range", "5-2")
    assert proc.returncode == 2
    assert "expected A:B" in proc.stderr


def test_simulate_over_the_in_process_service_equals_direct(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["simulate", "--dataset", "motivational", "--algorithm", "ffcm", "--k-range", "3:4",
            "--seed", "5", "--standardise", "--json"]
    assert main([*args, "--transport", "asgi"]) == 0
    served = json.loads(capsys.readouterr().out)
    assert main(args) == 0
    direct = json.loads(capsys.readouterr().out)
    for entry in direct["sweep"]:
        # ground truth stays with the participants on the service
        entry["ari"] = entry["client_weighted_ari"] = None
    assert served == direct


# -- fedclust audit -------------------------------------------------------------------------------
def _audit_log(path: Path) -> None:
    from fedclust.participant.audit import AuditLog
    from fedclust.protocol.wire import messages as msg

    log = AuditLog(path)
    enrol = msg.Enrolment(n_features=2, allowed_algorithms=["kfed"])
    log.record(job=None, task_id=None, recipient="coordinator", what="enrolment",
               kind="enrolment", body=enrol.model_dump_json().encode())
    for job, task_id in (("job-a", 0), ("job-a", 1), ("job-b", 0)):
        reply = msg.KfedCentersReply(centers=msg.WireArray.of(np.zeros((3, 2))))
        body = msg.Contribution(job_id=job, task_id=task_id, reply=reply)
        log.record(job=job, task_id=task_id, recipient="coordinator", what="contribution",
                   kind="kfed_centers", body=body.model_dump_json().encode())


def test_audit_verify_exit_status(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "audit.jsonl"
    _audit_log(log)
    assert main(["audit", "verify", str(log)]) == 3  # intact, but nothing vouches for it
    assert "UNVERIFIED: 4 records, chain intact, but no --public-key" in capsys.readouterr().err
    lines = log.read_text().splitlines()
    lines[2] = lines[2].replace('"task_id":1', '"task_id":7')  # change one value
    log.write_text("\n".join(lines) + "\n")
    assert main(["audit", "verify", str(log)]) == 1
    assert "line 3" in capsys.readouterr().err
    assert main(["audit", "verify", str(tmp_path / "missing.jsonl")]) == 2


def test_audit_show_text_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "audit.jsonl"
    _audit_log(log)
    assert main(["audit", "show", str(log)]) == 0
    out = capsys.readouterr().out
    assert "job job-a" in out and "job job-b" in out and "not tied to a job" in out
    assert "contribution (kfed_centers): 2 message(s)" in out
    assert "reply.centers  [3×2]  plain" in out
    assert main(["audit", "show", str(log), "--job", "job-b", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["records"] == 1 and [j["job"] for j in doc["jobs"]] == ["job-b"]
    (kind,) = doc["jobs"][0]["recipients"]["coordinator"]
    fields = {f["name"]: f for f in kind["fields"]}
    assert fields["reply.centers"] == {"name": "reply.centers", "protection": "plain",
                                       "shapes": [[3, 2]]}
