"""The live progress of a sweep: plain lines off a terminal, a rich bar on one."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from datetime import UTC, datetime

import pytest

from fedclust.cli import main
from fedclust.progress import SweepProgress
from fedclust.protocol.wire.messages import JobCreate, JobProgress, JobPublic

#: What the first line must not wait for: the computing, data-frame and service libraries.
HEAVY = ("sklearn", "scipy", "numba", "pandas", "sqlalchemy", "httpx", "pydantic", "rich",
         "fedclust.protocol.wire.messages", "fedclust.simulate", "fedclust.demo")
#: What ``simulate``'s first line must not wait for: its model-based algorithms' flags come
#: from their parameters models (pydantic, numpy), but not the wire messages.
HEAVY_PARAMS = tuple(m for m in HEAVY if m != "pydantic")
#: What ``job``'s first line must not wait for: its flags come from the wire models
#: (pydantic, numpy), but the client, exports and report are imported after the line.
HEAVY_JOB = (
    *(m for m in HEAVY if m not in ("pydantic", "fedclust.protocol.wire.messages")),
    "fedclust.client", "fedclust.exports", "fedclust.report",
)


def test_simulate_writes_a_plain_line_per_stage_and_k_off_a_terminal(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["simulate", "--dataset", "motivational", "--algorithm", "ffcm", "--k-range", "2:3",
            "--seed", "1", "--protection", "none"]
    assert main(argv) == 0
    lines = capsys.readouterr().err.splitlines()
    assert [re.sub(r"  ETA \d+:\d\d$", "", line) for line in lines] == [
        f"fedclust simulate: progress: {line}" for line in (
            "starting: ffcm on motivational  K=2..3", "clustering  K=2", "validating  K=2",
            "clustering  K=3", "validating  K=3", "silhouette",
        )
    ]
    # an estimate of the time left once K=2 has finished, and none after the sweep
    assert [bool(re.search(r"  ETA \d+:\d\d$", line)) for line in lines] == [
        False, False, False, True, True, False,
    ]


class Clock:
    """A clock the test sets."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_eta_takes_the_recent_time_per_k_leaving_out_the_first_k() -> None:
    stream, clock = io.StringIO(), Clock()
    with SweepProgress([2, 3, 4, 5], command="c", stream=stream, live=False,
                       clock=clock) as progress:
        progress.update("clustering", 2)
        assert progress.eta() is None  # nothing finished yet
        clock.now = 10.0
        progress.update("clustering", 3)  # K=2 took 10 s (warm-up included): all there is
        assert progress.eta() == pytest.approx(3 * 10)
        clock.now = 11.0
        progress.update("validating", 3, 7)  # 1 s into K=3
        assert progress.eta() == pytest.approx(3 * 10 - 1)
        clock.now = 12.0
        progress.update("clustering", 4)  # K=3 took 2 s: K=2's warm-up left out
        assert progress.eta() == pytest.approx(2 * 2)
        clock.now = 15.0
        progress.update("clustering", 5)  # K=3 and K=4 took 2 s and 3 s
        assert progress.eta() == pytest.approx((2 + 3) / 2)
        clock.now = 16.0
        progress.update("silhouette")
        assert progress.eta() is None
    assert stream.getvalue().splitlines() == [
        "c: progress: clustering  K=2", "c: progress: clustering  K=3  ETA 0:30",
        "c: progress: validating  K=3  ETA 0:29", "c: progress: clustering  K=4  ETA 0:04",
        "c: progress: clustering  K=5  ETA 0:03", "c: progress: silhouette",
    ]


def test_the_eta_keeps_the_last_two_steps() -> None:
    clock = Clock()
    progress = SweepProgress(range(2, 9), command="c", stream=io.StringIO(), live=False,
                             clock=clock)
    for k, now in zip(range(2, 7), (0.0, 9.0, 10.0, 11.0, 15.0), strict=True):
        clock.now = now
        progress.update("clustering", k)
    # K=2..5 took 9, 1, 1 and 4 s: K=4's and K=5's 2.5 s per K, for K=6, 7 and 8
    assert progress.eta() == pytest.approx(2.5 * 3)


def test_the_eta_of_a_job_followed_from_mid_sweep_counts_only_what_it_saw() -> None:
    clock = Clock()
    progress = SweepProgress([2, 3, 4, 5, 6], command="c", stream=io.StringIO(), live=False,
                             clock=clock)
    clock.now = 10.0
    progress.update("clustering", 3, 5)  # attached while K=3 was running
    clock.now = 13.0
    progress.update("clustering", 4, 1)  # K=3 took at most 3 s: all there is
    assert progress.eta() == pytest.approx(3 * 3)
    clock.now = 17.0
    progress.update("clustering", 6, 1)  # the polls missed K=5: K=4 and K=5 took 4 s
    assert progress.eta() == pytest.approx(4 / 2 * 1)


@pytest.mark.parametrize(("argv", "first", "heavy"), [
    (["simulate", "--dataset", "motivational", "--algorithm", "fkm", "--k", "2"],
     "fkm on motivational  K=2", HEAVY_PARAMS),
    (["demo", "--protection", "none"], "a coordinator, a counting service and three ", HEAVY),
    (["job", "attach", "job-1"], "following job job-1", HEAVY_JOB),
    (["job", "submit", "--participants", "a,b", "--algorithm", "fkm", "--k", "2", "--follow"],
     "submitting a fkm job over 2 participants", HEAVY_JOB),
], ids=["simulate", "demo", "job attach", "job submit --follow"])
def test_the_starting_line_comes_before_the_heavy_modules(
    argv: list[str], first: str, heavy: tuple[str, ...]
) -> None:
    """At the moment of the first line no computing, data or service library is loaded
    (a fresh interpreter: this one has loaded them all)."""
    script = f"""
import json, sys
import fedclust.progress as progress
from fedclust.cli import main

def first_line(command, what, stream=None):
    print(json.dumps([what, sorted(m for m in {heavy!r} if m in sys.modules)]))
    raise SystemExit(0)

progress.announce = first_line
main({argv!r})
raise SystemExit("no starting line")
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    what, loaded = json.loads(proc.stdout)
    assert what.startswith(first)
    assert loaded == []


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
    stream, clock = io.StringIO(), Clock()
    with SweepProgress([2, 3], command="fedclust demo", stream=stream, live=False,
                       clock=clock) as progress:
        for r in range(1, 4):
            clock.now = r
            progress.update("clustering", 2, r, ["b"])
        progress.update("clustering", 3, 1)
    assert stream.getvalue().splitlines() == [
        "fedclust demo: progress: clustering  K=2",
        "fedclust demo: progress: clustering  K=3  ETA 0:02",  # K=2 took 2 s: 2 s for K=3
    ]
