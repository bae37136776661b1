"""No traceback in ordinary use: Ctrl-C while following a job, and an output pipe closed by its
reader (``fedclust audit show LOG | head -1``), each in a real ``fedclust`` process."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from fedclust.cli import BROKEN_PIPE_EXIT, INTERRUPTED_EXIT
from fedclust.participant.audit import AuditLog
from fedclust.protocol.wire import messages as msg

RUNNING = msg.JobPublic(
    id="job-1", state="running", created_at=datetime.now(UTC), updated_at=datetime.now(UTC),
    spec=msg.JobCreate(algorithm="fkm", participants=["a", "b", "c"], k_range=(2, 4)),
    progress=msg.JobProgress(stage="clustering", k=3, round=2, waiting_for=["b"]),
).model_dump_json().encode()


class _Coordinator(BaseHTTPRequestHandler):
    """A coordinator whose job job-1 runs for ever."""

    def do_GET(self) -> None:
        found = self.path == "/api/v1/jobs/job-1"
        self.send_response(200 if found else 404)
        self.send_header("Content-Type", "application/json")
        body = RUNNING if found else b'{"detail": "not here"}'
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:  # quiet
        pass


@pytest.fixture
def coordinator() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Coordinator)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_ctrl_c_while_following_a_job_says_how_to_attach_again(coordinator: str) -> None:
    env = {**os.environ, "FEDCLUST_COORDINATOR_URL": coordinator, "FEDCLUST_TOKEN": "t"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "fedclust", "job", "attach", "job-1"], env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        for line in proc.stderr or ():
            lines.put(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        seen = [lines.get(timeout=120) for _ in range(2)]  # the starting line, then progress
        assert seen[1] == "fedclust job attach: progress: clustering  K=3\n", seen
        proc.send_signal(signal.SIGINT)
        status = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(timeout=10)
    rest = "".join(lines.queue)
    assert status == INTERRUPTED_EXIT, rest
    assert "Traceback" not in rest
    assert rest.splitlines()[-1] == (
        "fedclust job attach: interrupted; the job goes on: fedclust job attach job-1"
    )


def _audit_log(path: Path) -> None:
    log = AuditLog(path)
    for job in ("job-a", "job-b"):
        reply = msg.KfedCentersReply(centers=msg.WireArray.of(np.zeros((3, 2))))
        body = msg.Contribution(job_id=job, task_id=0, reply=reply)
        log.record(job=job, task_id=0, recipient="coordinator", what="contribution",
                   kind="kfed_centers", body=body.model_dump_json().encode())


@pytest.mark.parametrize(("args", "status"), [
    (["audit", "show", "LOG"], BROKEN_PIPE_EXIT),
    (["simulate", "--help"], 0),  # argparse prints help itself and ignores a failed write
], ids=["audit-show", "help"])
def test_a_reader_that_went_away_ends_the_command_quietly(
    args: list[str], status: int, tmp_path: Path
) -> None:
    log = tmp_path / "audit.jsonl"
    _audit_log(log)
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first write: every write fails
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "fedclust", *[str(log) if a == "LOG" else a for a in args]],
            stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120,
        )
    finally:
        os.close(write_end)
    assert proc.returncode == status
    assert proc.stderr == ""  # no traceback, no "Exception ignored"
