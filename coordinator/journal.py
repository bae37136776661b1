"""Group commit of the broker's writes: many tasks and replies, one transaction.

The broker keeps running jobs in memory and records new tasks, replies and progress here.
Nothing is written until someone needs it durable. Before a new task becomes visible to a
participant every reply recorded so far is stored (the task may be derived from them: a
restarted coordinator must never derive it again from different answers); the task itself
may wait for the next write, since a resumed job asks it again, identically. The broker also
flushes before a job's final state and at shutdown. Threads flushing at once share one
transaction: a flush waits for a running one and then writes whatever has accumulated. So a
round costs one transaction: asked at once (``Broker.ask_many``), its tasks are stored with
the previous round's replies before any goes out.
"""

from __future__ import annotations

import threading

from fedclust.coordinator.db import Batch, Database, TaskRecord
from fedclust.protocol.wire.messages import JobProgress

__all__ = ["Journal"]


class Journal:
    """Pending writes for ``db``, numbered in the order they were recorded."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._lock = threading.Lock()  # guards the pending batch and the counters
        self._flushing = threading.Lock()  # one transaction at a time
        self._pending = Batch()
        self._recorded = 0
        self._last_reply = 0
        self._durable = 0

    def add_task(self, task: TaskRecord, blobs: dict[str, bytes]) -> None:
        """Record a new task (spec with blob references) and its blobs."""
        with self._lock:
            self._pending.tasks.append(task)
            self._pending.blobs.update(blobs)
            self._recorded += 1

    def add_reply(self, reply: TaskRecord) -> None:
        """Record a task's reply."""
        with self._lock:
            self._pending.replies.append(reply)
            self._recorded += 1
            self._last_reply = self._recorded

    def set_progress(self, job_id: str, progress: JobProgress) -> None:
        """Record a job's latest progress (written with the next flush)."""
        with self._lock:
            self._pending.progress[job_id] = progress

    def flush_replies(self) -> None:
        """Make every reply recorded so far durable (with whatever else is pending)."""
        with self._lock:
            upto = self._last_reply
        self.flush(upto)

    def flush(self, upto: int | None = None) -> None:
        """Write everything pending; with ``upto``, return at once if that write (and so every
        earlier one) is already stored."""
        with self._flushing:
            if upto is not None and self._durable >= upto:
                return
            with self._lock:
                batch, self._pending = self._pending, Batch()
                recorded = self._recorded
            if batch:
                try:
                    self._db.write(batch)
                except BaseException:
                    with self._lock:  # keep the writes for the next attempt, in order
                        batch.tasks += self._pending.tasks
                        batch.replies += self._pending.replies
                        batch.blobs.update(self._pending.blobs)
                        batch.progress.update(self._pending.progress)
                        self._pending = batch
                    raise
            self._durable = recorded
