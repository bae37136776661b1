"""Live progress of a K sweep for the command line: a rich progress bar on a terminal, plain
lines elsewhere (so logs and pipes stay readable).

One :class:`SweepProgress` serves ``fedclust simulate`` (fed by the coordinator's
``on_progress(stage, k, round_record)`` through :meth:`SweepProgress.simulation`) and
``fedclust demo`` / ``fedclust job submit --follow`` (fed the polled job through
:meth:`SweepProgress.job`). The bar counts the sweep's K values; its text shows the stage, the
current K and round and, for a job at a coordinator, who is awaited. Plain lines are written
when the stage or K changes (not every round, nor for the instant checks before the sweep),
each starting ``<command>: progress:``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from types import TracebackType
from typing import TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from fedclust.coordinator.result import RoundRecord
from fedclust.protocol.wire.messages import JobPublic

__all__ = ["SweepProgress", "describe"]

#: Stages a plain-line display leaves out: checks that take no time and where most refusals
#: happen, so that such an error stays the one line on stderr.
_QUIET_STAGES = frozenset({"starting", "declaring", "counting"})


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


class SweepProgress:
    """A context manager showing a sweep over ``ks`` on ``stream`` (default stderr)."""

    def __init__(
        self, ks: Sequence[int], *, command: str, stream: TextIO | None = None,
        live: bool | None = None,
    ) -> None:
        self._ks = list(ks)
        self._command = command
        self._stream = stream if stream is not None else sys.stderr
        self._live = self._stream.isatty() if live is None else live
        self._bar: Progress | None = None
        self._task: TaskID | None = None
        self._last_line = ""
        self._finished = False

    def __enter__(self) -> SweepProgress:
        if self._live:
            self._bar = Progress(
                TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                TimeElapsedColumn(), console=Console(file=self._stream), transient=False,
            )
            self._bar.start()
            self._task = self._bar.add_task("starting", total=len(self._ks) or None)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._bar is not None:
            if exc is None and self._task is not None and not self._finished:
                self._bar.update(self._task, description="done", completed=len(self._ks))
            self._bar.stop()

    def update(
        self, stage: str, k: int | None = None, round_: int | None = None,
        waiting_for: Sequence[str] = (), *, finished: bool = False,
    ) -> None:
        """Show where the sweep is: K values before ``k`` count as done (all once
        ``finished``)."""
        self._finished = finished
        if self._bar is not None and self._task is not None:
            done = len(self._ks) if finished else (
                self._ks.index(k) if k in self._ks else None
            )
            self._bar.update(
                self._task, description=describe(stage, k, round_, waiting_for),
                completed=done,
            )
            return
        line = describe(stage, k)
        if stage in _QUIET_STAGES:
            return
        if line != self._last_line:
            self._last_line = line
            self._stream.write(f"{self._command}: progress: {line}\n")
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
