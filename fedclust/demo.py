"""``fedclust demo``: a whole federation on loopback, from nothing to the chosen K.

Writes the configs (fresh credentials, :mod:`fedclust.config_files`) and each participant's
CSV share of the built-in motivational example (Stallmann & Wilbik 2022, §3.2.1) into a work
folder, starts a counting service, a coordinator and three participant agents as separate
processes (``python -m fedclust ...``, logs in ``logs/``), submits the FedFCM K sweep 2..8
scored by FedFuzzDB with each participant's local-only K over 2..5, follows its progress on
stderr and prints the result. Each participant keeps its audit log of everything it sent
(``audit-<id>.jsonl``, :mod:`participant.audit`) in the work folder. Every process it
started is stopped on the way out, also on error or Ctrl-C. The result document is the one
``fedclust simulate --dataset motivational --algorithm fedfcm --k-range 2:8 --local
--local-range 2:5 --seed S --json`` prints.
"""

from __future__ import annotations

import contextlib
import ctypes
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO, Final, get_args

import httpx
import numpy as np

from fedclust.client import AnalystClient, AnalystConfig
from fedclust.config_files import FederationFiles, write_federation
from fedclust.data import synthetic
from fedclust.participant.policy import accepting
from fedclust.progress import SweepProgress
from fedclust.protocol.wire.messages import JobCreate, JobPublic, ProtectionScheme, ResultDocument
from fedclust.report import format_result

__all__ = ["DEMO_PARTICIPANTS", "Demo", "free_port", "run_demo"]

DEMO_PARTICIPANTS: Final = ("hospital-a", "hospital-b", "hospital-c")
DATASET: Final = "motivational"
STARTUP_TIMEOUT: Final = 60.0
JOB_TIMEOUT: Final = 120.0
_STOP_GRACE: Final = 5.0
_PR_SET_PDEATHSIG: Final = 1
_EPHEMERAL_RANGE: Final = "/proc/sys/net/ipv4/ip_local_port_range"
_draw = random.Random()
_handed_out: set[int] = set()


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (Linux's default: 32768)."""
    try:
        return int(Path(_EPHEMERAL_RANGE).read_text("ascii").split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` now, drawn below the kernel's ephemeral range.

    The kernel gives outgoing connections local ports from its ephemeral range, so a port
    the OS picks (bind to 0) can be taken by any connection before the service binds it;
    a port below that range cannot. Not one this process has handed out before. Falls
    back to an OS-picked port when no drawn port is free.
    """
    low = _ephemeral_low()
    for _ in range(64):
        port = _draw.randrange(max(1024, low // 2), max(1025, low))
        if port in _handed_out:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        picked: int = sock.getsockname()[1]
        return picked


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """Linux: the child gets SIGTERM if the demo dies without cleaning up (e.g. SIGKILL)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def write_shares(root: Path, seed: int) -> dict[str, str]:
    """Each participant's share of the motivational example as ``<id>.csv`` (exact floats)."""
    shares = synthetic.motivational(seed=seed)
    data = {}
    for pid, (X, _labels) in zip(DEMO_PARTICIPANTS, shares, strict=True):
        name = f"{pid}.csv"
        np.savetxt(root / name, X, fmt="%.17g", delimiter=",", header="x,y", comments="")
        data[pid] = name
    return data


@dataclass
class Demo:
    """The processes of one demo federation; :meth:`stop` ends every one of them."""

    files: FederationFiles
    logs: Path
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    _log_files: list[IO[bytes]] = field(default_factory=list)

    def start(self, name: str, *args: str) -> None:
        """Start ``python -m fedclust ARGS`` as process ``name`` logging to logs/NAME.log."""
        log = (self.logs / f"{name}.log").open("ab")
        self._log_files.append(log)
        self.processes[name] = subprocess.Popen(
            [sys.executable, "-m", "fedclust", *args],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            cwd=self.files.root,
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
        )

    def check_alive(self) -> None:
        """Raise with the log's tail if a process has exited."""
        for name, proc in self.processes.items():
            if proc.poll() is not None:
                raise RuntimeError(
                    f"the {name} process exited with status {proc.returncode}; "
                    f"its log ({self.logs / (name + '.log')}) ends with:\n{self.log_tail(name)}"
                )

    def log_tail(self, name: str, lines: int = 15) -> str:
        with contextlib.suppress(OSError):
            text = (self.logs / f"{name}.log").read_text(errors="replace")
            return "\n".join(text.splitlines()[-lines:])
        return ""

    def wait_healthy(self, url: str, *, timeout: float = STARTUP_TIMEOUT) -> None:
        """Block until ``url``'s health endpoint answers 200."""
        deadline = time.monotonic() + timeout
        with httpx.Client(timeout=2.0) as http:
            while True:
                self.check_alive()
                with contextlib.suppress(httpx.HTTPError):
                    if http.get(url + "/api/v1/health").status_code == 200:
                        return
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{url} did not become healthy within {timeout:.0f} s")
                time.sleep(0.1)

    def stop(self) -> None:
        """Terminate every process, the last started first (participants before the
        services they poll), killing any that outlasts its grace period."""
        services = ("coordinator", "counting")
        agents = [p for name, p in self.processes.items() if name not in services]
        try:
            _terminate(agents)
            _terminate([self.processes[n] for n in services if n in self.processes])
        finally:
            for proc in self.processes.values():  # even after a second Ctrl-C
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            for log in self._log_files:
                log.close()


def _terminate(processes: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM to all of ``processes``, then wait; SIGKILL after the grace period."""
    for proc in processes:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
    deadline = time.monotonic() + _STOP_GRACE
    for proc in processes:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def _workdir(path: str | None) -> Iterator[Path]:
    if path is not None:
        root = Path(path).resolve()
        root.mkdir(parents=True, exist_ok=True)
        yield root
    else:
        with tempfile.TemporaryDirectory(prefix="fedclust-demo-") as tmp:
            yield Path(tmp)


class _TerminatedError(Exception):
    """SIGTERM reached the demo: unwind so every process is stopped."""


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise _TerminatedError()


def run_demo(
    *,
    workdir: str | None = None,
    as_json: bool = False,
    protection: ProtectionScheme = "masking",
    seed: int = 1,
) -> int:
    """Run the demo federation; print the result (``as_json``: the result document)."""
    if protection not in get_args(ProtectionScheme):
        raise ValueError(f"protection must be one of {', '.join(get_args(ProtectionScheme))}")
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        with _workdir(workdir) as root:
            doc = _run(root, seed, protection)
    except _TerminatedError:
        print("fedclust demo: terminated; every process was stopped", file=sys.stderr)
        return 143
    except KeyboardInterrupt:
        print("fedclust demo: interrupted; every process was stopped", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
    if as_json:
        print(doc.model_dump_json(indent=2))
    else:
        print(format_result(doc, title="fedclust demo"))
    return 0


def _run(root: Path, seed: int, protection: ProtectionScheme) -> ResultDocument:
    logs = root / "logs"
    logs.mkdir(exist_ok=True)
    files = write_federation(
        root, data=write_shares(root, seed), columns=["x", "y"],
        coordinator_port=free_port(), counting_port=free_port(), task_timeout_seconds=60,
        protections=sorted(accepting(protection)),  # the user plays every party
    )
    demo = Demo(files=files, logs=logs)
    try:
        print(f"fedclust demo: work folder {root}", file=sys.stderr)
        demo.start("counting", "counter", "serve", "--config", str(files.counting))
        demo.start("coordinator", "coordinator", "serve", "--config", str(files.coordinator))
        demo.wait_healthy(files.counting_url)
        demo.wait_healthy(files.coordinator_url)
        for pid, path in files.participants.items():
            demo.start(pid, "participant", "run", "--config", str(path))
        config = AnalystConfig(coordinator_url=files.coordinator_url, token=files.analyst_token)
        with AnalystClient(config) as client:
            deadline = time.monotonic() + STARTUP_TIMEOUT
            while True:  # the agents enrol once they have loaded their data
                demo.check_alive()
                with contextlib.suppress(TimeoutError):
                    client.wait_enrolled(list(DEMO_PARTICIPANTS), timeout=0.5)
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError("the participants did not enrol within a minute")
            spec = JobCreate(
                algorithm="fedfcm", participants=list(DEMO_PARTICIPANTS), k_range=(2, 8),
                seed=seed, standardise=False, local_k_range=(2, 5), protection=protection,
            )
            job = client.submit(spec)
            print(
                f"fedclust demo: job {job.id} submitted (FedFCM, K = 2..8, protection "
                f"{protection})",
                file=sys.stderr,
            )
            with SweepProgress(spec.ks, command="fedclust demo") as progress:

                def show(update: JobPublic) -> None:
                    demo.check_alive()
                    progress.job(update)

                job = client.follow(job.id, on_update=show, poll=0.1, timeout=JOB_TIMEOUT)
            if job.state != "succeeded":
                raise RuntimeError(f"the demo job {job.state}: {job.error or 'no reason given'}")
            doc = client.result(job.id)
            print(
                "fedclust demo: the participants' audit logs are "
                + ", ".join(f"audit-{pid}.jsonl" for pid in DEMO_PARTICIPANTS)
                + f" in {root} (`fedclust audit show FILE`)",
                file=sys.stderr,
            )
    finally:
        demo.stop()
    return doc.model_copy(update={"dataset": DATASET})
