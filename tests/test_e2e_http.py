"""End to end over real HTTP: uvicorn servers on loopback ports, participant agents, analyst.

- every algorithm run through the service gives the in-process simulator's result document
  for the same seed on the same data (arrays travel bit-exact and the coordinator sums the
  participants' answers in the same order, so the numbers are equal, not just close);
- a capture of every request the coordinator received holds no participant's N_l;
- a coordinator killed mid-job and started again on the same database finishes the job with
  the same result.

The coordinator and the counting service run as ``uvicorn.Server`` threads (the restart test
runs the coordinator as a separate process so it can be killed); agents run as threads.
"""

from __future__ import annotations

import base64
import json
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from numpy.typing import NDArray

from fedclust.cli import main
from fedclust.client import AnalystClient, AnalystConfig
from fedclust.config_files import FederationFiles, write_federation
from fedclust.coordinator.app import create_app as create_coordinator
from fedclust.coordinator.settings import CoordinatorSettings
from fedclust.data import synthetic
from fedclust.data.federations import Federation
from fedclust.demo import free_port
from fedclust.participant.agent import run_agent
from fedclust.participant.config import ParticipantConfig
from fedclust.participant.policy import PROTECTIONS
from fedclust.protocol.wire.messages import JobCreate, ResultDocument, SweepEntryDocument
from fedclust.simulate import simulate
from tests._servers import ServerThread, serve_counting

# Real servers: ~30 s for the whole file on 2 cores (in the default run).

SEED = 7
IDS = ("hospital-a", "hospital-b", "hospital-c")
# Drop a few rows per participant so every N_l is distinct and no small protocol integer
# (a task id, a round or iteration count) is likely to equal one by chance.
DROP = (5, 7, 11)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def _centers(entry: SweepEntryDocument) -> NDArray[np.float64]:
    """An entry's centers as an array (every center released: min_center_contributors = 1)."""
    assert all(c is not None for c in entry.centers)
    return np.array(entry.centers, dtype=np.float64)


def shares() -> list[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]]:
    pairs = synthetic.motivational(seed=SEED)
    return [(X[: len(X) - d], y[: len(y) - d]) for (X, y), d in zip(pairs, DROP, strict=True)]


@dataclass
class Captured:
    """One request the coordinator received."""

    method: str
    path: str
    query: bytes
    body: bytes


class CaptureBodies:
    """ASGI middleware recording every HTTP request (method, path, query, body) it passes on."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.requests: list[Captured] = []
        self._lock = threading.Lock()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []

        async def recording_receive() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                chunks.append(message.get("body", b""))
            return message

        try:
            await self.app(scope, recording_receive, send)
        finally:
            with self._lock:
                self.requests.append(
                    Captured(scope["method"], scope["path"], scope["query_string"],
                             b"".join(chunks))
                )


@dataclass
class Agents:
    """Participant agents running in threads until :meth:`stop`."""

    files: FederationFiles
    stop_event: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> Agents:
        for path in self.files.participants.values():
            config = ParticipantConfig.from_file(path)
            thread = threading.Thread(
                target=run_agent, args=(config,),
                kwargs={"stop": self.stop_event, "poll_wait": 2.0}, daemon=True,
            )
            thread.start()
            self.threads.append(thread)
        return self

    def stop(self) -> None:
        self.stop_event.set()
        for thread in self.threads:
            thread.join(timeout=30)  # a long poll ends within its wait time


def write_files(root: Path, *, coordinator_port: int, counting_port: int) -> FederationFiles:
    data = {}
    for pid, (X, _y) in zip(IDS, shares(), strict=True):
        np.savetxt(root / f"{pid}.csv", X, fmt="%.17g", delimiter=",", header="x,y", comments="")
        data[pid] = f"{pid}.csv"
    return write_federation(
        root, data=data, columns=["x", "y"], coordinator_port=coordinator_port,
        counting_port=counting_port, task_timeout_seconds=60,
        protections=sorted(PROTECTIONS),  # the jobs below include unprotected ones
    )


def client_of(files: FederationFiles) -> AnalystClient:
    return AnalystClient(AnalystConfig(files.coordinator_url, files.analyst_token))


@dataclass
class Service:
    files: FederationFiles
    client: AnalystClient
    capture: CaptureBodies


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    root = tmp_path_factory.mktemp("e2e")
    files = write_files(root, coordinator_port=free_port(), counting_port=free_port())
    counting = serve_counting(files)
    capture = CaptureBodies(create_coordinator(CoordinatorSettings.from_file(files.coordinator)))
    coordinator = ServerThread(capture, int(files.coordinator_url.rsplit(":", 1)[1])).start()
    agents = Agents(files).start()
    client = client_of(files)
    try:
        client.wait_enrolled(list(IDS), timeout=60)
        yield Service(files, client, capture)
    finally:
        client.close()
        agents.stop()
        coordinator.stop()
        counting.stop()


def run_job(client: AnalystClient, spec: JobCreate, timeout: float = 120) -> ResultDocument:
    job = client.submit(spec)
    job = client.follow(job.id, poll=0.05, timeout=timeout)
    assert job.state == "succeeded", job.error
    return client.result(job.id)


def simulated(spec: JobCreate) -> ResultDocument:
    federation = Federation.from_pairs("motivational", shares())
    assert spec.algorithm != "fed-distill" and spec.algorithm != "fedcref"  # the sweeps only
    report = simulate(
        federation, algorithm=spec.algorithm, ks=spec.ks, seed=spec.seed,
        standardise=spec.standardise,
        local_ks=None if spec.local_k_range is None
        else range(spec.local_k_range[0], spec.local_k_range[1] + 1),
        m=spec.m, eps=spec.eps, max_rounds=spec.max_rounds, gamma=spec.gamma,
        protection=spec.protection,
    )
    doc = report.to_document()
    return doc.model_copy(update={"dataset": None, "sweep": [
        e.model_copy(update={"ari": None, "client_weighted_ari": None}) for e in doc.sweep
    ]})


# Protected jobs (the default, masking) and the papers' plaintext protocols; ffcm's client
# sampling (gamma < 1) asks 2 of 3 participants, fewer than a secure sum allows.
SPECS: dict[str, dict[str, Any]] = {
    "ffcm": {"k_range": (2, 4), "standardise": True, "max_rounds": 15},
    "ffcm-plain-sampled": {
        "algorithm": "ffcm", "k_range": (2, 4), "standardise": True, "gamma": 0.67,
        "max_rounds": 15, "protection": "none",
    },
    "fedfcm": {"k_range": (2, 5), "local_k_range": (2, 4)},
    "fedfcm-plain": {"algorithm": "fedfcm", "k_range": (2, 5), "protection": "none"},
    "fedfcm-avg": {"k_range": (2, 4), "protection": "none"},
    "fkm": {"k_range": (2, 4), "standardise": True},
    "kfed": {"k_range": (3, 5), "protection": "none"},
}


@pytest.mark.parametrize("case", sorted(SPECS))
def test_service_result_equals_the_simulator(service: Service, case: str) -> None:
    spec = JobCreate.model_validate(
        {"algorithm": case, "participants": list(IDS), "seed": SEED} | SPECS[case]
    )
    got = run_job(service.client, spec)
    want = simulated(spec)
    # Bit-exact arrays on the wire and the same summation order: equal documents. The
    # tolerance 1e-12 only guards against a platform's fused multiply-add differences.
    assert got.k_selected == want.k_selected
    assert [e.k for e in got.sweep] == [e.k for e in want.sweep]
    for g, w in zip(got.sweep, want.sweep, strict=True):
        assert g.fed_fuzzy_db == pytest.approx(w.fed_fuzzy_db, rel=1e-12, abs=1e-12)
        assert g.simplified_silhouette == pytest.approx(w.simplified_silhouette, abs=1e-12)
        np.testing.assert_allclose(_centers(g), _centers(w), rtol=1e-12, atol=1e-12)
        assert (g.rounds, g.stop_reason) == (w.rounds, w.stop_reason)
    assert got.model_dump(exclude={"sweep"}) == want.model_dump(exclude={"sweep"})


def test_cli_job_commands(service: Service, capsys: pytest.CaptureFixture[str]) -> None:
    config = str(service.files.analyst)
    status = main([
        "job", "submit", "--config", config, "--participants", ",".join(IDS),
        "--algorithm", "kfed", "--k-range", "3:4", "--seed", str(SEED), "--follow", "--json",
        "--protection", "none",
    ])
    out, err = capsys.readouterr()
    assert status == 0, err
    doc = ResultDocument.model_validate_json(out)
    assert [e.k for e in doc.sweep] == [3, 4]
    submitted = re.search(r"submitted job (\S+)", err)
    assert submitted is not None
    job_id = submitted.group(1)
    assert f"progress: job {job_id} succeeded" in err  # the progress display went to stderr
    assert main(["job", "status", job_id, "--config", config]) == 0
    assert "succeeded" in capsys.readouterr().out
    assert main(["job", "result", job_id, "--config", config, "--json"]) == 0
    assert ResultDocument.model_validate_json(capsys.readouterr().out) == doc
    # an HTTP error prints the server's detail and exits 2
    assert main(["job", "status", "no-such-job", "--config", config]) == 2
    err = capsys.readouterr().err
    assert "HTTP 404" in err and "no-such-job" in err
    assert main([
        "job", "submit", "--config", config, "--participants", "hospital-a,nobody",
        "--algorithm", "kfed", "--k", "3", "--protection", "none",
    ]) == 2
    assert "HTTP 422" in capsys.readouterr().err


def _walk(value: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield f"{path}.{key}", key
            yield from _walk(item, f"{path}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _walk(item, f"{path}[{i}]")
    else:
        yield path, value


def _int_arrays(value: Any) -> Iterator[np.ndarray[Any, Any]]:
    """Every int64 wire array inside a decoded JSON body."""
    if isinstance(value, dict):
        if value.get("dtype") == "int64" and isinstance(value.get("data"), str):
            yield np.frombuffer(base64.b64decode(value["data"]), dtype="<i8")
        for item in value.values():
            yield from _int_arrays(item)
    elif isinstance(value, list):
        for item in value:
            yield from _int_arrays(item)


def test_coordinator_never_receives_an_n_l(service: Service) -> None:
    for algorithm, extra in (("fkm", {"standardise": True}), ("fedfcm", {"local_k_range": (2, 3)})):
        spec = JobCreate.model_validate(
            {"algorithm": algorithm, "participants": list(IDS), "seed": SEED, "k_range": (2, 3),
             **extra}
        )
        run_job(service.client, spec)
    n_ls = {len(X) for X, _ in shares()}
    assert len(n_ls) == 3
    forbidden_keys = {"count", "n_samples", "n_l", "n"}
    # Task ids and secure-sum rounds are numbers the coordinator issued, an audit head's seq
    # the number of messages it received; with a few hundred tasks per job one can equal an
    # N_l by chance.
    counters = {"task_id", "round", "seq"}
    requests = list(service.capture.requests)
    contributions = [r for r in requests if r.path.endswith(("/contribution", "/answer"))]
    assert len(contributions) > 50  # the capture saw the protocol's traffic
    for r in requests:
        for n in n_ls:
            assert str(n).encode() not in r.query, f"N_l in the query of {r.path}"
        if not r.body:
            continue
        body = json.loads(r.body)
        for where, item in _walk(body):
            if where.rsplit(".", 1)[-1] == str(item):  # a key
                assert str(item).lower() not in forbidden_keys, f"key {where} in {r.path}"
            elif isinstance(item, int) and not isinstance(item, bool):
                if where.rsplit(".", 1)[-1] in counters:
                    continue  # the coordinator's own numbering, echoed back
                assert item not in n_ls, f"an N_l as the value of {where} in {r.path}"
        for array in _int_arrays(body):
            assert not set(array.tolist()) & n_ls, f"an N_l inside an int array in {r.path}"


def test_audit_logs_verify_against_the_coordinators_receipts(
    service: Service, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_job(service.client, JobCreate.model_validate(
        {"algorithm": "ffcm", "participants": list(IDS), "seed": SEED, "k_range": (2, 3)}
    ))
    for pid, config_file in service.files.participants.items():
        config = ParticipantConfig.from_file(config_file)
        deadline = time.monotonic() + 30  # an agent anchors its head once it is idle
        receipts: list[dict[str, Any]] = []
        while not receipts and time.monotonic() < deadline:
            assert main(["audit", "receipts", "--config", str(config_file)]) == 0
            receipts = json.loads(capsys.readouterr().out)
            time.sleep(0.2)
        assert receipts and all(r["participant"] == pid for r in receipts)
        (tmp_path / f"{pid}.json").write_text(json.dumps(receipts))
        check = ["audit", "verify", str(config.audit_path), "--public-key",
                 str(config.identity_path), "--receipts", str(tmp_path / f"{pid}.json")]
        assert main(check) == 0
        assert "every receipt matches" in capsys.readouterr().out
        # the same found from the agent's config: its log, its key, receipts fetched live
        assert main(["audit", "verify", "--config", str(config_file)]) == 0
        assert capsys.readouterr().out.startswith("verified: ")
        cut = tmp_path / f"{pid}-truncated.jsonl"  # everything up to the last receipt's line
        lines = config.audit_path.read_text().splitlines(keepends=True)
        cut.write_text("".join(lines[: receipts[-1]["seq"] - 1]))
        assert main([*check[:2], str(cut), *check[3:]]) == 1
        assert "(truncated?)" in capsys.readouterr().err


# -- restart -------------------------------------------------------------------------------------
def _start_coordinator(files: FederationFiles, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "fedclust", "coordinator", "serve",
             "--config", str(files.coordinator)],
            stdout=out, stderr=subprocess.STDOUT, cwd=files.root,
        )


def _wait_healthy(client: AnalystClient, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while True:
        assert proc.poll() is None, "the coordinator process exited"
        try:
            client.participants()
            return
        except httpx.HTTPError:  # not up yet
            assert time.monotonic() < deadline, "the coordinator did not come up within 60 s"
            time.sleep(0.1)


@pytest.mark.parametrize(("algorithm", "protection"), [
    ("ffcm", "masking"), ("fedfcm", "masking"), ("fkm", "masking"), ("ffcm", "paillier"),
    ("fkm", "paillier"),
])
def test_killed_coordinator_resumes_the_job_with_the_same_result(
    tmp_path: Path, algorithm: str, protection: str
) -> None:
    files = write_files(tmp_path, coordinator_port=free_port(), counting_port=free_port())
    counting = serve_counting(files)
    log = tmp_path / "coordinator.log"
    proc = _start_coordinator(files, log)
    agents: Agents | None = None
    client = client_of(files)
    try:
        _wait_healthy(client, proc)
        agents = Agents(files).start()
        client.wait_enrolled(list(IDS), timeout=60)
        top = 4 if protection == "paillier" else 5  # a Paillier round costs seconds here
        spec = JobCreate.model_validate({
            "algorithm": algorithm, "participants": list(IDS), "k_range": (2, top),
            "seed": SEED, "eps": 1e-6, "max_rounds": 30, "protection": protection,
        })
        job = client.submit(spec)
        deadline = time.monotonic() + 60
        while True:  # kill it in the middle of the sweep
            job = client.job(job.id)
            assert job.state in ("pending", "running"), job.error
            p = job.progress
            if p is not None and p.k is not None and p.k >= 3 and (p.round or 0) >= 2:
                break
            assert time.monotonic() < deadline, "the job did not reach K = 3"
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        killed_at = job.progress
        proc = _start_coordinator(files, log)
        _wait_healthy(client, proc)
        job = client.follow(job.id, poll=0.05, timeout=120)
        assert job.state == "succeeded", f"{job.error}; log:\n{log.read_text()[-2000:]}"
        got = client.result(job.id)
        want = simulated(spec)
        # Resumed from stored, bit-exact answers: the same numbers as an uninterrupted run.
        assert killed_at is not None and killed_at.k is not None and killed_at.k < top
        assert got.k_selected == want.k_selected
        for g, w in zip(got.sweep, want.sweep, strict=True):
            assert g.fed_fuzzy_db == pytest.approx(w.fed_fuzzy_db, rel=1e-12, abs=1e-12)
            np.testing.assert_allclose(_centers(g), _centers(w), rtol=1e-12, atol=1e-12)
            assert g.rounds == w.rounds
    finally:
        client.close()
        if agents is not None:
            agents.stop()
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        counting.stop()
