"""Job threads: each running job runs :func:`coordinator.job.run_job` over remote participants.

A run PUTs the job's roster to the counting service, opens a broker channel (task counters
from 0), wraps every participant in a :class:`~coordinator.remote.RemoteParticipant`, and
stores the result document on success or a clear error on failure (a participant's refusal,
a timeout, a protocol violation, the counting service). When the coordinator shuts down the
job stays ``running`` in the database; :meth:`JobRunner.resume_all` restarts such jobs at
the next start-up and the broker replays their stored answers. With ``metrics`` the job's
channel, summation and progress callback are wrapped by :mod:`coordinator.metrics`.
"""

from __future__ import annotations

import base64
import logging
import threading
from collections.abc import Callable

from fedclust.coordinator._rounds import dropout_note, require_cohort
from fedclust.coordinator.broker import (
    Broker,
    BrokerClosedError,
    JobCancelledError,
    TaskTimeoutError,
)
from fedclust.coordinator.counting_client import CountingClient, CountingError
from fedclust.coordinator.db import Database
from fedclust.coordinator.declarations import declare_job
from fedclust.coordinator.job import result_document, run_job
from fedclust.coordinator.metrics import CoordinatorMetrics, ObservedChannel, ObservedSummation
from fedclust.coordinator.paillier_sum import JobKeyHolder
from fedclust.coordinator.remote import RemoteParticipant, TaskChannel
from fedclust.coordinator.result import RoundRecord
from fedclust.coordinator.secure_sum import JobSummation
from fedclust.coordinator.summations import job_summation
from fedclust.core.errors import ProtocolError, RefusedError, UnavailableError
from fedclust.crypto.masking import IntegrityError
from fedclust.protocol import algorithms
from fedclust.protocol.wire.messages import JobCreate, ResultDocument

__all__ = ["JobRunner"]

_log = logging.getLogger("fedclust.coordinator")


class JobRunner:
    """Starts, resumes and cancels job threads."""

    def __init__(
        self, db: Database, broker: Broker, counting: CountingClient,
        metrics: CoordinatorMetrics | None = None,
    ) -> None:
        self._db = db
        self._metrics = metrics
        self._broker = broker
        self._counting = counting
        self._threads: dict[str, threading.Thread] = {}
        self._lock = threading.Lock()

    def start(self, job_id: str) -> None:
        """Run ``job_id`` in its own thread (no-op if it already runs)."""
        with self._lock:
            thread = self._threads.get(job_id)
            if thread is not None and thread.is_alive():
                return
            thread = threading.Thread(
                target=self._run, args=(job_id,), name=f"fedclust-job-{job_id}", daemon=True
            )
            self._threads[job_id] = thread
            thread.start()

    def resume_all(self) -> list[str]:
        """Restart every pending or running job (at start-up); returns their ids."""
        ids = [job.id for job in self._db.jobs(("pending", "running"))]
        for job_id in ids:
            _log.info("resuming job %s", job_id, extra={"job_id": job_id})
            self.start(job_id)
        return ids

    def cancel(self, job_id: str) -> bool:
        """Cancel a pending or running job; False when it has already finished."""
        changed = self._db.set_state(job_id, "cancelled", only_from=("pending", "running"))
        self._broker.cancel(job_id)
        return changed

    def shutdown(self, timeout: float = 10.0) -> None:
        """Stop every job thread; the jobs stay resumable."""
        self._broker.close()
        with self._lock:
            threads = list(self._threads.values())
        for thread in threads:
            thread.join(timeout)

    def join(self, job_id: str, timeout: float | None = None) -> None:
        """Wait for a job's thread to end (tests, in-process mode)."""
        with self._lock:
            thread = self._threads.get(job_id)
        if thread is not None:
            thread.join(timeout)

    def _run(self, job_id: str) -> None:
        job = self._db.job(job_id)
        if job is None or job.state not in ("pending", "running"):
            return
        spec = job.spec
        channel: TaskChannel = self._broker.open_job(job)

        def report(stage: str, k: int | None, record: RoundRecord | None) -> None:
            self._broker.set_stage(
                job_id, stage, k,
                None if record is None else record.round,
                None if record is None else record.shift,
            )

        on_progress: Callable[[str, int | None, RoundRecord | None], None] = report
        if self._metrics is not None:
            channel = ObservedChannel(channel, self._metrics)
            on_progress = self._metrics.round_timer(report)
        try:
            if not self._db.set_state(job_id, "running", only_from=("pending", "running")):
                return
            on_progress("starting", None, None)
            self._counting.put_roster(job_id, list(spec.participants))
            remotes = [
                RemoteParticipant(name, channel=channel, n_features=job.n_features)
                for name in spec.participants
            ]
            summation = self._summation(job_id, spec)
            if summation is not None and self._metrics is not None:
                summation = ObservedSummation(summation, self._metrics, spec.protection)
            declared, left_out = remotes, []
            algorithm = algorithms.get(spec.algorithm)
            if algorithm.family == "model":  # run_job declares the sweep algorithms
                on_progress("declaring", None, None)
                bounds = declare_job(remotes, spec, n_features=job.n_features)
                if summation is not None:
                    summation.set_bounds(max_rows=bounds.max_rows, value_bound=bounds.value_bound)
                # The driver runs over those that declared (after a dropout, at least 3).
                declared = require_cohort(remotes)
                left_out = [
                    dropout_note(p.name, "at the declaration", p.dropped)
                    for p in remotes if p.dropped is not None
                ]
                document = algorithm.procedure()(
                    declared, spec, summation=summation,
                    on_stage=lambda stage: on_progress(stage, None, None),
                    notes=left_out,
                )
            else:
                outcome = run_job(
                    remotes, spec, total_count=lambda: self._counting.total(job_id),
                    on_progress=on_progress, summation=summation,
                )
                document = result_document(outcome, spec)
            on_progress("done", None, None)
            self._succeed(job_id, document)
        except BrokerClosedError:
            _log.info(
                "job %s paused: the coordinator is shutting down", job_id,
                extra={"job_id": job_id},
            )
        except JobCancelledError:
            _log.info("job %s cancelled", job_id, extra={"job_id": job_id})
        except RefusedError as exc:
            self._fail(job_id, f"refused: {exc}")
        except TaskTimeoutError as exc:
            self._fail(job_id, f"timeout: {exc}")
        except UnavailableError as exc:  # dropouts the job could not go on without
            self._fail(job_id, f"participants unavailable: {exc}")
        except ProtocolError as exc:
            self._fail(job_id, f"protocol error: {exc}")
        except IntegrityError:
            self._fail(
                job_id,
                "secure sum failed: a participant's signature, sealed share or rebuilt secret "
                "did not verify (a tampered or inconsistent message)",
            )
        except CountingError as exc:
            self._fail(job_id, f"counting service: {exc}")
        except (ValueError, ArithmeticError) as exc:
            self._fail(job_id, f"invalid job: {exc}")
        except Exception:
            _log.exception("job %s failed unexpectedly", job_id, extra={"job_id": job_id})
            self._fail(job_id, "internal error in the coordinator (see its log)")
        finally:
            self._broker.close_job(job_id)

    def _summation(self, job_id: str, spec: JobCreate) -> JobSummation | None:
        """The job's summation (:func:`coordinator.summations.job_summation`) over the
        identity keys the participants enrolled with and the counting service's key."""

        def enrolled_keys() -> dict[str, bytes]:
            enrolled = self._db.participants()
            keys: dict[str, bytes] = {}
            for name in spec.participants:
                record = enrolled.get(name)
                if record is None or record.identity_key is None:
                    raise ValueError(
                        f"participant {name!r} enrolled without an identity key; masking "
                        "needs every participant's Ed25519 public key (upgrade its agent)."
                    )
                keys[name] = base64.b64decode(record.identity_key)
            return keys

        return job_summation(
            spec, job_id, identity_keys=enrolled_keys,
            key_holder=lambda: JobKeyHolder(
                job_id, self._counting.paillier_key, self._counting.paillier_decrypt
            ),
        )

    def _succeed(self, job_id: str, document: ResultDocument) -> None:
        self._broker.flush()
        progress = self._broker.progress(job_id)
        if self._db.set_state(
            job_id, "succeeded", only_from=("running",), progress=progress, result=document
        ):
            _log.info("job %s succeeded", job_id, extra={"job_id": job_id})

    def _fail(self, job_id: str, error: str) -> None:
        self._broker.flush()
        progress = self._broker.progress(job_id)
        if self._db.set_state(
            job_id, "failed", only_from=("running",), progress=progress, error=error
        ):
            _log.info("job %s failed", job_id, extra={"job_id": job_id})
