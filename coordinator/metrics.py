"""The coordinator's Prometheus metrics: one registry per app, and the few hooks that feed it.

:class:`CoordinatorMetrics` owns the app's :class:`~prometheus_client.CollectorRegistry` (never
the process-global one, so tests building many apps do not collide) and these series:

- ``fedclust_http_requests_total{method,route,status}`` (``infra.observability``);
- ``fedclust_jobs{state}``: jobs per state, counted in the database at scrape time;
- ``fedclust_round_seconds``: wall time of each algorithm round (``on_progress`` records);
- ``fedclust_secure_sum_seconds{protection}``: wall time of each secure sum;
- ``fedclust_secure_sum_dropouts_total``: participants asked to join a secure sum whose input
  is not in its total (dropped out, silent or refused a stage);
- ``fedclust_refusals_total``: refusal replies from participants.

The hooks wrap what the job runner already hands around, so no algorithm module knows about
metrics: :class:`ObservedChannel` wraps a job's task channel (refusals),
:class:`ObservedSummation` a job's summation (latency, dropouts), :meth:`round_timer` the
runner's progress callback (rounds). No label carries a job id or a participant.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import text

from fedclust.coordinator.db import Database
from fedclust.coordinator.remote import RoundChannel, TaskChannel
from fedclust.coordinator.result import RoundRecord
from fedclust.coordinator.secure_sum import JobSummation
from fedclust.core.errors import UnavailableError
from fedclust.protocol.wire import messages as msg

__all__ = ["CoordinatorMetrics", "ObservedChannel", "ObservedSummation"]

R = TypeVar("R")
_STATES = ("pending", "running", "succeeded", "failed", "cancelled")
_ROUND_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
_COUNT_JOBS = text("SELECT state, COUNT(*) FROM jobs GROUP BY state")


class _JobStates(Collector):
    """``fedclust_jobs{state}`` from one GROUP BY at each scrape (the database is the truth,
    also for jobs another coordinator process ran)."""

    def __init__(self, database: Callable[[], Database | None]) -> None:
        self._database = database

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily("fedclust_jobs", "Jobs by state.", labels=["state"])
        db = self._database()
        if db is not None:
            with db.engine.connect() as connection:
                counts = {str(s): int(n) for s, n in connection.execute(_COUNT_JOBS)}
            for state in _STATES:
                family.add_metric([state], counts.get(state, 0))
        yield family


class CoordinatorMetrics:
    """The registry and domain metrics of one coordinator app (module docstring)."""

    def __init__(self, database: Callable[[], Database | None]) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(_JobStates(database))
        self.round_seconds = Histogram(
            "fedclust_round_seconds", "Wall time of one algorithm round.",
            buckets=_ROUND_BUCKETS, registry=self.registry,
        )
        self.secure_sum_seconds = Histogram(
            "fedclust_secure_sum_seconds", "Wall time of one secure sum.", ("protection",),
            buckets=_ROUND_BUCKETS, registry=self.registry,
        )
        self.dropouts = Counter(
            "fedclust_secure_sum_dropouts",
            "Participants asked to join a secure sum whose input is not in its total.",
            registry=self.registry,
        )
        self.refusals = Counter(
            "fedclust_refusals", "Refusal replies from participants.", registry=self.registry
        )

    def round_timer(
        self, on_progress: Callable[[str, int | None, RoundRecord | None], None]
    ) -> Callable[[str, int | None, RoundRecord | None], None]:
        """``on_progress`` that also observes the time since the previous progress event for
        every event carrying a finished round."""
        last = time.perf_counter()

        def observed(stage: str, k: int | None, record: RoundRecord | None) -> None:
            nonlocal last
            now = time.perf_counter()
            if record is not None:
                self.round_seconds.observe(now - last)
            last = now
            on_progress(stage, k, record)

        return observed


class ObservedChannel:
    """A job's task channel counting the refusal replies it delivers."""

    def __init__(self, inner: TaskChannel, metrics: CoordinatorMetrics) -> None:
        self._inner = inner
        self._metrics = metrics

    def ask(self, participant: str, spec: msg.TaskSpec) -> msg.Reply:
        reply = self._inner.ask(participant, spec)
        if isinstance(reply, msg.RefusalReply):
            self._metrics.refusals.inc()
        return reply

    def ask_many(
        self, asked: Sequence[tuple[str, msg.TaskSpec]]
    ) -> Sequence[msg.Reply | UnavailableError]:
        """The inner channel's ``ask_many`` (``coordinator.remote.RoundChannel``); an inner
        channel without one is asked one task after another."""
        replies = (
            self._inner.ask_many(asked) if isinstance(self._inner, RoundChannel)
            else [_ask_one(self._inner, participant, spec) for participant, spec in asked]
        )
        refused = sum(isinstance(reply, msg.RefusalReply) for reply in replies)
        if refused:
            self._metrics.refusals.inc(refused)
        return replies


def _ask_one(
    channel: TaskChannel, participant: str, spec: msg.TaskSpec
) -> msg.Reply | UnavailableError:
    try:
        return channel.ask(participant, spec)
    except UnavailableError as exc:
        return exc


class ObservedSummation:
    """A job's summation timing each sum and counting who was asked but is not summed."""

    def __init__(self, inner: JobSummation, metrics: CoordinatorMetrics, protection: str) -> None:
        self._inner = inner
        self._metrics = metrics
        self._protection = protection
        self.notes = inner.notes  # the same list: the inner summation appends to it
        self.cohorts = inner.cohorts
        self.protected = inner.protected

    def set_bounds(self, *, max_rows: int, value_bound: float) -> None:
        self._inner.set_bounds(max_rows=max_rows, value_bound=value_bound)

    def sum(
        self,
        participants: Sequence[Any],
        statistic: msg.SumTaskSpec,
        reply_type: type[R],
        *,
        required: bool = False,
    ) -> tuple[R, tuple[str, ...]]:
        start = time.perf_counter()
        total, summed = self._inner.sum(participants, statistic, reply_type, required=required)
        self._metrics.secure_sum_seconds.labels(self._protection).observe(
            time.perf_counter() - start
        )
        asked = {p.name for p in participants}
        self._metrics.dropouts.inc(len(asked - set(summed)))
        return total, summed
