"""``fedclust job attach`` and ``fedclust job logs`` over the in-process service (coordinator,
counting service and real agents over ASGI transports, :func:`fedclust.inprocess.serving`)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import fedclust.client
from fedclust.asgi import InProcessApp
from fedclust.cli import main
from fedclust.client import AnalystClient, AnalystConfig
from fedclust.config_files import FederationFiles, write_federation
from fedclust.inprocess import serving
from fedclust.participant.policy import PROTECTIONS
from fedclust.protocol.wire.messages import JobHistory, ResultDocument

IDS = ("site-a", "site-b", "site-c")
JOB = ["--participants", ",".join(IDS), "--algorithm", "fkm", "--k-range", "2:3", "--seed", "2",
       "--protection", "none"]


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[FederationFiles,
                                                                         InProcessApp]]:
    root: Path = tmp_path_factory.mktemp("follow")
    rng = np.random.default_rng(3)
    shares = {}
    for i, pid in enumerate(IDS):
        np.save(root / f"{pid}.npy",
                np.vstack([rng.normal(size=(20 + i, 2)), rng.normal(size=(15, 2)) + 5.0]))
        shares[pid] = f"{pid}.npy"
    files = write_federation(root, data=shares, coordinator_port=8710, counting_port=8711,
                             protections=sorted(PROTECTIONS))  # the jobs are unprotected
    with serving(files, poll_wait=0.2) as coordinator:
        config = AnalystConfig(coordinator_url=files.coordinator_url, token=files.analyst_token)
        with AnalystClient(config, transport=coordinator.transport()) as client:
            client.wait_enrolled(list(IDS), timeout=60)
        yield files, coordinator


@pytest.fixture
def config(service: tuple[FederationFiles, InProcessApp],
           monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """``--config`` of the analyst; the CLI's client reaches the in-process coordinator."""
    files, coordinator = service
    real = AnalystClient

    def client(config: AnalystConfig, **_: object) -> AnalystClient:
        return real(config, transport=coordinator.transport())

    monkeypatch.setattr(fedclust.client, "AnalystClient", client)
    return ["--config", str(files.analyst)]


def _submitted(
    config: list[str], capsys: pytest.CaptureFixture[str], job: list[str] = JOB
) -> str:
    assert main(["job", "submit", *config, *job]) == 0
    return capsys.readouterr().out.strip()


def test_attach_follows_a_running_job_to_its_result(
    config: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    job_id = _submitted(config, capsys)
    assert main(["job", "attach", job_id, *config, "--json"]) == 0
    out, err = capsys.readouterr()
    followed = ResultDocument.model_validate_json(out)
    lines = err.splitlines()
    assert lines[0] == f"fedclust job attach: progress: starting: following job {job_id}"
    assert lines[-1] == f"fedclust job attach: progress: job {job_id} succeeded"
    assert all(line.startswith("fedclust job attach: progress: ") for line in lines)
    assert main(["job", "result", job_id, *config, "--json"]) == 0
    assert ResultDocument.model_validate_json(capsys.readouterr().out) == followed
    assert [e.k for e in followed.sweep] == [2, 3]


def test_logs_lists_every_task_each_participant_got(
    config: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    job_id = _submitted(config, capsys)
    assert main(["job", "attach", job_id, *config, "--json"]) == 0
    capsys.readouterr()
    assert main(["job", "logs", job_id, *config, "--json"]) == 0
    history = JobHistory.model_validate_json(capsys.readouterr().out)
    assert history.job.id == job_id and history.job.state == "succeeded"
    kinds = {}
    for pid in IDS:
        mine = sorted((t for t in history.tasks if t.participant == pid), key=lambda t: t.task_id)
        assert [t.task_id for t in mine] == list(range(len(mine)))  # none missing
        assert all(t.answered for t in mine)
        assert all(t.timed_out is None for t in mine)
        kinds[pid] = [t.kind for t in mine]
    assert kinds[IDS[0]][0] == "declare"
    assert kinds[IDS[1]] == kinds[IDS[0]] == kinds[IDS[2]]  # the sweep asks all alike
    stored = [t.stored_at for t in history.tasks]
    assert stored == sorted(stored)

    assert main(["job", "logs", job_id, *config]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == (f"job {job_id}  fkm  K=2..3  participants {', '.join(IDS)}  "
                        "protection none")
    assert lines[1].endswith("  created") and lines[-1].endswith("  succeeded")
    tasks = lines[2:-1]
    assert len(tasks) == len(history.tasks)
    assert all(re.search(r"  task \d+ +\S+ +answered$", t) for t in tasks)
    assert {t.split()[2] for t in tasks} == set(IDS)


def test_logs_of_an_unknown_job_is_the_coordinators_404(
    config: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["job", "logs", "job-unknown", *config]) == 2
    err = capsys.readouterr().err
    assert "HTTP 404" in err and "job-unknown" in err


def test_submit_with_init_starts_the_service_job_from_the_given_centers(
    config: list[str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``job submit --init``: a CSV of K centers (its header the --feature-names) reaches the
    job; started at the centers a seeded run converged to, the job stays there at once."""
    job = ["--participants", ",".join(IDS), "--algorithm", "fkm", "--k", "2", "--seed", "2",
           "--protection", "none", "--follow", "--json"]
    assert main(["job", "submit", *config, *job]) == 0
    (converged,) = ResultDocument.model_validate_json(capsys.readouterr().out).sweep
    centers = np.array(converged.centers, dtype=np.float64)
    path = tmp_path / "init.csv"
    path.write_text("u,v\n" + "\n".join(",".join(repr(float(v)) for v in row) for row in centers))
    named = [*job, "--feature-names", "u,v", "--init", str(path)]
    job_id = _submitted(config, capsys, [a for a in named if a not in ("--follow", "--json")])
    assert main(["job", "attach", job_id, *config, "--json"]) == 0
    (started,) = ResultDocument.model_validate_json(capsys.readouterr().out).sweep
    assert started.rounds <= 2
    np.testing.assert_allclose(np.array(started.centers, dtype=np.float64), centers, atol=1e-9)
    assert main(["job", "logs", job_id, *config, "--json"]) == 0
    kinds = {t.kind for t in JobHistory.model_validate_json(capsys.readouterr().out).tasks}
    assert "hold_kmeans_step" in kinds and "hold_kmeans_init" not in kinds  # round 1 from init

    assert main(["job", "submit", *config, *named[:-2], "--init", str(path),
                 "--feature-names", "a,b"]) == 2
    assert "--init: the header of" in capsys.readouterr().err
    sweep = list(named)
    at = sweep.index("--k")
    sweep[at:at + 2] = ["--k-range", "2:3"]
    assert main(["job", "submit", *config, *sweep]) == 2
    assert "--init gives the K initial centers of a single --k" in capsys.readouterr().err
