"""Under umask 022, everything the agents, the coordinator and the counting service write is
private to their user: files 0600, folders 0700 — job states, joined rosters, pinned peer
keys, masking keys, trained models and per-row labels, audit logs, identity keys, databases.

The federation runs in process (the real apps and agents, :mod:`fedclust.inprocess`); the
modes are read while the services still run (sqlite's -wal and -shm files exist then) and
again after. Left out: the files the test harness itself writes (the config files, by
``write_federation``, and the participants' data files).
"""

from __future__ import annotations

import importlib.util
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from fedclust.client import AnalystClient
from fedclust.data.federations import Federation
from fedclust.inprocess import run_in_process
from fedclust.protocol.algorithms.fed_distill_params import DistillParams
from fedclust.protocol.wire.messages import JobCreate, JobPublic, WireArray

NAMES = ["org-a", "org-b", "org-c"]


@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def _federation() -> tuple[Federation, list[np.ndarray]]:
    rng = np.random.default_rng(7)
    parts = tuple(
        np.vstack([rng.normal(0.0, 0.3, (20, 4)), rng.normal(3.0, 0.3, (20, 4))])
        for _ in NAMES
    )
    return Federation("modes", parts), [np.repeat([0, 1], 20) for _ in NAMES]


def _written(root: Path) -> dict[Path, int]:
    """Mode of every file and folder the services and agents wrote under ``root``."""
    mine = [root / f"{prefix}{pid}{suffix}" for pid in NAMES
            for prefix, suffix in (("audit-", ".jsonl"), ("identity-", ".key"))]
    mine += [p for p in root.iterdir() if p.name.startswith(("coordinator.db", "counting.db"))]
    for pid in NAMES:
        state = root / f"state-{pid}"
        mine += [state, *state.rglob("*")]
    return {p.relative_to(root): stat.S_IMODE(p.stat().st_mode) for p in mine}


def _assert_private(modes: dict[Path, int], root: Path) -> None:
    wrong = {
        str(p): oct(m) for p, m in modes.items()
        if m != (0o700 if (root / p).is_dir() else 0o600)
    }
    assert wrong == {}


def _run(root: Path, spec: JobCreate, labels: list[np.ndarray] | None) -> dict[Path, int]:
    federation, _ = _federation()
    during: list[dict[Path, int]] = []

    def look(client: AnalystClient, job: JobPublic) -> None:
        during.append(_written(root))

    run_in_process(federation, spec, workdir=root, labels=labels, on_finished=look)
    (running,) = during
    assert any(p.name.startswith("coordinator.db") for p in running)
    _assert_private(running, root)
    after = _written(root)
    _assert_private(after, root)
    return after


def _names(modes: dict[Path, int], pid: str) -> set[str]:
    return {p.name for p in modes if p.parts[0] == f"state-{pid}"}


def test_a_protected_kmeans_job_leaves_only_private_files(tmp_path: Path, umask_022: None) -> None:
    spec = JobCreate(algorithm="fkm", participants=NAMES, k=2, seed=1)
    modes = _run(tmp_path, spec, labels=None)
    for pid in NAMES:
        names = _names(modes, pid)
        assert {"rosters.json", "peer-identities.json", "jobs"} <= names
        assert any(n.endswith(".json") and n.startswith("job-") for n in names)


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch (deep extra)")
def test_a_fed_distill_job_keeps_its_models_and_labels_private(
    tmp_path: Path, umask_022: None
) -> None:
    federation, labels = _federation()
    spec = JobCreate(
        algorithm="fed-distill", participants=NAMES, seed=1, protection="masking",
        **{"distill": DistillParams(public=WireArray.of(federation.parts[0][:8]), n_classes=2,
                                    epochs=1)},
    )
    modes = _run(tmp_path, spec, labels=labels)
    for pid in NAMES:
        assert any(n.endswith(".distill.npz") for n in _names(modes, pid))
