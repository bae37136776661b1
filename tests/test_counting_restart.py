"""Fault injection: the counting service killed (SIGKILL) in the middle of a Paillier job and
started again on its database.

Under Paillier the counting service holds each job's private key and decrypts every round's
aggregate, so it is needed all through the job. The coordinator and the agents run in this
process, the counting service as its own (``fedclust counter serve``). The coordinator waits
out the outage (``CountingClient``: jittered backoff), the restarted service reads the job's
key back from its database, and the job must give the uninterrupted (simulator's) result.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from fedclust.config_files import FederationFiles
from fedclust.coordinator.app import create_app as create_coordinator
from fedclust.coordinator.settings import CoordinatorSettings
from fedclust.protocol.messages import JobCreate
from tests._servers import ServerThread
from tests.test_e2e_http import (
    IDS,
    SEED,
    Agents,
    _centers,
    client_of,
    free_port,
    simulated,
    write_files,
)


def _start_counting(files: FederationFiles, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "fedclust", "counter", "serve", "--config",
             str(files.counting)],
            stdout=out, stderr=subprocess.STDOUT, cwd=files.root,
        )
    deadline = time.monotonic() + 60
    while True:
        assert proc.poll() is None, f"the counting service exited:\n{log.read_text()[-2000:]}"
        try:
            if httpx.get(f"{files.counting_url}/api/v1/health", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass  # not up yet
        assert time.monotonic() < deadline, "the counting service did not come up in 60 s"
        time.sleep(0.1)


@pytest.mark.parametrize("algorithm", ["ffcm", "fkm"])
def test_a_killed_counting_service_comes_back_and_the_job_gives_the_same_result(
    tmp_path: Path, algorithm: str
) -> None:
    files = write_files(tmp_path, coordinator_port=free_port(), counting_port=free_port())
    log = tmp_path / "counting.log"
    counting = _start_counting(files, log)
    coordinator = ServerThread(
        create_coordinator(CoordinatorSettings.from_file(files.coordinator)),
        int(files.coordinator_url.rsplit(":", 1)[1]),
    ).start()
    agents = Agents(files).start()
    client = client_of(files)
    try:
        client.wait_enrolled(list(IDS), timeout=60)
        spec = JobCreate.model_validate({
            "algorithm": algorithm, "participants": list(IDS), "seed": SEED,
            "k_range": (2, 3), "max_rounds": 10, "protection": "paillier",
        })
        job = client.submit(spec)
        deadline = time.monotonic() + 180
        while True:  # kill it once the sweep has begun its rounds
            job = client.job(job.id)
            assert job.state in ("pending", "running"), job.error
            p = job.progress
            if p is not None and p.k is not None and (p.round or 0) >= 1:
                break
            assert time.monotonic() < deadline, "the job did not reach its first round"
            time.sleep(0.02)
        counting.send_signal(signal.SIGKILL)
        counting.wait(timeout=10)
        assert client.job(job.id).state == "running", "killed too late to test anything"
        time.sleep(1.0)  # an outage, not just a restart
        counting = _start_counting(files, log)
        job = client.follow(job.id, poll=0.05, timeout=180)
        assert job.state == "succeeded", f"{job.error}; log:\n{log.read_text()[-2000:]}"
        got, want = client.result(job.id), simulated(spec)
        assert got.k_selected == want.k_selected
        for g, w in zip(got.sweep, want.sweep, strict=True):
            assert g.k == w.k and g.rounds == w.rounds
            assert g.fed_fuzzy_db == pytest.approx(w.fed_fuzzy_db, rel=1e-9, abs=1e-12)
            np.testing.assert_allclose(_centers(g), _centers(w), rtol=1e-9, atol=1e-12)
    finally:
        client.close()
        agents.stop()
        coordinator.stop()
        if counting.poll() is None:
            counting.terminate()
            counting.wait(timeout=10)
