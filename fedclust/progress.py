"""Live progress of a K sweep for the command line: a rich progress bar on a terminal, plain
lines elsewhere (so logs and pipes stay readable).

One :class:`SweepProgress` serves ``fedclust simulate`` (fed by the coordinator's
``on_progress(stage, k, round_record)`` through :meth:`SweepProgress.simulation`) and
``fedclust demo`` / ``fedclust job submit --follow`` / ``fedclust job attach`` (fed the polled
job through :meth:`SweepProgress.job`). The bar counts the sweep's K values; its text shows
the stage, the current K and round and, for a job at a coordinator, who is awaited. Plain
lines are written when the stage or K changes (not every round, nor for the instant checks
before the sweep), each starting ``<command>: progress:``. From the second K on, both show an
estimate of the time left (:meth:`SweepProgress.eta`).

:func:`announce` writes a command's first line, ``<command>: progress: starting: ...``, before
anything heavy is imported or loaded (this module imports nothing beyond the standard library
until a bar is drawn); like every plain line it starts ``<command>: progress:``, so whoever
filters the progress out of a log filters it too.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

    from fedclust.coordinator.result import RoundRecord
    from fedclust.protocol.wire.messages import JobPublic

__all__ = ["SweepProgress", "announce", "describe"]

#: Stages a plain-line display leaves out: checks that take no time and where most refusals
#: happen, so that such an error stays the one line after the starting line.
_QUIET_STAGES = frozenset({"starting", "declaring", "counting"})
#: The stages of one K inside the sweep; any other stage after them ends the sweep.
_SWEEP_STAGES = frozenset({"clustering", "validating"})


def announce(command: str, what: str, stream: TextIO | None = None) -> None:
    """Write ``<command>: progress: starting: <what>`` at once (default: on stderr)."""
    out = stream if stream is not None else sys.stderr
    out.write(f"{command}: progress: starting: {what}\n")
    out.flush()


def describe(
    stage: str, k: int | None = None, round_: int | None = None,
    waiting_for: Sequence[str] = (),
) -> str:
    """The progress text: ``clustering  K=3  round 4  waiting for a, b``."""
    parts = [stage]
    if k is not None:
        parts.append(f"K={k}")
    if round_ is not None:
        parts.append(f"round {round_}")
    if waiting_for:
        parts.append("waiting for " + ", ".join(waiting_for))
    return "  ".join(parts)


def _clock_text(seconds: float) -> str:
    """``m:ss`` (``h:mm:ss`` from an hour on), rounded up to the second."""
    minutes, secs = divmod(int(-(-seconds // 1)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class SweepProgress:
    """A context manager showing a sweep over ``ks`` on ``stream`` (default stderr);
    ``clock`` (seconds, default :func:`time.monotonic`) times the K values for :meth:`eta`."""

    def __init__(
        self, ks: Sequence[int], *, command: str, stream: TextIO | None = None,
        live: bool | None = None, clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ks = list(ks)
        self._command = command
        self._stream = stream if stream is not None else sys.stderr
        self._live = self._stream.isatty() if live is None else live
        self._clock = clock
        self._bar: Progress | None = None
        self._task: TaskID | None = None
        self._last_line = ""
        self._finished = False
        self._current: int | None = None  # the K being computed
        self._current_start: float | None = None  # when this display saw it start
        #: (seconds, K values) of each step from one K to a later one seen by this display
        self._steps: list[tuple[float, int]] = []
        self._sweep_over = False

    def __enter__(self) -> SweepProgress:
        if self._live:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            self._bar = Progress(
                TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                TimeElapsedColumn(), TextColumn("{task.fields[eta]}"),
                console=Console(file=self._stream), transient=False,
            )
            self._bar.start()
            self._task = self._bar.add_task("starting", total=len(self._ks) or None, eta="")
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._bar is not None:
            if exc is None and self._task is not None and not self._finished:
                self._bar.update(
                    self._task, description="done", completed=len(self._ks), eta=""
                )
            self._bar.stop()

    def eta(self) -> float | None:
        """Seconds the sweep's remaining K values should take, once one K has finished
        (None before, and after the sweep).

        With t the seconds per K value of the recent steps (up to two) and R the K values
        left, the current one included, the estimate is t·R less the time spent on the
        current K so far, never below 0. The first step seen is left out once there are
        two: it carries the start-up (compilation, caches, connections), and for a job
        followed from mid-sweep it is only part of a K. The time per K is taken as flat,
        not proportional to K: a round costs O(N·K·D), but the rounds to converge do not
        grow with K, and at a coordinator the rounds' waits dominate.
        """
        if self._sweep_over or not self._steps or self._current is None:
            return None
        recent = self._steps[1:][-2:] if len(self._steps) >= 2 else self._steps
        per_k = sum(seconds for seconds, _ in recent) / sum(n for _, n in recent)
        left = len(self._ks) - self._ks.index(self._current)
        assert self._current_start is not None
        return max(0.0, per_k * left - (self._clock() - self._current_start))

    def _time(self, stage: str, k: int | None) -> None:
        """Note when each K starts: the K values before it have finished."""
        if stage not in _SWEEP_STAGES:
            self._sweep_over = self._current is not None
            return
        if k is None or k not in self._ks or k == self._current:
            return
        now = self._clock()
        if self._current is not None and self._current_start is not None:
            done = self._ks.index(k) - self._ks.index(self._current)
            if done > 0:
                self._steps.append((now - self._current_start, done))
        self._current, self._current_start = k, now

    def update(
        self, stage: str, k: int | None = None, round_: int | None = None,
        waiting_for: Sequence[str] = (), *, finished: bool = False,
    ) -> None:
        """Show where the sweep is: K values before ``k`` count as done (all once
        ``finished``)."""
        self._finished = finished
        self._time(stage, k)
        left = None if finished else self.eta()
        eta = "" if left is None else f"ETA {_clock_text(left)}"
        if self._bar is not None and self._task is not None:
            done = len(self._ks) if finished else (
                self._ks.index(k) if k in self._ks else None
            )
            self._bar.update(
                self._task, description=describe(stage, k, round_, waiting_for),
                completed=done, eta=eta,
            )
            return
        line = describe(stage, k)
        if stage in _QUIET_STAGES:
            return
        if line != self._last_line:
            self._last_line = line
            self._stream.write(
                f"{self._command}: progress: {line}" + (f"  {eta}" if eta else "") + "\n"
            )
            self._stream.flush()

    def simulation(self, stage: str, k: int | None, record: RoundRecord | None) -> None:
        """The coordinator's ``on_progress`` callback."""
        self.update(stage, k, None if record is None else record.round)

    def job(self, job: JobPublic) -> None:
        """A polled job's progress (``AnalystClient.follow``'s ``on_update``)."""
        p = job.progress
        if job.state in ("succeeded", "failed", "cancelled"):
            self.update(f"job {job.id} {job.state}", finished=job.state == "succeeded")
        elif p is None:
            self.update(job.state)
        else:
            self.update(p.stage, p.k, p.round, p.waiting_for)
