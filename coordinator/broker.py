"""The task broker: the coordinator's :class:`~coordinator.remote.TaskChannel`.

A running job's hot state lives in memory; the database is its durable log
(:class:`~coordinator.journal.Journal`). ``ask`` gives a task the next id of its (job,
participant) pair; a task the log already answered returns the stored reply (its spec must be
equal), so a restarted coordinator replays the job bit for bit; otherwise the task is handed
out and the caller waits for the contribution, a cancel, the broker closing or ``timeout``
(then the task is withdrawn and its timeout stored like a reply). ``ask_many`` does the same
for a round's tasks at once: one thread waits for all of them, woken when the last is
answered. :meth:`Broker.poll` gives a participant its oldest open task (or registers a
wake-up for the long poll), :meth:`Broker.submit` refuses, changing nothing, a contribution
for an unknown, closed, timed-out or answered task or of the wrong kind or shapes, and
:meth:`Broker.blob` serves the blobs a participant was handed.

Design notes: ``docs/services.md`` (§ The task broker).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

from pydantic import TypeAdapter

from fedclust.coordinator.db import Database, JobRecord, TaskRecord
from fedclust.coordinator.journal import Journal
from fedclust.core.errors import ProtocolError, UnavailableError
from fedclust.protocol.wire import messages as msg
from fedclust.protocol.wire.blobs import externalise, inline

__all__ = [
    "Broker",
    "BrokerClosedError",
    "ContributionRejectedError",
    "JobCancelledError",
    "JobChannel",
    "TaskTimeoutError",
]

_REPLY: TypeAdapter[msg.Reply] = TypeAdapter(msg.Reply)


class JobCancelledError(Exception):
    """The job was cancelled while a task was open."""


class BrokerClosedError(Exception):
    """The coordinator is shutting down; the job stays resumable."""


class TaskTimeoutError(UnavailableError):
    """A participant did not answer a task in time."""


class ContributionRejectedError(Exception):
    """A contribution was refused; ``status_code`` is the HTTP status to answer with."""

    def __init__(self, status_code: int, message: str) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message


@dataclass(eq=False)
class _Waiter:
    """The one caller waiting on a set of open tasks (one ask, or a round's): woken when the
    last of them is answered, and on a cancel or shutdown."""

    wake: threading.Condition
    unanswered: int


@dataclass(eq=False)
class _Open:
    """A task handed out (or about to be) and not yet answered."""

    job_id: str
    participant: str
    task_id: int
    spec: msg.TaskSpec
    body: bytes  # the Task as JSON
    body_refs: bytes  # the same with blob references
    blobs: dict[str, bytes]  # by SHA-256
    waiter: _Waiter
    reply: msg.Reply | None = None


@dataclass
class _Live:
    """In-memory state of one running job."""

    job: JobRecord
    log: dict[tuple[str, int], TaskRecord]
    counters: dict[str, int] = field(default_factory=dict)
    open: dict[tuple[str, int], _Open] = field(default_factory=dict)
    cancelled: bool = False
    stage: str = "starting"
    k: int | None = None
    round: int | None = None
    shift: float | None = None
    awaiting: set[str] = field(default_factory=set)
    answered: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _SpecForms:
    """A task spec as stored and served: its JSON document, the same with large values as
    blob references (``refs``, and as compact text) and those blobs; and the tasks carrying
    it as served (JSON, and with blob references) by task id. The tasks of a round share
    one spec and mostly one task id, so each is worked out once per round."""

    doc: object
    refs: object
    refs_json: str
    blobs: dict[str, bytes]
    bodies: dict[int, tuple[bytes, bytes]] = field(default_factory=dict)

    @classmethod
    def of(cls, doc: object) -> _SpecForms:
        blobs: dict[str, bytes] = {}
        # As part of a task: the spec itself may become a reference (never the task).
        refs = externalise(doc, blobs, root=False)
        return cls(doc=doc, refs=refs, refs_json=_compact(refs), blobs=blobs)


def _compact(doc: object) -> str:
    return json.dumps(doc, separators=(",", ":"))


class Broker:
    """Tasks of every running job, in memory; see the module doc."""

    def __init__(self, db: Database, *, timeout: float) -> None:
        self._db = db
        self._journal = Journal(db)
        self._timeout = timeout
        self._lock = threading.RLock()
        self._live: dict[str, _Live] = {}
        self._queues: dict[str, list[_Open]] = {}  # per participant, oldest first
        self._watchers: dict[str, list[Callable[[], None]]] = {}  # per participant
        self._granted: dict[str, dict[str, str]] = {}  # per participant: blob -> job id
        self._closed = False

    # -- runner side ------------------------------------------------------------------------------
    def open_job(self, job: JobRecord) -> JobChannel:
        """A channel for a (re)started run of ``job``; its task counters start at 0."""
        log = self._db.job_log(job.id)
        with self._lock:
            self._live[job.id] = _Live(job=job, log=log)
        return JobChannel(self, job.id)

    def close_job(self, job_id: str) -> None:
        """Store what is pending and forget the in-memory state of a job whose run ended."""
        with self._lock:
            live = self._live.pop(job_id, None)
            if live is not None:
                for task in live.open.values():
                    self._withdraw(task)
            for granted in self._granted.values():
                for name in [name for name, job in granted.items() if job == job_id]:
                    del granted[name]
        self._journal.flush()

    def flush(self) -> None:
        """Store every pending task, reply and progress (before a job's final state)."""
        self._journal.flush()

    def set_stage(
        self, job_id: str, stage: str, k: int | None, round_: int | None, shift: float | None
    ) -> msg.JobProgress | None:
        """Record where the job is (stored with the next write); the new progress snapshot."""
        with self._lock:
            live = self._live.get(job_id)
            if live is None:
                return None
            live.stage, live.k, live.round, live.shift = stage, k, round_, shift
            snapshot = self._snapshot(live)
        self._journal.set_progress(job_id, snapshot)
        return snapshot

    def progress(self, job_id: str) -> msg.JobProgress | None:
        """The live progress of a running job (None when it is not running here)."""
        with self._lock:
            live = self._live.get(job_id)
            return None if live is None else self._snapshot(live)

    @staticmethod
    def _snapshot(live: _Live) -> msg.JobProgress:
        return msg.JobProgress(
            stage=live.stage, k=live.k, round=live.round, shift=live.shift,
            answered=list(live.answered), waiting_for=sorted(live.awaiting),
        )

    def cancel(self, job_id: str) -> None:
        """Withdraw the job's open tasks at once (no poll hands them out after this returns)
        and wake the waiting asks with :class:`JobCancelledError`."""
        with self._lock:
            live = self._live.get(job_id)
            if live is not None:
                live.cancelled = True
                for task in live.open.values():
                    self._withdraw(task)
                    task.waiter.wake.notify_all()

    def _withdraw(self, task: _Open) -> None:
        queue = self._queues.get(task.participant, [])
        if task in queue:
            queue.remove(task)

    def close(self) -> None:
        """Shut down: store what is pending; every waiting ask raises
        :class:`BrokerClosedError` and long polls return."""
        with self._lock:
            self._closed = True
            for live in self._live.values():
                for task in live.open.values():
                    task.waiter.wake.notify_all()
            for participant in list(self._watchers):
                self._wake(participant)
        self._journal.flush()

    @property
    def closed(self) -> bool:
        return self._closed

    def ask(self, job_id: str, participant: str, spec: msg.TaskSpec) -> msg.Reply:
        """Deliver one task and wait for its reply (or replay the stored one); a timeout
        raises :class:`TaskTimeoutError` (see :meth:`ask_many`)."""
        (outcome,) = self.ask_many(job_id, [(participant, spec)])
        if isinstance(outcome, TaskTimeoutError):
            raise outcome
        return outcome

    def ask_many(
        self, job_id: str, asked: Sequence[tuple[str, msg.TaskSpec]]
    ) -> list[msg.Reply | TaskTimeoutError]:
        """Deliver one task to each (participant, spec) of a round at once and wait, in this
        one thread, until every task is answered or ``timeout`` has passed: each reply, or
        the :class:`TaskTimeoutError` of a task not answered in time (withdrawn, and stored
        like a reply). A task the log already holds replays its stored reply or timeout.
        A cancel raises :class:`JobCancelledError`, a shutdown :class:`BrokerClosedError`."""
        with self._lock:
            live = self._live.get(job_id)
            if live is None:
                raise RuntimeError(f"job {job_id!r} is not open in this broker")
            self._raise_if_stopped(live)
            numbered: list[tuple[str, int, msg.TaskSpec, TaskRecord | None]] = []
            for participant, spec in asked:
                task_id = live.counters.get(participant, 0)
                live.counters[participant] = task_id + 1
                stored = live.log.pop((participant, task_id), None)
                numbered.append((participant, task_id, spec, stored))
        waiter = _Waiter(threading.Condition(self._lock), 0)
        forms: dict[int, _SpecForms] = {}  # by id(spec): the specs live in ``asked``
        outcomes: list[msg.Reply | TaskTimeoutError | _Open] = [
            self._prepare(live, participant, task_id, spec, stored, waiter, forms)
            for participant, task_id, spec, stored in numbered
        ]
        opened = [task for task in outcomes if isinstance(task, _Open)]
        if not opened:
            return [o for o in outcomes if not isinstance(o, _Open)]
        self._journal.flush_replies()  # every answer the tasks may derive from is stored
        with self._lock:
            if not live.awaiting:
                live.answered.clear()
            for task in opened:
                live.open[(task.participant, task.task_id)] = task
                self._queues.setdefault(task.participant, []).append(task)
                live.awaiting.add(task.participant)
                self._wake(task.participant)
            waiter.unanswered = len(opened)
            deadline = time.monotonic() + self._timeout
            try:
                while waiter.unanswered:
                    self._raise_if_stopped(live)
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        self._time_out(live, [t for t in opened if t.reply is None])
                        break
                    waiter.wake.wait(remaining)
            finally:
                live.awaiting.difference_update(t.participant for t in opened if t.reply is None)
        return [self._outcome(o) if isinstance(o, _Open) else o for o in outcomes]

    def _prepare(
        self, live: _Live, participant: str, task_id: int, spec: msg.TaskSpec,
        stored: TaskRecord | None, waiter: _Waiter, forms: dict[int, _SpecForms],
    ) -> msg.Reply | TaskTimeoutError | _Open:
        """Task ``task_id`` of ``participant``: its stored reply or timeout when the log
        holds it (its spec must be the stored one), else the task to open (recorded).
        ``forms`` keeps each spec's forms for the other tasks of the round."""
        job_id = live.job.id
        form = forms.get(id(spec))
        served = None if form is None else form.bodies.get(task_id)
        if form is None or served is None:
            body = msg.Task(
                job_id=job_id, task_id=task_id, algorithm=live.job.spec.algorithm, spec=spec
            ).model_dump_json()
            doc: dict[str, Any] | None = None  # the body parsed once, if at all
            if form is None:
                doc = json.loads(body)
                form = forms[id(spec)] = _SpecForms.of(doc["spec"])
            body_refs = body
            if form.blobs:
                doc = json.loads(body) if doc is None else doc
                doc["spec"] = form.refs
                body_refs = _compact(doc)
            served = form.bodies[task_id] = (body.encode(), body_refs.encode())
        if stored is not None:
            if inline(json.loads(stored.spec_json), self._stored_blob) != form.doc:
                raise ProtocolError(
                    f"job {job_id!r} cannot resume: task {task_id} of participant "
                    f"{participant!r} differs from the stored one."
                )
            if stored.timed_out is not None:  # the participant dropped out here
                return TaskTimeoutError(stored.timed_out)
            if stored.reply_json is not None:
                return _REPLY.validate_json(stored.reply_json)
        else:
            record = TaskRecord(
                job_id=job_id, participant=participant, task_id=task_id, kind=spec.kind,
                spec_json=form.refs_json, reply_json=None,
            )
            self._journal.add_task(record, form.blobs)
        return _Open(
            job_id=job_id, participant=participant, task_id=task_id, spec=spec,
            body=served[0], body_refs=served[1], blobs=form.blobs, waiter=waiter,
        )

    def _time_out(self, live: _Live, tasks: list[_Open]) -> None:
        """Withdraw ``tasks`` (their time is up; a late answer finds nothing) and store each
        one's timeout; under the lock."""
        for task in tasks:
            del live.open[(task.participant, task.task_id)]
            self._withdraw(task)
            self._journal.add_reply(TaskRecord.timeout(
                live.job.id, task.participant, task.task_id, task.spec.kind, self._late(task)
            ))

    def _late(self, task: _Open) -> str:
        return (
            f"participant {task.participant!r} did not answer task {task.task_id} "
            f"({msg.task_name(task.spec)}) within {self._timeout:g} s"
        )

    def _outcome(self, task: _Open) -> msg.Reply | TaskTimeoutError:
        return task.reply if task.reply is not None else TaskTimeoutError(self._late(task))

    def _stored_blob(self, name: str) -> bytes:
        data = self._db.blob(name)
        if data is None:
            raise ProtocolError(f"the database has lost blob {name}; the job cannot resume")
        return data

    def _raise_if_stopped(self, live: _Live) -> None:
        if self._closed:
            raise BrokerClosedError("the coordinator is shutting down")
        if live.cancelled:
            raise JobCancelledError(f"job {live.job.id!r} was cancelled")

    # -- participant side -------------------------------------------------------------------------
    def poll(
        self, participant: str, *, blobs: bool, wake: Callable[[], None] | None = None
    ) -> bytes | None:
        """The participant's oldest open task as JSON (with blob references when ``blobs``);
        when it has none, ``wake`` (if given) is called once a task arrives or the broker
        closes, unless :meth:`unwatch` removes it first."""
        with self._lock:
            queue = self._queues.get(participant)
            if queue:
                task = queue[0]
                if not blobs:
                    return task.body
                granted = self._granted.setdefault(participant, {})
                granted.update(dict.fromkeys(task.blobs, task.job_id))
                return task.body_refs
            if wake is not None and not self._closed:
                self._watchers.setdefault(participant, []).append(wake)
            return None

    def unwatch(self, participant: str, wake: Callable[[], None]) -> None:
        """Forget a wake-up callback registered by :meth:`poll` (no-op when already called)."""
        with self._lock:
            watchers = self._watchers.get(participant, [])
            if wake in watchers:
                watchers.remove(wake)

    def _wake(self, participant: str) -> None:
        for wake in self._watchers.pop(participant, []):
            with contextlib.suppress(RuntimeError):  # its event loop has closed
                wake()

    def blob(self, participant: str, name: str) -> bytes | None:
        """A blob of a task handed to ``participant`` (None if it was handed no such blob):
        from its open tasks, else from the database."""
        with self._lock:
            if name not in self._granted.get(participant, {}):
                return None
            for task in self._queues.get(participant, []):
                if name in task.blobs:
                    return task.blobs[name]
        return self._db.blob(name)

    def submit(self, participant: str, contribution: msg.Contribution) -> None:
        """Accept a contribution or raise :class:`ContributionRejectedError` (nothing changes)."""
        job_id, task_id, key = contribution.job_id, contribution.task_id, (
            participant, contribution.task_id
        )
        with self._lock:
            live = self._live.get(job_id)
            if live is not None:
                task = self._open_task(live, participant, task_id)
        if live is None:
            self._reject_stored(participant, job_id, task_id)
        try:
            msg.check_reply(task.spec, contribution.reply, live.job.n_features)
        except ValueError as exc:
            raise ContributionRejectedError(422, str(exc)) from None
        record = TaskRecord(
            job_id=job_id, participant=participant, task_id=task_id, kind=task.spec.kind,
            spec_json="", reply_json=contribution.reply.model_dump_json(),
        )
        with self._lock:
            if task.reply is not None or live.open.get(key) is not task:
                raise ContributionRejectedError(
                    409, f"task {task_id} of job {job_id!r} is no longer open"
                )
            task.reply = contribution.reply
            del live.open[key]
            self._queues[participant].remove(task)
            self._journal.add_reply(record)
            live.awaiting.discard(participant)
            live.answered.append(participant)
            task.waiter.unanswered -= 1
            if not task.waiter.unanswered:
                task.waiter.wake.notify_all()
            closed = self._closed
        if closed:  # nothing will flush it later
            self._journal.flush()

    def _open_task(self, live: _Live, participant: str, task_id: int) -> _Open:
        job_id = live.job.id
        if participant not in live.job.spec.participants:
            raise ContributionRejectedError(403, f"job {job_id!r} is not a job of this participant")
        task = live.open.get((participant, task_id))
        if task is not None and not live.cancelled:
            return task
        if task_id >= live.counters.get(participant, 0):
            raise ContributionRejectedError(
                404, f"job {job_id!r} has no task {task_id} for this participant"
            )
        if task is None:
            raise ContributionRejectedError(
                409, f"task {task_id} of job {job_id!r} is no longer open (answered, or not "
                "answered in time)"
            )
        raise ContributionRejectedError(
            409, f"job {job_id!r} is cancelled; task {task_id} is no longer open"
        )

    def _reject_stored(self, participant: str, job_id: str, task_id: int) -> NoReturn:
        """Why a contribution to a job not running here is refused."""
        job = self._db.job(job_id)
        if job is None:
            raise ContributionRejectedError(404, f"job {job_id!r} does not exist")
        if participant not in job.spec.participants:
            raise ContributionRejectedError(403, f"job {job_id!r} is not a job of this participant")
        if job.state != "running":
            raise ContributionRejectedError(
                409, f"job {job_id!r} is {job.state}; task {task_id} is no longer open"
            )
        raise ContributionRejectedError(
            409, f"job {job_id!r} is not running here yet; task {task_id} is not open"
        )


class JobChannel:
    """The :class:`~coordinator.remote.TaskChannel` of one run of one job."""

    def __init__(self, broker: Broker, job_id: str) -> None:
        self._broker = broker
        self.job_id = job_id

    def ask(self, participant: str, spec: msg.TaskSpec) -> msg.Reply:
        return self._broker.ask(self.job_id, participant, spec)

    def ask_many(
        self, asked: Sequence[tuple[str, msg.TaskSpec]]
    ) -> list[msg.Reply | TaskTimeoutError]:
        return self._broker.ask_many(self.job_id, asked)
