"""Fault injection: the counting service killed (SIGKILL) in the middle of a Paillier job and
started again on its database.

Under Paillier the counting service holds each job's private key and decrypts every round's
aggregate, so it is needed all through the job. The coordinator and the agents run in this
process, the counting service as its own (``fedclust counter serve``). The coordinator waits
out the outage (``CountingClient``: jittered backoff), the restarted service reads the job's
key back from its database, and the job must give the uninterrupted (simulator's) result.

Under masking (the default protection) the counting service is needed at the count stage
only: the coordinator gives it the job's roster, the agents report their N_l to it and the
coordinator asks for ΣN_l. There the service is down twice: not yet started when the job is
submitted (the coordinator waits to hand over the roster), and killed while the agents report
their counts (each agent retries its report) and started again after a few seconds on its
database, which holds the roster.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from fedclust.client import AnalystClient
from fedclust.config_files import FederationFiles
from fedclust.coordinator.app import create_app as create_coordinator
from fedclust.coordinator.settings import CoordinatorSettings
from fedclust.demo import free_port
from fedclust.protocol.wire.messages import JobCreate, JobProgress
from tests._servers import ServerThread
from tests.test_e2e_http import (
    IDS,
    SEED,
    Agents,
    _centers,
    client_of,
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


def _start_coordinator(files: FederationFiles) -> ServerThread:
    return ServerThread(
        create_coordinator(CoordinatorSettings.from_file(files.coordinator)),
        int(files.coordinator_url.rsplit(":", 1)[1]),
    ).start()


def _kill(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        proc.wait(timeout=10)


def _assert_simulated(client: AnalystClient, job_id: str, spec: JobCreate, rtol: float) -> None:
    """The job's result is the simulator's: the same K, rounds, FedFuzzDB and centers."""
    got, want = client.result(job_id), simulated(spec)
    assert got.k_selected == want.k_selected
    for g, w in zip(got.sweep, want.sweep, strict=True):
        assert (g.k, g.rounds) == (w.k, w.rounds)
        assert g.fed_fuzzy_db == pytest.approx(w.fed_fuzzy_db, rel=rtol, abs=1e-12)
        np.testing.assert_allclose(_centers(g), _centers(w), rtol=rtol, atol=1e-12)


@pytest.mark.parametrize("algorithm", ["ffcm", "fkm"])
def test_a_killed_counting_service_comes_back_and_the_job_gives_the_same_result(
    tmp_path: Path, algorithm: str
) -> None:
    files = write_files(tmp_path, coordinator_port=free_port(), counting_port=free_port())
    log = tmp_path / "counting.log"
    counting = _start_counting(files, log)
    coordinator = _start_coordinator(files)
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
        _kill(counting)
        assert client.job(job.id).state == "running", "killed too late to test anything"
        time.sleep(1.0)  # an outage, not just a restart
        counting = _start_counting(files, log)
        job = client.follow(job.id, poll=0.05, timeout=180)
        assert job.state == "succeeded", f"{job.error}; log:\n{log.read_text()[-2000:]}"
        _assert_simulated(client, job.id, spec, rtol=1e-9)
    finally:
        client.close()
        agents.stop()
        coordinator.stop()
        _stop(counting)


def _progress(client: AnalystClient, job_id: str) -> JobProgress | None:
    """The job's progress (None before it starts); fails the test once the job has ended."""
    job = client.job(job_id)
    assert job.state in ("pending", "running"), job.error
    return job.progress


def _at(client: AnalystClient, job_id: str, stage: str, waiting_for: list[str]) -> bool:
    progress = _progress(client, job_id)
    return progress is not None and (progress.stage, progress.waiting_for) == (stage, waiting_for)


def _reach(client: AnalystClient, job_id: str, stage: str, waiting_for: list[str]) -> None:
    deadline = time.monotonic() + 60
    while not _at(client, job_id, stage, waiting_for):
        assert time.monotonic() < deadline, f"the job did not reach {stage!r}"
        time.sleep(0.02)


def _hold(
    client: AnalystClient, job_id: str, stage: str, waiting_for: list[str],
    seen: Callable[[], bool],
) -> None:
    """The job stays at ``stage`` waiting for ``waiting_for`` for a second at least, and
    until ``seen`` (that the outage was met) is true."""
    start = time.monotonic()
    while time.monotonic() < start + 1.0 or not seen():
        assert _at(client, job_id, stage, waiting_for), _progress(client, job_id)
        assert time.monotonic() < start + 60, "the outage was not met"
        time.sleep(0.05)


MASKED_SPECS: dict[str, dict[str, Any]] = {
    "ffcm": {"k_range": (2, 3), "standardise": True, "max_rounds": 10},
    "fedfcm": {"k_range": (2, 3), "local_k_range": (2, 3)},
}


@pytest.mark.parametrize("algorithm", sorted(MASKED_SPECS))
def test_a_masking_job_waits_out_the_counting_service_at_its_count_stage(
    tmp_path: Path, algorithm: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    files = write_files(tmp_path, coordinator_port=free_port(), counting_port=free_port())
    log = tmp_path / "counting.log"
    coordinator = _start_coordinator(files)
    agents = Agents(files).start()
    client = client_of(files)
    counting: subprocess.Popen[bytes] | None = None
    try:
        # The counting service is not started yet; the agents enrol and go offline until
        # the job's roster is in, so that it can be down again before any count report.
        client.wait_enrolled(list(IDS), timeout=60)
        agents.stop()
        spec = JobCreate.model_validate(
            {"algorithm": algorithm, "participants": list(IDS), "seed": SEED}
            | MASKED_SPECS[algorithm]
        )
        assert spec.protection == "masking"
        job = client.submit(spec)

        def warned(prefix: str) -> set[int | None]:
            """The threads that logged ``prefix`` (a failed request to the service)."""
            return {r.thread for r in caplog.records if r.getMessage().startswith(prefix)}

        roster = f"the counting service at {files.counting_url}: PUT /jobs/{job.id}/roster"
        _reach(client, job.id, "starting", [])
        _hold(client, job.id, "starting", [], lambda: bool(warned(roster)))
        counting = _start_counting(files, log)
        _reach(client, job.id, "declaring", list(IDS))  # the roster is in
        _kill(counting)
        agents = Agents(files).start()
        _reach(client, job.id, "counting", list(IDS))
        report = f"count report of job {job.id} to "
        _hold(client, job.id, "counting", list(IDS), lambda: len(warned(report)) == len(IDS))
        counting = _start_counting(files, log)  # on its database, which holds the roster
        job = client.follow(job.id, poll=0.05, timeout=120)
        assert job.state == "succeeded", f"{job.error}; log:\n{log.read_text()[-2000:]}"
        _assert_simulated(client, job.id, spec, rtol=1e-12)
    finally:
        client.close()
        agents.stop()
        coordinator.stop()
        if counting is not None:
            _stop(counting)
