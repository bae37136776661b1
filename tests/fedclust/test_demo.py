"""``fedclust demo``: real processes on loopback give the simulator's document, and stop."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fedclust.cli import main
from fedclust.demo import free_port

# Five Python processes: ~15-30 s on 2 cores (in the default run: the README's main job).


def _fedclust(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fedclust", *args],
        capture_output=True, text=True, timeout=180, cwd=cwd,
    )


def _processes_mentioning(text: str) -> list[int]:
    """PIDs whose command line contains ``text`` (Linux /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            found.append(int(entry.name))
    return found


def test_demo_json_equals_simulate_and_leaves_nothing_running(tmp_path: Path) -> None:
    # The demo's speed is measured in benchmarks/bench_protection.py, not asserted here.
    workdir = tmp_path / "demo"
    demo = _fedclust("demo", "--json", "--workdir", str(workdir), "--seed", "1")
    assert demo.returncode == 0, demo.stderr
    got = json.loads(demo.stdout)

    sim = _fedclust(
        "simulate", "--dataset", "motivational", "--algorithm", "fedfcm", "--k-range", "2:8",
        "--seed", "1", "--local", "--local-range", "2:5", "--json",
    )
    assert sim.returncode == 0, sim.stderr
    want = json.loads(sim.stdout)
    # The same data (CSV shares written with 17 significant digits read back exactly), the
    # same seed and bit-exact arrays on the wire: equal up to 1e-9 (the brief's tolerance).
    assert got["k_selected"] == want["k_selected"]
    assert got["dataset"] == want["dataset"] == "motivational"
    assert [e["k"] for e in got["sweep"]] == list(range(2, 9))
    for g, w in zip(got["sweep"], want["sweep"], strict=True):
        assert g["fed_fuzzy_db"] == pytest.approx(w["fed_fuzzy_db"], abs=1e-9)
        np.testing.assert_allclose(g["centers"], w["centers"], rtol=0, atol=1e-9)
    # ari: the simulator knows the labels, the service does not
    strip = ("sweep",)
    assert {k: v for k, v in got.items() if k not in strip} == {
        k: v for k, v in want.items() if k not in strip
    }
    # every participant kept its audit log in the work folder, signed and its chain intact
    # (unverified: the coordinator that held the receipts is gone)
    for pid in ("hospital-a", "hospital-b", "hospital-c"):
        log = workdir / f"audit-{pid}.jsonl"
        key = workdir / f"identity-{pid}.key"
        check = _fedclust("audit", "verify", str(log), "--public-key", str(key))
        assert check.returncode == 3, check.stderr
        assert "chain intact" in check.stderr and "but no --receipts" in check.stderr

    names = {p.name for p in workdir.iterdir()}
    assert {"coordinator.db", "counting.db", "coordinator.toml", "counting.toml",
            "analyst.toml", "logs"} <= names
    assert {f"participant-hospital-{x}.toml" for x in "abc"} <= names
    assert {f"hospital-{x}.csv" for x in "abc"} <= names
    logs = {p.name for p in (workdir / "logs").iterdir()}
    assert {"coordinator.log", "counting.log", "hospital-a.log"} <= logs
    if Path("/proc/self/cmdline").exists():
        assert _processes_mentioning(str(workdir)) == []
    # no secret in any log
    tokens = [line.split('"')[1] for p in workdir.glob("*.toml")
              for line in p.read_text().splitlines() if line.startswith("token =")]
    assert tokens
    for log in (workdir / "logs").iterdir():
        text = log.read_text(errors="replace")
        assert not any(t in text for t in tokens), f"a token in {log.name}"


def test_demo_refuses_an_unknown_protection(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["demo", "--protection", "rot13"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'rot13'" in capsys.readouterr().err


def test_free_ports_lie_below_the_ephemeral_range_and_are_never_handed_out_twice() -> None:
    """Outgoing connections take local ports from the ephemeral range: a port drawn there
    could be taken between the draw and the service's bind (a CI run lost a test to it)."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = [free_port() for _ in range(50)]
    assert len(set(ports)) == len(ports)
    assert all(1024 <= port < low for port in ports)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", ports[-1]))  # free when handed out
