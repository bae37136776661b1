"""The participant agent: enrol with the coordinator, fetch tasks, answer them from local rows.

:func:`run_agent` loads the data once (:mod:`participant.config`), checks them against the
bounds its policy declares, enrols, then long-polls ``GET /tasks/next`` and answers each task
with :func:`participant.dispatch.execute` on the job's
:class:`~participant.local.LocalParticipant`; ``report_count`` sends N_l to the counting
service only. A job's first task (``declare``) carries its terms, judged by the policy and
:mod:`participant.rosters`; later tasks must fit them (:mod:`participant.terms`).
``state_dir/jobs/<job_id>.json`` keeps each job's terms, standardisations and step count
across restarts. Refusals are :class:`~protocol.wire.messages.RefusalReply` replies; network
errors and 5xx answers are retried with backoff until ``stop`` is set. Every body is recorded
in the audit log (:mod:`participant.audit`, fsynced) before it is sent, and no token, count
or data value is logged.

Design notes: ``docs/participant.md`` (§ The agent).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlencode

import httpx
import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, ValidationError
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    retry_if_result,
    wait_exponential,
    wait_random_exponential,
)

from fedclust.core.errors import RefusedError
from fedclust.crypto.masking import IdentityKey
from fedclust.infra.logformat import startup_line, tls_mode
from fedclust.infra.private_files import private_file, write_private
from fedclust.participant.audit import AuditLog, Recipient
from fedclust.participant.config import ParticipantConfig
from fedclust.participant.dispatch import SecureStages, execute
from fedclust.participant.local import LocalParticipant
from fedclust.participant.model_tasks import ModelTasks
from fedclust.participant.paillier_input import PaillierSession
from fedclust.participant.rosters import RosterBook
from fedclust.participant.secure import PeerPins, SecureSession, load_identity
from fedclust.participant.terms import (
    OwnBounds,
    held_bounds,
    require_feature_names,
    require_task,
)
from fedclust.protocol.maths.declaration import Declaration
from fedclust.protocol.maths.rows import Rows, RowSource, largest_magnitude, pin_blas_threads
from fedclust.protocol.wire import messages as msg
from fedclust.protocol.wire.audit import AuditHead
from fedclust.protocol.wire.blobs import BLOB_KEY, digest, inline
from fedclust.protocol.wire.secure import b64

__all__ = ["STEP_KINDS", "AgentError", "JobState", "StateStore", "run_agent"]

log = logging.getLogger("fedclust.participant")

#: Task kinds (or the statistics of ``statistic`` tasks, ``messages.task_name``) that count as
#: one round of an algorithm towards ``policy.max_rounds`` (for FedCRef an iteration's
#: refinement, for fed-distill its distillation).
STEP_KINDS: Final = frozenset(
    {
        "fcm_sums", "local_fcm", "kfed_centers", "kfed_dennis_centers", "hold_local_fcm",
        "hold_kmeans_init", "hold_kmeans_step", "fedcref_refine", "distill_step",
    }
)

_JOBS_IN_MEMORY: Final = 4
_BLOBS_IN_MEMORY: Final = 16
_HOLD_TASKS: Final = (msg.HoldLocalFcmTask, msg.HoldKmeansInitTask, msg.HoldKmeansStepTask)
_REASON_MAX: Final = 2000
#: The refusal of every task of a job after a protected sum of it was over its bound.
OVER_BOUND_BEFORE: Final = (
    "this participant refused a protected sum of this job as over a bound its own "
    "declaration implies, so its declaration does not hold: it takes no further part in the "
    "job: refused."
)
#: An idle agent anchors its audit log's head at the coordinator at most this often (s).
AUDIT_ANCHOR_SECONDS: Final = 30.0
#: 2: the job's declared terms (a version 1 file loads without); 3: the held centers' bounds
#: and the over-bound mark (a version 2 file loads without).
_STATE_VERSION: Final = 3


class AgentError(Exception):
    """The agent cannot go on: its credentials or enrolment were refused, or its URL is wrong."""


class _StoppedError(Exception):
    """``stop`` was set while the agent waited."""


# -- persisted per-job state ---------------------------------------------------------------------
@dataclass(frozen=True)
class Standardisation:
    """One applied ``apply_standardisation`` task: its id and the federation's mean and scale."""

    task_id: int
    mean: tuple[float, ...]
    scale: tuple[float, ...]


@dataclass
class JobState:
    """What the agent remembers of a job across restarts: the terms its declare task carried
    (None before it, or in a state saved before version 2: every later task is then refused
    until the job is declared again), standardisations, rounds, the secure-sum replay guard,
    the public bounds of the local centers held (``participant.terms.held_bounds``) and
    whether a protected sum was refused as over its bound (every later task is then refused)."""

    standardisations: list[Standardisation] = field(default_factory=list)
    steps: int = 0
    last_step_task: int = -1
    secure_round: int = 0  # the latest secure sum begun (replay guard across restarts)
    terms: msg.JobCreate | None = None
    held: tuple[float, float] | None = None
    over_bound: bool = False

    def own_bounds(self, declaration: Declaration, n_features: int) -> OwnBounds:
        """This participant's public bounds in the job now (``participant.terms``)."""
        return OwnBounds.of(
            declaration, n_features, [(s.mean, s.scale) for s in self.standardisations],
            self.held,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "version": _STATE_VERSION,
            "standardisations": [
                {"task_id": s.task_id, "mean": list(s.mean), "scale": list(s.scale)}
                for s in self.standardisations
            ],
            "steps": self.steps,
            "last_step_task": self.last_step_task,
            "secure_round": self.secure_round,
            "terms": None if self.terms is None else self.terms.model_dump(mode="json"),
            "held": None if self.held is None else list(self.held),
            "over_bound": self.over_bound,
        }

    @classmethod
    def from_json(cls, doc: Any) -> JobState:
        """Parse a saved state; ValueError when it is not one."""
        try:
            if doc["version"] not in (1, 2, _STATE_VERSION):
                raise ValueError(f"unsupported state version {doc['version']!r}")
            terms = doc.get("terms")
            held = doc.get("held")
            over_bound = doc.get("over_bound", False)
            if not isinstance(over_bound, bool):
                raise ValueError("over_bound must be true or false")
            return cls(
                standardisations=[
                    Standardisation(
                        task_id=int(s["task_id"]),
                        mean=tuple(float(v) for v in s["mean"]),
                        scale=tuple(float(v) for v in s["scale"]),
                    )
                    for s in doc["standardisations"]
                ],
                steps=int(doc["steps"]),
                last_step_task=int(doc["last_step_task"]),
                secure_round=int(doc.get("secure_round", 0)),
                terms=None if terms is None else msg.JobCreate.model_validate(terms),
                held=None if held is None else (float(held[0]), float(held[1])),
                over_bound=over_bound,
            )
        except (KeyError, TypeError, ValueError, IndexError) as exc:  # ValidationError too
            raise ValueError(f"not a saved job state ({exc})") from None


class StateStore:
    """Per-job JSON files under ``root/jobs`` (written atomically, mode 0600, folders 0700:
    :mod:`infra.private_files`)."""

    def __init__(self, root: Path) -> None:
        self._dir = root / "jobs"

    def path(self, job_id: str) -> Path:
        return self._dir / f"{job_id}.json"  # job ids are [A-Za-z0-9_.-]: no separators

    def load(self, job_id: str) -> JobState:
        """The saved state of ``job_id`` (empty when none); ValueError if the file is bad."""
        file = self.path(job_id)
        try:
            text = file.read_text(encoding="utf-8")
        except FileNotFoundError:
            return JobState()
        except OSError as exc:  # the reason goes to the coordinator: no local paths in it
            log.error("job %s: cannot read %s (%s)", job_id, file, exc)
            raise ValueError(
                f"the agent's saved state of job {job_id!r} is unreadable ({exc.strerror})"
            ) from None
        try:
            return JobState.from_json(json.loads(text))
        except ValueError as exc:
            log.error("job %s: %s is damaged (%s)", job_id, file, exc)
            raise ValueError(
                f"the agent's saved state of job {job_id!r} is damaged; the participant's "
                "operator must repair or remove it"
            ) from None

    def save_held(self, job_id: str, local: LocalParticipant) -> None:
        """Save the local centers a hold task kept (mode 0600: they describe the data)."""
        held = local.held
        if held is None:
            return
        points, objective = held
        file = self.path(job_id).with_suffix(".held.npz")
        with private_file(file) as handle:
            np.savez(handle, points=points.points, weights=points.weights,
                     objective=np.float64(objective))

    def load_held(self, job_id: str, local: LocalParticipant) -> bool:
        """Restore the saved held centers of ``job_id`` into ``local`` (False: none saved).

        Raises:
            ValueError: the file is damaged (a reason without local paths).
        """
        file = self.path(job_id).with_suffix(".held.npz")
        if not file.exists():
            return False
        try:
            with np.load(file, allow_pickle=False) as saved:
                local.restore_held(saved["points"], saved["weights"], float(saved["objective"]))
        except (OSError, KeyError, ValueError) as exc:
            log.error("job %s: %s is damaged (%s)", job_id, file, exc)
            raise ValueError(
                f"the agent's saved local centers of job {job_id!r} are damaged; the "
                "participant's operator must repair or remove them"
            ) from None
        return True

    def save(self, job_id: str, state: JobState) -> None:
        """Replace the saved state of ``job_id`` (mode 0600: it holds the data's means)."""
        write_private(self.path(job_id), json.dumps(state.to_json()))


@dataclass
class _Job:
    local: LocalParticipant
    state: JobState
    secure: SecureStages


# -- the agent -----------------------------------------------------------------------------------
def _log_model_device(config: ParticipantConfig) -> None:
    """Log where the model-based algorithms will train (``[model] device``). A GPU named
    explicitly is checked now, when PyTorch is installed, so that one the machine lacks fails
    at start (ValueError naming the key); ``auto`` is resolved, and logged, at the first model
    task (importing torch here would slow every agent's start)."""
    if config.device.startswith("cuda") and importlib.util.find_spec("torch") is not None:
        from fedclust.participant.deep.device import resolve_device

        resolve_device(config.device, where="[model] device")
    log.info("participant %s: model-based tasks train on [model] device = %r", config.id,
             config.device)


def run_agent(
    config: ParticipantConfig,
    *,
    stop: threading.Event | None = None,
    transport: httpx.BaseTransport | None = None,
    counting_transport: httpx.BaseTransport | None = None,
    poll_wait: float = 20.0,
    retry_initial: float = 0.5,
    retry_max: float = 30.0,
) -> None:
    """Run the participant agent until ``stop`` is set.

    Args:
        config: the participant's configuration; its data file is read once, here.
        stop: set it (e.g. from a signal handler) to stop after the current request.
        transport: the httpx transport to the coordinator (default: the network); tests and
            the in-process mode pass e.g. :class:`httpx.MockTransport`.
        counting_transport: the same for the counting service.
        poll_wait: seconds the coordinator may hold a long poll (0..60).
        retry_initial, retry_max: the exponential backoff after network errors, in seconds.

    Raises:
        ValueError: the data file cannot be read (the message names file and column), or
            the timing arguments are out of range.
        AgentError: the coordinator refuses this participant's token or enrolment.
        participant.audit.AuditError: the audit log's last line is damaged (a ValueError).
    """
    if not 0.0 <= poll_wait <= 60.0:
        raise ValueError(f"poll_wait must be in [0, 60] seconds; got {poll_wait}.")
    if not 0.0 < retry_initial <= retry_max:
        raise ValueError(
            f"need 0 < retry_initial <= retry_max; got {retry_initial} and {retry_max}."
        )
    stop = stop if stop is not None else threading.Event()
    log.info("%s", startup_line(
        f"participant {config.id}",
        calls=(("coordinator", config.coordinator_url), ("counting service", config.counting_url)),
        tls=tls_mode(config.tls, serving=False, url=config.coordinator_url),
    ))
    pin_blas_threads(1)
    identity = load_identity(config.identity_path)
    audit = AuditLog(config.audit_path, identity=identity)
    rows = config.data.rows()
    y = config.data.load_labels()
    if y is not None and y.shape[0] != rows.n_rows:
        raise ValueError(f"data file {config.data.path}: the label column has the wrong length.")
    try:
        declaration = config.policy.declare_extent(rows.n_rows, largest_magnitude(rows))
    except ValueError as exc:
        raise ValueError(f"data file {config.data.path}: {exc}") from None
    log.info(
        "participant %s: %d features from %s%s", config.id, rows.n_features,
        config.data.path.name,
        f" (re-read in chunks of {config.data.memory_mb} MiB)" if config.data.stream else "",
    )
    log.info(
        "participant %s: declares %s (%s) and value_bound=%r (%s) to every coordinator",
        config.id, declaration.describe_rows(),
        "derived from the data" if declaration.row_bound_derived else "configured",
        declaration.value_bound,
        "derived from the data" if declaration.value_bound_derived else "configured",
    )
    _log_model_device(config)
    auth = config.auth_headers
    timeout = httpx.Timeout(30.0, read=poll_wait + 30.0)
    verify = config.tls.httpx_verify()  # https:// services: [tls] ca, client certificate
    with (
        httpx.Client(
            base_url=config.coordinator_url + "/api/v1",
            headers=auth,
            transport=transport,
            timeout=timeout,
            verify=verify,
        ) as coordinator,
        httpx.Client(
            base_url=config.counting_url + "/api/v1",
            headers=auth,
            transport=counting_transport,
            timeout=timeout,
            verify=verify,
        ) as counting,
    ):
        agent = _Agent(
            config, rows, labels=y, stop=stop, coordinator=coordinator, counting=counting,
            audit=audit,
            identity=identity, poll_wait=poll_wait, retry_initial=retry_initial,
            retry_max=retry_max,
        )
        with contextlib.suppress(_StoppedError):
            agent.run()
    log.info("participant %s: stopped", config.id)


class _Agent:
    def __init__(
        self,
        config: ParticipantConfig,
        rows: RowSource,
        *,
        labels: NDArray[np.int64] | None = None,
        stop: threading.Event,
        coordinator: httpx.Client,
        counting: httpx.Client,
        audit: AuditLog,
        identity: IdentityKey,
        poll_wait: float,
        retry_initial: float,
        retry_max: float,
    ) -> None:
        self._config = config
        self._identity = identity
        if isinstance(rows, Rows):
            rows.X.flags.writeable = False  # shared by every job, never modified
        self._rows = rows
        self._labels = labels
        self._stop = stop
        self._coordinator = coordinator
        self._counting = counting
        self._audit = audit
        # The long poll's query, encoded once (as httpx would encode these params).
        self._poll_query = urlencode({"wait": poll_wait, "blobs": "true"})
        self._retry_initial = retry_initial
        self._retry_max = retry_max
        self._states = StateStore(config.state_dir)
        self._pins = PeerPins(config.state_dir / "peer-identities.json", config.peers)
        self._rosters = RosterBook(config.state_dir / "rosters.json")
        self._announced: set[tuple[str, str]] = set()  # (route, notice) the service accepted
        self._jobs: OrderedDict[str, _Job] = OrderedDict()
        self._blobs: OrderedDict[str, bytes] = OrderedDict()  # by SHA-256, least recent first
        self._anchored_line = 0  # the log's line that recorded the last head sent
        self._anchored_at = -math.inf

    # -- loop ------------------------------------------------------------------------------
    def run(self) -> None:
        self._enrol()
        self._anchored_line = self._audit.head()[0]  # anchoring starts with the first task
        task: msg.Task | None = None
        while not self._stop.is_set():
            if task is None:
                self._anchor_audit_head()
                task = self._next_task()
            else:  # the answer's response carries the next task
                task = self._submit(task.job_id, task.task_id, self._answer(task))

    def _enrol(self) -> None:
        enrolment = msg.Enrolment.model_validate(
            {
                "n_features": self._rows.n_features,
                "allowed_algorithms": sorted(self._config.policy.allowed_algorithms),
                "agent_version": _version(),
                "identity_key": b64(self._identity.public_bytes()),
            }
        )
        response = self._request(
            self._coordinator, "POST", "/participants/enrol",
            what="enrolment",
            body=_Body(enrolment, recipient="coordinator", what="enrolment", kind="enrolment"),
        )
        if response.status_code in (401, 403):
            check = (
                "[participant] token and id in its config file"
                if self._config.token is not None
                else "its [tls] certificate (it must name the participant id) and that the "
                'services take certificates alone ([tls] participant_auth = "certificate")'
            )
            raise AgentError(
                f"the coordinator at {self._config.coordinator_url} refused the "
                f"{self._config.credential} of participant {self._config.id!r} "
                f"(HTTP {response.status_code}): check {check}."
            )
        if not response.is_success:
            raise AgentError(
                f"the coordinator refused the enrolment of participant {self._config.id!r}: "
                f"HTTP {response.status_code} {_detail(response)}"
            )
        log.info("participant %s: enrolled with the coordinator", self._config.id)

    def _anchor_audit_head(self) -> None:
        """Send the audit log's head to the coordinator when lines were added since the last
        one (besides that head's own line) and AUDIT_ANCHOR_SECONDS have passed."""
        seq, line_sha256 = self._audit.head()
        now = time.monotonic()
        if seq <= self._anchored_line or now - self._anchored_at < AUDIT_ANCHOR_SECONDS:
            return
        head = AuditHead(
            seq=seq, line_sha256=line_sha256,
            signature=b64(self._identity.sign_audit("head", seq, line_sha256)),
        )
        response = self._request(
            self._coordinator, "POST", "/audit/heads", what="audit head",
            body=_Body(head, recipient="coordinator", what="audit_head", kind="audit_head"),
        )
        self._anchored_line, self._anchored_at = self._audit.head()[0], now
        if not response.is_success:
            log.warning(
                "participant %s: the coordinator refused audit head %d: HTTP %d %s",
                self._config.id, seq, response.status_code, _detail(response),
            )

    def _next_task(self) -> msg.Task | None:
        response = self._request(
            self._coordinator, "GET", f"/tasks/next?{self._poll_query}", what="task poll"
        )
        return self._read_task(response)

    def _read_task(self, response: httpx.Response) -> msg.Task | None:
        """The task a poll (or an answer) returned; None for 204 or an unreadable task."""
        if response.status_code == 204:
            return None
        if response.status_code != 200:
            raise AgentError(
                f"the coordinator refused to hand out tasks to participant {self._config.id!r}: "
                f"HTTP {response.status_code} {_detail(response)}"
            )
        try:
            if BLOB_KEY.encode() not in response.content:
                return msg.Task.model_validate_json(response.content)
            return msg.Task.model_validate(inline(json.loads(response.content), self._blob))
        except ValidationError as exc:
            self._refuse_unreadable(response, exc)
            return None

    def _blob(self, name: str) -> bytes:
        """A task's large value by SHA-256, fetched once and kept for the next tasks."""
        data = self._blobs.get(name)
        if data is None:
            response = self._request(self._coordinator, "GET", f"/blobs/{name}", what="blob")
            if response.status_code != 200:
                raise AgentError(
                    f"the coordinator did not hand out blob {name}: "
                    f"HTTP {response.status_code} {_detail(response)}"
                )
            data = response.content
            if digest(data) != name:
                raise AgentError(f"the coordinator's blob {name} does not hash to its name")
            self._blobs[name] = data
            while len(self._blobs) > _BLOBS_IN_MEMORY:
                self._blobs.popitem(last=False)
        self._blobs.move_to_end(name)
        return data

    def _refuse_unreadable(self, response: httpx.Response, exc: ValidationError) -> None:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}"
            for err in exc.errors(include_input=False, include_url=False)[:5]
        )
        reason = f"this agent cannot read the task (protocol version {msg.PROTOCOL_VERSION}): "
        try:
            raw = response.json()
            job_id, task_id = raw["job_id"], raw["task_id"]
            ids = msg.Contribution(job_id=job_id, task_id=task_id, reply=msg.AckReply())
        except (ValueError, KeyError, TypeError, ValidationError):
            log.error("received a task that names no job or task id; ignoring it")
            self._stop.wait(self._retry_max)  # do not spin on a task nobody can answer
            return
        log.warning("job %s task %d: unreadable task (%s)", ids.job_id, ids.task_id, problems)
        self._submit(ids.job_id, ids.task_id, msg.RefusalReply(reason=_clip(reason + problems)))

    # -- one task --------------------------------------------------------------------------
    def _answer(self, task: msg.Task) -> msg.Reply:
        spec = task.spec
        try:
            job = self._job(task.job_id)
        except ValueError as exc:
            return msg.RefusalReply(reason=_clip(str(exc)))
        state = job.state
        if state.over_bound:
            return msg.RefusalReply(reason=OVER_BOUND_BEFORE, fatal=True)
        if isinstance(spec, msg.ApplyStandardisationTask) and any(
            s.task_id == task.task_id for s in state.standardisations
        ):
            return msg.AckReply()  # applied before a restart; the rows already carry it
        step_kind = msg.task_name(
            spec.statistic if isinstance(spec, msg.SecureInputTask | msg.PaillierInputTask)
            else spec
        )
        new_step = step_kind in STEP_KINDS and task.task_id > state.last_step_task
        own = state.own_bounds(job.local.declaration, job.local.n_features)
        try:
            self._config.policy.require(task.algorithm)
            self._require_declared(task, state, own)
            if new_step:
                self._config.policy.require_round(state.steps + 1)
        except RefusedError as exc:
            log.info("job %s task %d: refused (%s)", task.job_id, task.task_id, exc)
            return msg.RefusalReply(reason=_clip(str(exc)))
        try:
            reply = execute(job.local, task, job.secure)
        except (_StoppedError, AgentError):
            raise
        except Exception as exc:  # the rows cannot answer this task: say so, do not crash
            # The detail stays in the local log: a message may describe the data (such as a
            # row count), and the reason goes to the coordinator.
            log.warning(
                "job %s task %d: cannot compute a %s task: %s",
                task.job_id, task.task_id, msg.task_name(spec), exc,
            )
            reply = msg.RefusalReply(
                reason=_clip(f"participant {self._config.id!r} cannot compute this "
                             f"{msg.task_name(spec)!r} task ({type(exc).__name__}; details in "
                             "its log)")
            )
        if isinstance(reply, msg.RefusalReply):
            log.info("job %s task %d: refused (%s)", task.job_id, task.task_id, reply.reason)
            if reply.fatal:  # over a bound: the declaration is false, the job is over here
                state.over_bound = True
                try:
                    self._states.save(task.job_id, state)
                except OSError as exc:
                    log.error("job %s: cannot save the agent's state (%s)", task.job_id, exc)
            return reply
        if isinstance(spec, _HOLD_TASKS):
            try:
                self._states.save_held(task.job_id, job.local)
            except OSError as exc:
                return self._unsaved(task.job_id, "the held centers", exc)
            state.held = held_bounds(spec, own)
        begins_sum = False
        if isinstance(spec, msg.SecureInputTask | msg.PaillierInputTask):
            begins_sum = True
            state.secure_round = max(state.secure_round, spec.round)
        declares = isinstance(spec, msg.DeclareTask) and state.terms is None
        if declares:
            assert isinstance(spec, msg.DeclareTask)
            state.terms = spec.terms
        if isinstance(spec, msg.ApplyStandardisationTask) or new_step or begins_sum or declares:
            if isinstance(spec, msg.ApplyStandardisationTask):
                state.standardisations.append(
                    Standardisation(
                        task_id=task.task_id,
                        mean=tuple(float(v) for v in spec.mean.to_numpy()),
                        scale=tuple(float(v) for v in spec.scale.to_numpy()),
                    )
                )
            if new_step:
                state.steps += 1
                state.last_step_task = task.task_id
            try:
                self._states.save(task.job_id, state)
            except OSError as exc:
                return self._unsaved(task.job_id, "the agent's state", exc)
        return reply

    def _unsaved(self, job_id: str, what: str, exc: OSError) -> msg.RefusalReply:
        """The refusal of an answer whose state could not be saved (memory and disk would
        disagree: the job is rebuilt from disk when next asked)."""
        self._jobs.pop(job_id, None)
        log.error("job %s: cannot save %s (%s)", job_id, what, exc)
        return msg.RefusalReply(
            reason=_clip(f"participant {self._config.id!r} cannot save its state for this job "
                         f"({exc.strerror})")
        )

    def _require_declared(self, task: msg.Task, state: JobState, own: OwnBounds) -> None:
        """The job's declaration and the policy, before anything is computed.

        A declare task: the policy must accept the job's protection and the roster rule its
        roster (``participant.rosters``); a job's terms cannot change. Every other task: the
        job was declared to this agent, the task is one its declared terms and this
        participant's ``own`` declared bounds allow (``participant.terms``), and a secure
        sum's cohort lies within its roster. Each refusal depends on the task, the declared
        terms, the participant's own declaration and the policy only.
        """
        spec, policy = task.spec, self._config.policy
        if isinstance(spec, msg.DeclareTask):
            if task.algorithm != spec.terms.algorithm:
                raise RefusedError(
                    f"the declare task names algorithm {task.algorithm!r} but its job's terms "
                    f"{spec.terms.algorithm!r}: refused."
                )
            policy.require_protection(spec.terms.protection)
            require_feature_names(spec.terms, own.n_features, self._config.data.columns)
            self._rosters.admit(task.job_id, spec.roster, policy, me=self._config.id)
            if state.terms is not None and state.terms != spec.terms:
                raise RefusedError(
                    f"job {task.job_id!r} was declared before with other terms; a job's terms "
                    "cannot change: refused."
                )
            return
        cohort = (
            spec.roster if isinstance(spec, msg.SecureSetupTask)
            else spec.cohort if isinstance(spec, msg.SecureInputTask)
            else None
        )
        self._rosters.require_admitted(task.job_id, cohort)
        if state.terms is None:
            raise RefusedError(
                f"this participant holds no declared terms of job {task.job_id!r} (its state "
                "predates them): the job's declare task must come again before its other "
                "tasks: refused."
            )
        policy.require_protection(state.terms.protection)  # the policy may have changed since
        require_task(state.terms, task.algorithm, spec, own)
        if isinstance(spec, msg.SecureInputTask):
            self._announce_cohort(task.job_id, spec.cohort)
        elif isinstance(spec, msg.SecureUnmaskTask):
            self._register_unmasking(task.job_id, spec)

    def _announce_cohort(self, job_id: str, cohort: Sequence[str]) -> None:
        """Before its masked input, tell the counting service the cohort whose sum the
        coordinator will unmask, once per distinct cohort of a job: the service's
        differencing guard refuses a cohort that, with those released before (totals,
        Paillier rounds, cohorts of any job), would make a statistic of fewer than the
        minimum cohort derivable, and this participant then refuses to contribute."""
        self._notify_counting(
            job_id, "cohorts", msg.CohortNotice(job_id=job_id, cohort=sorted(cohort)),
            kind="cohort_notice", refused="this masked sum's cohort", once=True,
        )

    def _register_unmasking(self, job_id: str, spec: msg.SecureUnmaskTask) -> None:
        """Before answering any unmasking, register its view (survivors, dropouts) of the
        round at the counting service, once per round: the service accepts the first view of
        a round only, so a coordinator cannot show two groups two splits of one round and
        collect this participant's pair keys under the one and its self-mask's shares under
        the other. The survivors pass the differencing guard as a released cohort (e.g. the
        survivors of a dropout the coordinator forced after a sum over everyone are
        refused), and this participant then refuses to answer."""
        view = msg.UnmaskView(
            job_id=job_id, setup=spec.setup, round=spec.round,
            survivors=sorted(spec.survivors), dropped=sorted(spec.dropped),
        )
        self._notify_counting(
            job_id, "unmasking", view, kind="unmask_view", once=True,
            refused="this masked sum's unmasking (one view of who survived is unmasked per "
            "round, and its survivors must pass the differencing guard)",
        )

    def _job(self, job_id: str) -> _Job:
        job = self._jobs.get(job_id)
        if job is not None:
            self._jobs.move_to_end(job_id)
            return job
        state = self._states.load(job_id)
        local = LocalParticipant(
            self._rows,
            name=self._config.id,
            policy=self._config.policy,
            count_sink=self._count_sink(job_id),
        )
        # Model-based tasks (torch imported only when one arrives; refused without labels,
        # and by an agent that streams its rows).
        if isinstance(self._rows, Rows):
            local.model_tasks = ModelTasks(
                self._rows.X, self._labels, name=self._config.id,
                state=self._states.path(job_id), device=self._config.device,
            )
        for s in state.standardisations:
            try:
                local.apply_standardisation(np.asarray(s.mean), np.asarray(s.scale))
            except ValueError as exc:
                raise ValueError(
                    f"the saved standardisation of job {job_id!r} does not fit this "
                    f"participant's data: {exc}"
                ) from None
        if state.standardisations:
            log.info("job %s: re-applied the saved standardisation", job_id)
        if self._states.load_held(job_id, local):
            log.info("job %s: took up the local centers held before a restart", job_id)
        secure = SecureStages(
            SecureSession(
                local, participant_id=self._config.id, job_id=job_id, identity=self._identity,
                pins=self._pins, last_round=state.secure_round,
                keys_dir=self._states.path(job_id).with_name(f"{job_id}.keys"),
            ),
            PaillierSession(
                local, participant_id=self._config.id, job_id=job_id,
                announce=self._announcer(job_id), expected_key=self._job_key(job_id),
                last_round=state.secure_round,
            ),
        )
        job = _Job(local=local, state=state, secure=secure)
        self._jobs[job_id] = job
        while len(self._jobs) > _JOBS_IN_MEMORY:
            self._jobs.popitem(last=False)  # rebuilt from the rows and the saved state
        return job

    def _announcer(self, job_id: str) -> Callable[[int], None]:
        """Tell the counting service this participant contributes to a Paillier sum."""

        def announce(round_no: int) -> None:
            notice = msg.PaillierContribution(
                job_id=job_id, round=round_no, roster=self._admitted_roster(job_id)
            )
            self._notify_counting(
                job_id, "paillier/contributions", notice,
                kind="paillier_contribution", refused="the contribution notice",
            )

        return announce

    def _notify_counting(
        self, job_id: str, route: str, notice: BaseModel, *, kind: str, refused: str,
        once: bool = False,
    ) -> None:
        """POST ``notice`` to the counting service's ``/jobs/{job_id}/{route}`` (audited as
        ``kind``); a refusal raises RefusedError naming what was ``refused``. ``once``: a
        notice the service accepted is not sent again (it answers the same one alike)."""
        key = (route, notice.model_dump_json())
        if once and key in self._announced:
            return
        response = self._request(
            self._counting, "POST", f"/jobs/{job_id}/{route}",
            what=f"{kind.replace('_', ' ')} of job {job_id}",
            body=_Body(notice, recipient="counting", what=kind, kind=kind, job=job_id),
        )
        if not response.is_success:
            raise RefusedError(
                f"the counting service refused {refused}: "
                f"HTTP {response.status_code} {_detail(response)}"
            )
        if once:
            self._announced.add(key)

    def _admitted_roster(self, job_id: str) -> list[str]:
        """The roster this agent admitted for ``job_id`` (its declare task's), sorted: what
        its count and Paillier contributions may be counted over."""
        roster = self._rosters.admitted(job_id)
        if roster is None:
            raise RefusedError(f"job {job_id!r} was never declared to this participant: refused.")
        return sorted(roster)

    def _job_key(self, job_id: str) -> Callable[[], msg.PaillierKey]:
        """The job's Paillier public key as the counting service itself hands it out."""
        cached: list[msg.PaillierKey] = []

        def fetch() -> msg.PaillierKey:
            if not cached:
                response = self._request(
                    self._counting, "GET", f"/jobs/{job_id}/paillier-key",
                    what=f"Paillier key of job {job_id}",
                )
                if response.status_code != 200:
                    raise RefusedError(
                        f"the counting service did not hand out the job's Paillier key: "
                        f"HTTP {response.status_code} {_detail(response)}"
                    )
                cached.append(msg.PaillierKey.model_validate_json(response.content))
            return cached[0]

        return fetch

    def _count_sink(self, job_id: str) -> Callable[[str, int], None]:
        """Send N_l to the counting service with the roster this agent admitted for the job
        (the service refuses it, 409, while its roster of the job is not within that one);
        a 409 saying the count was reported before is a count the service holds already."""

        def sink(name: str, count: int) -> None:
            report = msg.CountReport(
                job_id=job_id, count=count, roster=self._admitted_roster(job_id)
            )
            response = self._request(
                self._counting, "POST", f"/jobs/{job_id}/counts",
                what=f"count report of job {job_id}",
                body=_Body(report, recipient="counting", what="count_report",
                           kind="count_report", job=job_id),
            )
            if response.is_success:
                log.info("job %s: count sent to the counting service", job_id)
            elif response.status_code == 409:  # the only 409: this count is held already
                log.info("job %s: the counting service already holds this count", job_id)
            else:
                raise RefusedError(
                    f"the counting service refused the count of participant {name!r}: "
                    f"HTTP {response.status_code} {_detail(response)}"
                )

        return sink

    def _submit(self, job_id: str, task_id: int, reply: msg.Reply) -> msg.Task | None:
        """Send a task's reply; the next task, which the coordinator returns in the same
        request (waiting for one up to ``poll_wait``), or None."""
        body = msg.Contribution(job_id=job_id, task_id=task_id, reply=reply)
        response = self._request(
            self._coordinator, "POST",
            f"/jobs/{job_id}/tasks/{task_id}/answer?{self._poll_query}",
            what=f"contribution to job {job_id} task {task_id}",
            body=_Body(body, recipient="coordinator", what="contribution", kind=reply.kind,
                       job=job_id, task_id=task_id),
        )
        if response.is_success:
            log.info("job %s task %d: %s reply sent", job_id, task_id, reply.kind)
            return self._read_task(response)
        detail = _detail(response)
        if response.status_code == 401:
            raise AgentError(
                f"the coordinator no longer accepts this participant's "
                f"{self._config.credential}: {detail}"
            )
        if response.status_code == 422 and not isinstance(reply, msg.RefusalReply):
            log.warning("job %s task %d: reply rejected (%s)", job_id, task_id, detail)
            reason = f"the coordinator rejected this participant's {reply.kind!r} reply: {detail}"
            return self._submit(job_id, task_id, msg.RefusalReply(reason=_clip(reason)))
        log.warning(
            "job %s task %d: contribution not accepted (HTTP %d %s)",
            job_id, task_id, response.status_code, detail,
        )
        self._stop.wait(self._retry_initial)  # a task served again must not become a hot loop
        return None

    # -- transport -------------------------------------------------------------------------
    def _request(
        self, client: httpx.Client, method: str, url: str, *, what: str,
        body: _Body | None = None, **kwargs: Any
    ) -> httpx.Response:
        """The response to a request, retrying network errors, 429 and 5xx with backoff.

        A ``body`` is serialised once, recorded in the audit log just before it is first
        sent, and every attempt sends those bytes.
        """
        if self._stop.is_set():
            raise _StoppedError
        if body is not None:
            content = body.message.model_dump_json().encode("utf-8")
            self._audit.record(
                job=body.job, task_id=body.task_id, recipient=body.recipient,
                what=body.what, kind=body.kind, body=content,
            )
            kwargs["content"] = content
            kwargs["headers"] = {"Content-Type": "application/json"}

        def log_retry(state: RetryCallState) -> None:
            log.warning(
                "%s to %s failed (%s); retrying in %.1f s", what,
                client.build_request(method, url).url.copy_with(query=None), _problem(state),
                state.upcoming_sleep,
            )

        # Half of the doubling delay d fixed plus up to half at random, d·U(½, 1): spreads
        # the retries of many agents.
        half_initial, half_max = self._retry_initial / 2, self._retry_max / 2
        retrying = Retrying(
            wait=wait_exponential(multiplier=half_initial, max=half_max)
            + wait_random_exponential(multiplier=half_initial, max=half_max),
            retry=retry_if_exception_type(httpx.TransportError)
            | retry_if_result(lambda r: r.status_code >= 500 or r.status_code == 429),
            sleep=self._sleep_unless_stopped,
            before_sleep=log_retry,
        )
        return retrying(client.request, method, url, **kwargs)

    def _sleep_unless_stopped(self, seconds: float) -> None:
        """Wait ``seconds`` between attempts; raise _StoppedError once the agent is stopped."""
        if self._stop.wait(seconds):
            raise _StoppedError


@dataclass(frozen=True)
class _Body:
    """A request body and what the audit log says of it."""

    message: BaseModel
    recipient: Recipient
    what: str
    kind: str
    job: str | None = None
    task_id: int | None = None


def _detail(response: httpx.Response) -> str:
    """The ``detail`` of an error response, shortened (FastAPI's list form flattened)."""
    try:
        detail: Any = response.json().get("detail", "")
    except (ValueError, AttributeError):
        detail = response.text
    if isinstance(detail, list):
        detail = "; ".join(
            str(d.get("msg", d)) if isinstance(d, dict) else str(d) for d in detail
        )
    return str(detail)[:500]


def _problem(state: RetryCallState) -> str:
    """What failed in a request's last attempt: the network error (its text names e.g. a TLS
    verification error) or the HTTP status."""
    assert state.outcome is not None
    exc = state.outcome.exception()
    if exc is None:
        return f"HTTP {state.outcome.result().status_code}"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _clip(reason: str) -> str:
    return reason if len(reason) <= _REASON_MAX else reason[: _REASON_MAX - 1] + "…"


def _version() -> str:
    try:
        return metadata.version("fedclust")[:64]
    except metadata.PackageNotFoundError:
        return ""
