"""A participant's agent stops for good in the middle of a masked job over the service.

Four organisations, the coordinator and counting service on real sockets, a short task
timeout. When the sweep reaches its second K, one agent stops answering (as when a
coordinator withholds its tasks to force a dropout). Statistics over all four were released
by then, so a sum over the three left would give the fourth's by difference (its N_l among
them, issue 20): the job stops after one task timeout with one line saying why, and nothing
over the three is unmasked. An agent down when a job is submitted drops out at the
declaration, before anything was released, and the job goes on over the other three.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from fedclust.client import AnalystClient
from fedclust.config_files import write_federation
from fedclust.demo import free_port
from fedclust.participant.agent import run_agent
from fedclust.participant.config import ParticipantConfig
from fedclust.protocol.wire.messages import JobCreate
from tests._servers import serve_coordinator, serve_counting
from tests.test_e2e_http import client_of

IDS = ("org-a", "org-b", "org-c", "org-d")
GONE = "org-d"
TIMEOUT = 3.0


@dataclass
class Federation:
    """Four agents (each with its stop event), the two services and an analyst client."""

    stops: dict[str, threading.Event]
    threads: dict[str, threading.Thread]
    client: AnalystClient


@contextmanager
def _federation(tmp_path: Path) -> Iterator[Federation]:
    rng = np.random.default_rng(8)
    data = {}
    for i, pid in enumerate(IDS):
        X = np.concatenate([c + rng.normal(scale=0.5, size=(30 + 5 * i, 2))
                            for c in ([0.0, 0.0], [3.0, 0.0], [0.0, 3.0])])
        np.savetxt(tmp_path / f"{pid}.csv", X, delimiter=",", header="x,y", comments="")
        data[pid] = f"{pid}.csv"
    files = write_federation(
        tmp_path, data=data, columns=["x", "y"], coordinator_port=free_port(),
        counting_port=free_port(), task_timeout_seconds=TIMEOUT,
    )
    counting = serve_counting(files)
    coordinator = serve_coordinator(files)
    stops = {pid: threading.Event() for pid in IDS}
    threads = {
        pid: threading.Thread(
            target=run_agent, args=(ParticipantConfig.from_file(files.participants[pid]),),
            kwargs={"stop": stops[pid], "poll_wait": 0.5}, daemon=True,
        )
        for pid in IDS
    }
    for thread in threads.values():
        thread.start()
    client = client_of(files)
    try:
        client.wait_enrolled(list(IDS), timeout=60)
        yield Federation(stops, threads, client)
    finally:
        client.close()
        for stop in stops.values():
            stop.set()
        for thread in threads.values():
            thread.join(timeout=30)
        coordinator.stop()
        counting.stop()


def test_a_participant_gone_mid_job_stops_the_job_without_revealing_it(tmp_path: Path) -> None:
    with _federation(tmp_path) as federation:
        client = federation.client
        spec = JobCreate(algorithm="ffcm", participants=list(IDS), k_range=(2, 4), seed=2,
                         max_rounds=20)
        job = client.submit(spec)
        deadline = time.monotonic() + 120
        while True:  # stop one agent once the sweep is at its second K
            job = client.job(job.id)
            assert job.state in ("pending", "running"), job.error
            p = job.progress
            if p is not None and p.k == 3 and (p.round or 0) >= 1:
                break
            assert time.monotonic() < deadline, "the job did not reach K = 3"
            time.sleep(0.02)
        federation.stops[GONE].set()
        stopped = time.monotonic()
        job = client.follow(job.id, poll=0.1, timeout=120)
        took = time.monotonic() - stopped
        assert job.state == "failed"
        assert job.error is not None and "\n" not in job.error
        assert f"would reveal the statistics of '{GONE}' by difference" in job.error, job.error
        assert "nothing over those left is released" in job.error
        assert took < 4 * TIMEOUT + 15, took  # one timeout, not one per round


@pytest.mark.parametrize("algorithm", ["ffcm", "fedfcm"])
def test_a_participant_down_when_the_job_starts_drops_out_at_the_declaration(
    tmp_path: Path, algorithm: str
) -> None:
    """A member's node is down when the job is submitted: after one task timeout at the
    declaration the masked job goes on over the other three."""
    with _federation(tmp_path) as federation:
        client = federation.client
        federation.stops[GONE].set()
        federation.threads[GONE].join(timeout=30)  # not polling when the job is submitted
        assert not federation.threads[GONE].is_alive()
        spec = JobCreate(algorithm=algorithm, participants=list(IDS), k_range=(2, 3), seed=2,
                         max_rounds=20)
        assert spec.protection == "masking"
        job = client.follow(client.submit(spec).id, poll=0.1, timeout=120)
        assert job.state == "succeeded", job.error
        doc = client.result(job.id)
        assert any(n.startswith(f"participant '{GONE}' dropped out at the declaration")
                   for n in doc.notes), doc.notes
        assert any(n.startswith("ΣN of the participants left (org-a, org-b, org-c)")
                   for n in doc.notes), doc.notes
        assert [e.k for e in doc.sweep] == [2, 3]


@pytest.fixture(autouse=True)
def _quiet_agents(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("ERROR", logger="fedclust.participant")
