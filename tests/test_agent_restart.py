"""Fault injection: a participant agent killed (SIGKILL) in the middle of a job and restarted.

The coordinator and counting service run on real sockets in this process, two agents in
threads and the third, ``hospital-c``, as its own process (``fedclust participant run``). At
a point of the job read off its progress the third is killed with SIGKILL and started again
on the same state folder. The agent saved, before each answer left, what the job needs from
it (held local centers, each secure stage's answer and the round in progress, the job keys),
so the job must finish with the result of an uninterrupted run: the simulator's.
"""

from __future__ import annotations

import dataclasses
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fedclust.client import AnalystClient
from fedclust.config_files import FederationFiles
from fedclust.demo import free_port
from fedclust.protocol.wire.messages import JobCreate, JobPublic
from tests._servers import serve_coordinator, serve_counting
from tests.test_e2e_http import (
    IDS,
    SEED,
    Agents,
    _centers,
    client_of,
    simulated,
    write_files,
)

RESTARTED = IDS[-1]


@dataclass
class Federation:
    files: FederationFiles
    client: AnalystClient
    log: Path
    agent: subprocess.Popen[bytes] | None = None

    def start_agent(self) -> None:
        with self.log.open("ab") as out:
            self.agent = subprocess.Popen(
                [sys.executable, "-m", "fedclust", "participant", "run",
                 "--config", str(self.files.participants[RESTARTED])],
                stdout=out, stderr=subprocess.STDOUT, cwd=self.files.root,
            )

    def kill_agent(self) -> None:
        assert self.agent is not None
        self.agent.send_signal(signal.SIGKILL)
        self.agent.wait(timeout=10)

    def stop_agent(self) -> None:
        if self.agent is not None and self.agent.poll() is None:
            self.agent.terminate()
            try:
                self.agent.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.agent.kill()
                self.agent.wait()


@pytest.fixture(scope="module")
def federation(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Federation]:
    root = tmp_path_factory.mktemp("restart")
    files = write_files(root, coordinator_port=free_port(), counting_port=free_port())
    counting = serve_counting(files)
    coordinator = serve_coordinator(files)
    others = {pid: path for pid, path in files.participants.items() if pid != RESTARTED}
    in_threads = Agents(dataclasses.replace(files, participants=others)).start()
    fed = Federation(files, client_of(files), root / f"{RESTARTED}.log")
    fed.start_agent()
    try:
        fed.client.wait_enrolled(list(IDS), timeout=60)
        yield fed
    finally:
        fed.client.close()
        fed.stop_agent()
        in_threads.stop()
        coordinator.stop()
        counting.stop()


def _reached(job: JobPublic, point: str, first_k: int) -> bool:
    """Whether the job's progress has passed the kill point: ``early`` is its first round
    of anything, ``mid`` a round of the sweep's second K."""
    p = job.progress
    if p is None:
        return False
    if point == "early":
        return (p.round or 0) >= 1
    return p.k is not None and p.k > first_k and (p.round or 0) >= 1


CASES: dict[str, dict[str, Any]] = {
    "fedfcm": {"algorithm": "fedfcm", "k_range": (2, 4), "local_k_range": (2, 3)},
    "fkm": {"algorithm": "fkm", "k_range": (2, 4), "standardise": True},
    "ffcm": {"algorithm": "ffcm", "k_range": (2, 4), "standardise": True, "max_rounds": 15},
    "ffcm-paillier": {
        "algorithm": "ffcm", "k_range": (2, 3), "max_rounds": 10, "protection": "paillier",
    },
}


@pytest.mark.parametrize("point", ["early", "mid"])
@pytest.mark.parametrize("case", list(CASES))
def test_a_killed_agent_rejoins_and_the_job_gives_the_uninterrupted_result(
    federation: Federation, case: str, point: str
) -> None:
    spec = JobCreate.model_validate(
        {**CASES[case], "participants": list(IDS), "seed": SEED}
    )
    client = federation.client
    job = client.submit(spec)
    deadline = time.monotonic() + 120
    while not _reached(job, point, spec.ks[0]):
        assert job.state in ("pending", "running"), f"the job ended first: {job.state}"
        assert time.monotonic() < deadline, f"the job did not reach the {point} point"
        time.sleep(0.01)
        job = client.job(job.id)
    federation.kill_agent()
    killed_at = client.job(job.id)
    assert killed_at.state == "running", "killed too late to test anything"
    federation.start_agent()
    job = client.follow(job.id, poll=0.05, timeout=180)
    assert job.state == "succeeded", (
        f"{job.error}; agent log:\n{federation.log.read_text()[-3000:]}"
    )
    got, want = client.result(job.id), simulated(spec)
    assert got.k_selected == want.k_selected
    for g, w in zip(got.sweep, want.sweep, strict=True):
        assert g.k == w.k and g.rounds == w.rounds
        assert g.fed_fuzzy_db == pytest.approx(w.fed_fuzzy_db, rel=1e-12, abs=1e-12)
        np.testing.assert_allclose(_centers(g), _centers(w), rtol=1e-12, atol=1e-12)
