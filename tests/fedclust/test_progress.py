"""The live progress of a sweep: plain lines off a terminal, a rich bar on one."""

from __future__ import annotations

import io
from datetime import UTC, datetime

import pytest

from fedclust.cli import main
from fedclust.progress import SweepProgress
from fedclust.protocol.wire.messages import JobCreate, JobProgress, JobPublic


def test_simulate_writes_a_plain_line_per_stage_and_k_off_a_terminal(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["simulate", "--dataset", "motivational", "--algorithm", "ffcm", "--k-range", "2:3",
            "--seed", "1", "--protection", "none"]
    assert main(argv) == 0
    assert capsys.readouterr().err.splitlines() == [
        f"fedclust simulate: progress: {line}" for line in (
            "clustering  K=2", "validating  K=2", "clustering  K=3",
            "validating  K=3", "silhouette",
        )
    ]


def _job(state: str, progress: JobProgress | None) -> JobPublic:
    now = datetime.now(UTC)
    spec = JobCreate(algorithm="ffcm", participants=["a", "b", "c"], k_range=(2, 4))
    return JobPublic(id="job-1", state=state, spec=spec, created_at=now, updated_at=now,
                     progress=progress)


def test_a_followed_job_fills_the_bar_and_names_who_is_awaited() -> None:
    stream = io.StringIO()
    with SweepProgress([2, 3, 4], command="fedclust job submit", stream=stream,
                       live=True) as progress:
        progress.job(_job("running", JobProgress(
            stage="clustering", k=3, round=4, answered=["a"], waiting_for=["b", "c"]
        )))
        progress.job(_job("succeeded", None))
    final = stream.getvalue().splitlines()[-1]
    assert final.startswith("job job-1 succeeded ") and " 3/3 " in final


def test_the_bar_shows_stage_k_round_and_the_awaited_while_running() -> None:
    stream = io.StringIO()
    progress = SweepProgress([2, 3, 4], command="x", stream=stream, live=True)
    with pytest.raises(RuntimeError), progress:
        progress.update("clustering", 3, 4, ["b", "c"])
        raise RuntimeError("stopped mid-sweep")
    final = stream.getvalue().splitlines()[-1]  # the bar as it stood: not marked done
    assert final.startswith("clustering  K=3  round 4  waiting for b, c ")
    assert " 1/3 " in final


def test_plain_lines_skip_rounds_and_repeat_nothing() -> None:
    stream = io.StringIO()
    with SweepProgress([2, 3], command="fedclust demo", stream=stream, live=False) as progress:
        for r in range(1, 4):
            progress.update("clustering", 2, r, ["b"])
        progress.update("clustering", 3, 1)
    assert stream.getvalue().splitlines() == [
        "fedclust demo: progress: clustering  K=2", "fedclust demo: progress: clustering  K=3",
    ]
