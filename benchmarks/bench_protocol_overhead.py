"""Per-round protocol overhead of the service relative to the bare core computation.

One ``ffcm`` job at a fixed K, run as ``core`` (the in-process simulator), ``service`` (the
real coordinator and counting apps over ASGI with agents as threads; ``--http``: separate
uvicorn processes on loopback, with the coordinator's CPU time per round) and ``floor``
(:mod:`benchmarks._floor`: a bare FastAPI round of the same shape). Per round =
(T(2R) − T(R)) / R, variants interleaved after a warm-up (then ``gc.freeze()``), at least 5
repetitions; prints medians and the overhead service − core with its range, and the CPU per
round of the service and the floor (in process: this process's CPU time while each runs, the
agents' and the floor's clients' included). ``TMPDIR=/dev/shm`` keeps the audit logs' fsyncs
off a shared disk.

Run: ``python -m benchmarks.bench_protocol_overhead [--participants 30 300] [--rows 500]``

Design notes: ``docs/benchmarks.md`` (§ Per-round protocol overhead).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import numpy as np

from benchmarks import _floor
from benchmarks._timing import MIN_REPEATS, Timing
from fedclust.asgi import InProcessApp
from fedclust.client import AnalystClient, AnalystConfig
from fedclust.config_files import FederationFiles, write_federation
from fedclust.coordinator.app import create_app as create_coordinator
from fedclust.coordinator.job import run_job
from fedclust.coordinator.settings import CoordinatorSettings
from fedclust.core.validation import FloatArray
from fedclust.counting.app import create_app as create_counting
from fedclust.counting.settings import CountingSettings
from fedclust.demo import Demo, free_port
from fedclust.participant.agent import run_agent
from fedclust.participant.config import ParticipantConfig
from fedclust.participant.local import LocalParticipant
from fedclust.protocol.wire.messages import JobCreate
from fedclust.simulate import CountingService

K = 5
D = 4


# -- the federation -------------------------------------------------------------------------------
def make_parts(n_participants: int, rows: int, seed: int) -> list[FloatArray]:
    """Gaussian blobs around K centers in D dimensions, ``rows`` per participant."""
    rng = np.random.default_rng(seed)
    centers = rng.uniform(-10, 10, size=(K, D))
    return [
        centers[rng.integers(K, size=rows)] + rng.standard_normal((rows, D))
        for _ in range(n_participants)
    ]


def spec_for(names: list[str], rounds: int, seed: int) -> JobCreate:
    return JobCreate(
        algorithm="ffcm", participants=names, k=K, seed=seed, eps=0.0, max_rounds=rounds,
        protection="none",
    )


def time_core(parts: list[FloatArray], spec: JobCreate) -> float:
    counter = CountingService(spec.participants, min_participants=3)
    participants = [
        LocalParticipant(X, name=name, count_sink=counter.report)
        for name, X in zip(spec.participants, parts, strict=True)
    ]
    start = time.perf_counter()
    outcome = run_job(participants, spec, total_count=counter.total)
    elapsed = time.perf_counter() - start
    assert outcome.sweep.entries[0].result.n_rounds == spec.max_rounds
    return elapsed


def write_files(root: Path, parts: list[FloatArray]) -> FederationFiles:
    data = {}
    for i, X in enumerate(parts):
        np.save(root / f"p{i}.npy", X)
        data[f"p{i}"] = f"p{i}.npy"
    return write_federation(
        root, data=data, coordinator_port=free_port(), counting_port=free_port(),
        task_timeout_seconds=120, protections=["none"],  # spec_for's jobs are unprotected
    )


class Agents:
    """Participant agents as threads in this process."""

    def __init__(self, files: FederationFiles, **transports: httpx.BaseTransport) -> None:
        self.stop = threading.Event()
        self.threads = [
            threading.Thread(
                target=run_agent, args=(ParticipantConfig.from_file(path),),
                kwargs={"stop": self.stop, **transports}, daemon=True,
            )
            for path in files.participants.values()
        ]
        for thread in self.threads:
            thread.start()

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=30)


def time_job(client: AnalystClient, spec: JobCreate) -> float:
    """The job's duration as the coordinator recorded it (created → finished), so the
    analyst's polling neither adds latency nor competes for the CPU."""
    job = client.submit(spec)
    job = client.follow(job.id, poll=0.1, timeout=600)
    assert job.state == "succeeded", job.error
    assert client.result(job.id).sweep[0].rounds == spec.max_rounds
    return (job.updated_at - job.created_at).total_seconds()


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system) a process has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclasses.dataclass
class Service:
    client: AnalystClient
    floor: _floor.FloorClients
    coordinator_pid: int | None  # its own process (--http), else None
    floor_pid: int | None


def _floor_process(stack: contextlib.ExitStack, logs: Path) -> tuple[str, int]:
    """:data:`benchmarks._floor.app` under uvicorn in its own process: its URL and pid."""
    port = free_port()
    log = stack.enter_context((logs / "floor.log").open("ab"))
    process = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "benchmarks._floor:app", "--host", "127.0.0.1",
         "--port", str(port), "--log-level", "warning", "--no-access-log"],
        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
        cwd=Path(__file__).resolve().parents[1],
    )
    stack.callback(process.wait, 30)
    stack.callback(process.terminate)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"the floor app exited:\n{(logs / 'floor.log').read_text()}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url + "/openapi.json", timeout=2).status_code == 200:
                return url, process.pid
        if time.monotonic() > deadline:
            raise TimeoutError("the floor app did not start within 60 s")
        time.sleep(0.1)


@contextlib.contextmanager
def service(files: FederationFiles, http: bool) -> Iterator[Service]:
    """The coordinator and counting service with every participant enrolled."""
    names = list(files.participants)
    config = AnalystConfig(files.coordinator_url, files.analyst_token)
    pid: int | None = None
    floor_pid: int | None = None
    body = _floor.contribution_body(K, D)
    with contextlib.ExitStack() as stack:
        if http:
            logs = files.root / "logs"
            logs.mkdir(exist_ok=True)
            floor_url, floor_pid = _floor_process(stack, logs)
            floor = _floor.FloorClients(len(names), body, base_url=floor_url)
            stack.callback(floor.close)
            demo = Demo(files=files, logs=logs)
            stack.callback(demo.stop)
            demo.start("counting", "counter", "serve", "--config", str(files.counting))
            demo.start("coordinator", "coordinator", "serve", "--config", str(files.coordinator))
            demo.wait_healthy(files.counting_url)
            demo.wait_healthy(files.coordinator_url)
            pid = demo.processes["coordinator"].pid
            stack.callback(Agents(files).close)
            client = stack.enter_context(AnalystClient(config))
        else:
            counting_app = create_counting(CountingSettings.from_file(files.counting))
            counting = stack.enter_context(
                InProcessApp(counting_app, counting_app.router.lifespan_context)
            )
            coordinator_app = create_coordinator(
                CoordinatorSettings.from_file(files.coordinator),
                counting_transport=counting.transport(),
            )
            coordinator = stack.enter_context(
                InProcessApp(coordinator_app, coordinator_app.router.lifespan_context)
            )
            agents = Agents(
                files, transport=coordinator.transport(), counting_transport=counting.transport()
            )
            stack.callback(agents.close)
            client = stack.enter_context(
                AnalystClient(config, transport=coordinator.transport())
            )
            floor_app = stack.enter_context(
                InProcessApp(_floor.app, _floor.app.router.lifespan_context)
            )
            floor = _floor.FloorClients(
                len(names), body, transports=[floor_app.transport() for _ in names]
            )
            stack.callback(floor.close)
        client.wait_enrolled(names, timeout=300)
        yield Service(client, floor, pid, floor_pid)


def per_round(
    run: Callable[[int], float], rounds: int, clock: Callable[[], float] | None
) -> tuple[float, float | None]:
    """Seconds per round of ``run`` (which runs that many rounds and returns its seconds) by
    (T(2R) - T(R)) / R, and the CPU seconds per round that ``clock`` counts (a process's
    CPU time) by the same difference."""
    cpu = [clock()] if clock is not None else []
    long = run(2 * rounds)
    cpu += [clock()] if clock is not None else []
    short = run(rounds)
    if clock is None:
        return (long - short) / rounds, None
    cpu.append(clock())
    return (long - short) / rounds, ((cpu[1] - cpu[0]) - (cpu[2] - cpu[1])) / rounds


def _cpu_of(pid: int | None) -> Callable[[], float]:
    """The CPU clock of process ``pid``; None: this process's (in-process mode: the service
    or the floor with its clients, whichever runs)."""
    return time.process_time if pid is None else lambda: process_cpu(pid)


def measure(
    n: int, rows: int, rounds: int, repeats: int, seed: int, http: bool
) -> dict[str, Timing]:
    """Per-round seconds of core, service, their difference and the floor, the CPU per
    round of the service and the floor (with ``http`` their processes', else this whole
    process's while each runs), and the ratios service / floor; one sample per
    repetition."""
    parts = make_parts(n, rows, seed)
    names = [f"p{i}" for i in range(n)]
    specs = {r: spec_for(names, r, seed) for r in (rounds, 2 * rounds)}
    samples: dict[str, list[float]] = {
        "core": [], "service": [], "overhead": [], "floor": [], "service / floor": []
    }

    def floor_rounds(count: int) -> float:
        start = time.perf_counter()
        served_by.floor.rounds(count)
        return time.perf_counter() - start

    with tempfile.TemporaryDirectory(prefix="bench-overhead-") as tmp:
        files = write_files(Path(tmp), parts)
        with service(files, http) as served_by:
            # Warm up every variant (numba's compilation, the first job's imports), then
            # keep the collector off what exists by now: a full collection traverses every
            # object of this process (the agents', the apps', numba's: ~140 ms at 30
            # participants), charged to whichever variant happens to run.
            time_core(parts, specs[rounds])
            time_job(served_by.client, specs[rounds])
            served_by.floor.rounds(rounds)
            gc.collect()
            gc.freeze()
            try:
                for _ in range(max(repeats, MIN_REPEATS)):
                    core, _ = per_round(lambda r: time_core(parts, specs[r]), rounds, None)
                    served, work = per_round(
                        lambda r: time_job(served_by.client, specs[r]), rounds,
                        _cpu_of(served_by.coordinator_pid),
                    )
                    floor, floor_work = per_round(
                        floor_rounds, rounds, _cpu_of(served_by.floor_pid)
                    )
                    assert work is not None and floor_work is not None
                    cpu = "coordinator CPU" if http else "service CPU"
                    samples.setdefault(cpu, []).append(work)
                    samples.setdefault("floor CPU", []).append(floor_work)
                    samples.setdefault("CPU / floor CPU", []).append(work / floor_work)
                    samples["core"].append(core)
                    samples["service"].append(served)
                    samples["overhead"].append(served - core)
                    samples["floor"].append(floor)
                    samples["service / floor"].append(served / floor)
            finally:
                gc.unfreeze()  # what this count left is collectable before the next
    return {name: Timing(tuple(values)) for name, values in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--participants", type=int, nargs="+", default=[30, 300])
    parser.add_argument("--rows", type=int, default=500, help="rows per participant")
    parser.add_argument("--rounds", type=int, default=10, help="R (the jobs run R and 2R)")
    parser.add_argument("--repeats", type=int, default=MIN_REPEATS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--http", action="store_true",
                        help="separate coordinator and counting processes on loopback")
    args = parser.parse_args()
    R = args.rounds
    print(f"ffcm, K={K}, D={D}, {args.rows} rows per participant, "
          f"{'loopback HTTP' if args.http else 'in-process HTTP (ASGI)'}; per round = "
          f"(T({2 * R} rounds) - T({R} rounds)) / {R}; median [range] of "
          f"{max(args.repeats, MIN_REPEATS)} interleaved repetitions, ms")
    columns = ["core", "service", "overhead", "floor",
               "coordinator CPU" if args.http else "service CPU", "floor CPU"]
    ratios = ["service / floor", "CPU / floor CPU"]
    print(f"{'participants':>12}" + "".join(f"  {name:>22}" for name in columns + ratios))
    for n in args.participants:
        t = measure(n, args.rows, R, args.repeats, args.seed, args.http)
        print(f"{n:>12}" + "".join(f"  {t[name].text(1e-3, 1):>22}" for name in columns)
              + "".join(f"  {t[name].text(1.0, 2):>22}" for name in ratios), flush=True)


if __name__ == "__main__":
    main()
