"""The coordinator's storage: participants, jobs and tasks through SQLAlchemy 2.

Tables: ``participants``, ``jobs``, ``tasks``, ``replies``, ``blobs`` (large strings by
SHA-256, stored once), ``invitations``, ``memberships``, ``admin_events`` and ``last_seen`` (each
member's last authenticated request, written at most every ``app.LAST_SEEN_SECONDS`` = 30 s);
credentials are never stored here. :class:`Database` writes a :class:`Batch` per transaction
(:meth:`Database.write`); :class:`JobRecord`, :class:`TaskRecord` and
:class:`ParticipantRecord` are the plain values the rest of the service sees. Every call opens
a short session; sqlite connections are shared across threads behind one lock. SQLite (WAL
mode, the default) and PostgreSQL (``postgresql+psycopg://``) are tested; schema revisions are
Alembic's (:data:`MIGRATIONS`, :mod:`infra.schema`; ``fedclust coordinator migrate``).

Design notes: ``docs/services.md`` (§ Coordinator storage: every table's contents).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    DateTime,
    ForeignKey,
    Integer,
    LargeBinary,
    String,
    Text,
    case,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

from fedclust.infra.database import ensure_head, open_engine
from fedclust.infra.schema import Migrations, migrate
from fedclust.protocol.wire.blobs import inline, references
from fedclust.protocol.wire.messages import (
    Enrolment,
    JobCreate,
    JobProgress,
    JobState,
    ResultDocument,
    TaskHistory,
)

__all__ = [
    "MIGRATIONS",
    "AdminEventRecord",
    "AuditHeadRecord",
    "AuditHeadRefusedError",
    "Batch",
    "Database",
    "InvitationRefusedError",
    "JobRecord",
    "ParticipantRecord",
    "TaskRecord",
]


def _now() -> datetime:
    return datetime.now(UTC)


def _aware(value: datetime) -> datetime:
    """Every stored time is UTC: sqlite drops the zone, PostgreSQL answers in its session's."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class _Base(DeclarativeBase):
    pass


class _ParticipantRow(_Base):
    __tablename__ = "participants"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    n_features: Mapped[int] = mapped_column(Integer)
    allowed_algorithms: Mapped[list[str]] = mapped_column(JSON)
    agent_version: Mapped[str] = mapped_column(String(64), default="")
    enrolled_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    identity_key: Mapped[str | None] = mapped_column(String(64), nullable=True)


class _JobRow(_Base):
    __tablename__ = "jobs"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    algorithm: Mapped[str] = mapped_column(String(32))
    spec: Mapped[str] = mapped_column(Text)
    n_features: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(16), index=True)
    result: Mapped[str | None] = mapped_column(Text, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    progress: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    owner: Mapped[str | None] = mapped_column(String(64), nullable=True)


class _TaskRow(_Base):
    __tablename__ = "tasks"

    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id"), primary_key=True)
    participant: Mapped[str] = mapped_column(String(64), primary_key=True)
    task_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(String(32))
    spec: Mapped[str] = mapped_column(Text)  # large strings as blob references
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class _ReplyRow(_Base):
    __tablename__ = "replies"

    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id"), primary_key=True)
    participant: Mapped[str] = mapped_column(String(64), primary_key=True)
    task_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    reply: Mapped[str] = mapped_column(Text)
    answered_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class _BlobRow(_Base):
    __tablename__ = "blobs"

    sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    data: Mapped[bytes] = mapped_column(LargeBinary)


class _AuditHeadRow(_Base):
    __tablename__ = "audit_heads"

    participant: Mapped[str] = mapped_column(String(64), primary_key=True)
    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    line_sha256: Mapped[str] = mapped_column(String(64))
    signature: Mapped[str] = mapped_column(String(96))
    received_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class _InvitationRow(_Base):
    __tablename__ = "invitations"

    invite_sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    participant_id: Mapped[str] = mapped_column(String(64), index=True)
    created_by: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    used_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class _MembershipRow(_Base):
    """A participant's credential as changed at run time; it supersedes the config file's."""

    __tablename__ = "memberships"

    participant_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    token_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)  # None: revoked
    identity_key: Mapped[str | None] = mapped_column(String(64), nullable=True)  # at joining
    changed_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class _AdminEventRow(_Base):
    __tablename__ = "admin_events"

    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    actor: Mapped[str] = mapped_column(String(80))
    action: Mapped[str] = mapped_column(String(16))
    participant_id: Mapped[str] = mapped_column(String(64))
    expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class _LastSeenRow(_Base):
    """When a participant last made an authenticated request (a poll, an answer)."""

    __tablename__ = "last_seen"

    participant_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


#: A reply row belongs to the task row of the same job, participant and task id.
_ANSWERS_TASK = (
    (_ReplyRow.job_id == _TaskRow.job_id)
    & (_ReplyRow.participant == _TaskRow.participant)
    & (_ReplyRow.task_id == _TaskRow.task_id)
)

# The revisions of the tables above (coordinator/migrations/versions/): a new table or column
# there is a new revision here.
MIGRATIONS = Migrations("fedclust.coordinator", "coordinator", "coordinator", _Base.metadata)


@dataclass(frozen=True)
class AdminEventRecord:
    """An entry of the admin trail (never a secret)."""

    seq: int
    at: datetime
    actor: str
    action: str
    participant_id: str
    expires_at: datetime | None


class InvitationRefusedError(ValueError):
    """An invitation that is unknown, used, expired or for another participant (one error for
    all, so a caller learns nothing about which)."""


@dataclass(frozen=True)
class AuditHeadRecord:
    """A receipt: line ``seq`` of ``participant``'s audit log hashed to ``line_sha256``
    (signed by its identity key) when it arrived."""

    participant: str
    seq: int
    line_sha256: str
    signature: str
    received_at: datetime


class AuditHeadRefusedError(ValueError):
    """An audit head that contradicts an earlier receipt (a log truncated or replaced)."""


@dataclass(frozen=True)
class ParticipantRecord:
    """An enrolled participant."""

    id: str
    n_features: int
    allowed_algorithms: tuple[str, ...]
    agent_version: str
    enrolled_at: datetime
    identity_key: str | None = None


@dataclass(frozen=True)
class JobRecord:
    """A stored job."""

    id: str
    spec: JobCreate
    n_features: int
    state: JobState
    created_at: datetime
    updated_at: datetime
    progress: JobProgress | None
    error: str | None
    result: ResultDocument | None
    owner: str | None = None


@dataclass(frozen=True)
class TaskRecord:
    """A stored task: its spec and reply as JSON text (parsed by the broker).

    A task that was not answered in time has, in place of a reply, the object
    ``{"timed_out": REASON}`` (:meth:`timeout`), no participant's reply (every reply has a
    ``kind``): a resumed job replays the participant's dropout instead of asking again.
    """

    job_id: str
    participant: str
    task_id: int
    kind: str
    spec_json: str
    reply_json: str | None

    @classmethod
    def timeout(
        cls, job_id: str, participant: str, task_id: int, kind: str, reason: str
    ) -> TaskRecord:
        """The record of a task that ``participant`` did not answer in time."""
        return cls(job_id, participant, task_id, kind, "", json.dumps({_TIMED_OUT: reason}))

    @property
    def timed_out(self) -> str | None:
        """Why the task went unanswered (it timed out), or None."""
        return _timeout_reason(self.reply_json)


_TIMED_OUT = "timed_out"


def _timeout_reason(reply_json: str | None) -> str | None:
    """The reason stored by :meth:`TaskRecord.timeout` if ``reply_json`` is such a record,
    else None (an answer, or no reply yet)."""
    if reply_json is None or not reply_json.startswith('{"' + _TIMED_OUT):
        return None
    reason = json.loads(reply_json).get(_TIMED_OUT)
    return reason if isinstance(reason, str) else None


@dataclass
class Batch:
    """Writes that go to the database in one transaction (:meth:`Database.write`): new tasks
    (``spec_json`` with blob references), replies, the blobs referred to, job progress."""

    tasks: list[TaskRecord] = field(default_factory=list)
    replies: list[TaskRecord] = field(default_factory=list)
    blobs: dict[str, bytes] = field(default_factory=dict)
    progress: dict[str, JobProgress] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.tasks or self.replies or self.progress)


def _participant(row: _ParticipantRow) -> ParticipantRecord:
    return ParticipantRecord(
        id=row.id,
        n_features=row.n_features,
        allowed_algorithms=tuple(row.allowed_algorithms),
        agent_version=row.agent_version,
        enrolled_at=_aware(row.enrolled_at),
        identity_key=row.identity_key,
    )


def _audit_head(row: _AuditHeadRow) -> AuditHeadRecord:
    return AuditHeadRecord(
        participant=row.participant, seq=row.seq, line_sha256=row.line_sha256,
        signature=row.signature, received_at=_aware(row.received_at),
    )


def _admin_event(row: _AdminEventRow) -> AdminEventRecord:
    return AdminEventRecord(
        seq=row.seq, at=_aware(row.at), actor=row.actor, action=row.action,
        participant_id=row.participant_id,
        expires_at=None if row.expires_at is None else _aware(row.expires_at),
    )


def _add_event(
    session: Session, actor: str, action: str, participant_id: str,
    *, expires_at: datetime | None = None,
) -> AdminEventRecord:
    row = _AdminEventRow(
        at=_now(), actor=actor, action=action, participant_id=participant_id,
        expires_at=expires_at,
    )
    session.add(row)
    session.flush()
    return _admin_event(row)


def _job(row: _JobRow) -> JobRecord:
    return JobRecord(
        id=row.id,
        spec=JobCreate.model_validate_json(row.spec),
        n_features=row.n_features,
        state=row.state,  # type: ignore[arg-type]  # only JobState values are written
        created_at=_aware(row.created_at),
        updated_at=_aware(row.updated_at),
        progress=None if row.progress is None else JobProgress.model_validate_json(row.progress),
        error=row.error,
        result=None if row.result is None else ResultDocument.model_validate_json(row.result),
        owner=row.owner,
    )


class Database:
    """The repository: short transactions over one engine (any SQLAlchemy URL; a SQLite file
    in write-ahead-log mode, :func:`infra.database.make_engine`)."""

    def __init__(self, url: str) -> None:
        self.engine: Engine = open_engine(url, wal=True)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        self._lock = threading.RLock()

    def create_all(self) -> None:
        """Create an empty database's tables at the newest schema revision; use one at it.

        Raises:
            SchemaBehindError: the database is behind (or predates) the newest revision:
                ``fedclust coordinator migrate`` upgrades it (its connections are closed).
        """
        ensure_head(self.engine, MIGRATIONS)

    def migrate(self) -> tuple[str | None, str]:
        """Upgrade the database to the newest revision; its revision before and after."""
        return migrate(self.engine, MIGRATIONS)

    def dispose(self) -> None:
        """Close every pooled connection."""
        self.engine.dispose()

    @contextmanager
    def _session(self) -> Iterator[Session]:
        with self._lock, self._sessions.begin() as session:
            yield session

    # -- participants -------------------------------------------------------------------------
    def enrol(self, participant_id: str, enrolment: Enrolment) -> ParticipantRecord:
        """Record (or update) a participant's enrolment."""
        with self._session() as s:
            row = s.get(_ParticipantRow, participant_id)
            if row is None:
                row = _ParticipantRow(id=participant_id)
                s.add(row)
            row.n_features = enrolment.n_features
            row.allowed_algorithms = sorted(set(enrolment.allowed_algorithms))
            row.agent_version = enrolment.agent_version
            row.identity_key = enrolment.identity_key
            row.enrolled_at = _now()
            s.flush()
            return _participant(row)

    def participants(self) -> dict[str, ParticipantRecord]:
        """Every enrolled participant by id."""
        with self._session() as s:
            return {r.id: _participant(r) for r in s.scalars(select(_ParticipantRow))}

    # -- audit receipts ---------------------------------------------------------------------
    def add_audit_head(
        self, participant: str, *, seq: int, line_sha256: str, signature: str
    ) -> AuditHeadRecord:
        """Keep a participant's audit head; the same head again returns its first receipt.

        Raises:
            AuditHeadRefusedError: the head is behind the last one received, or names a line
                received before with another hash.
        """
        with self._session() as s:
            same = s.get(_AuditHeadRow, (participant, seq))
            if same is not None:
                if same.line_sha256 != line_sha256:
                    raise AuditHeadRefusedError(
                        f"line {seq} of the audit log was received before with another hash"
                    )
                return _audit_head(same)
            last = s.scalar(
                select(func.max(_AuditHeadRow.seq)).where(_AuditHeadRow.participant == participant)
            )
            if last is not None and seq < last:
                raise AuditHeadRefusedError(
                    f"the audit log's head (line {seq}) is behind line {last}, received before"
                )
            row = _AuditHeadRow(
                participant=participant, seq=seq, line_sha256=line_sha256,
                signature=signature, received_at=_now(),
            )
            s.add(row)
            s.flush()
            return _audit_head(row)

    def audit_heads(self, participant: str) -> list[AuditHeadRecord]:
        """A participant's receipts, oldest line first."""
        with self._session() as s:
            rows = s.scalars(
                select(_AuditHeadRow)
                .where(_AuditHeadRow.participant == participant)
                .order_by(_AuditHeadRow.seq)
            )
            return [_audit_head(r) for r in rows]

    # -- membership (invitations, run-time credentials, the admin trail) ------------------------
    def add_invitation(
        self, participant_id: str, *, invite_sha256: str, created_by: str, expires_at: datetime
    ) -> AdminEventRecord:
        """Store an invitation's hash and record it in the trail."""
        with self._session() as s:
            s.add(_InvitationRow(
                invite_sha256=invite_sha256, participant_id=participant_id,
                created_by=created_by, created_at=_now(), expires_at=expires_at,
            ))
            return _add_event(
                s, f"analyst:{created_by}", "invited", participant_id, expires_at=expires_at
            )

    def claim_invitation(self, participant_id: str, invite_sha256: str) -> None:
        """Mark an unused, unexpired invitation for ``participant_id`` used (atomically: two
        redemptions cannot both succeed).

        Raises:
            InvitationRefusedError: no such invitation for that id, used or expired.
        """
        with self._session() as s:
            claimed: int = s.execute(  # type: ignore[attr-defined]
                update(_InvitationRow)
                .where(
                    _InvitationRow.invite_sha256 == invite_sha256,
                    _InvitationRow.participant_id == participant_id,
                    _InvitationRow.used_at.is_(None),
                    _InvitationRow.expires_at > _now(),
                )
                .values(used_at=_now())
            ).rowcount
            if claimed != 1:
                raise InvitationRefusedError(
                    "the invite is unknown, already used, expired or for another participant"
                )

    def release_invitation(self, invite_sha256: str) -> None:
        """Make a claimed invitation redeemable again (its redemption could not finish)."""
        with self._session() as s:
            s.execute(
                update(_InvitationRow)
                .where(_InvitationRow.invite_sha256 == invite_sha256)
                .values(used_at=None)
            )

    def set_membership(
        self, participant_id: str, token_sha256: str | None, *, actor: str,
        identity_key: str | None = None,
    ) -> AdminEventRecord:
        """Give ``participant_id`` the credential ``token_sha256`` and the identity key it
        registered (it joined) or none (it was revoked), superseding the config file's, and
        record it in the trail."""
        with self._session() as s:
            row = s.get(_MembershipRow, participant_id)
            if row is None:
                row = _MembershipRow(participant_id=participant_id)
                s.add(row)
            row.token_sha256 = token_sha256
            row.identity_key = identity_key
            row.changed_at = _now()
            action = "enrolled" if token_sha256 is not None else "revoked"
            return _add_event(s, actor, action, participant_id)

    def memberships(self) -> dict[str, str | None]:
        """Every run-time credential by participant id (None: revoked)."""
        with self._session() as s:
            return {
                r.participant_id: r.token_sha256 for r in s.scalars(select(_MembershipRow))
            }

    def joined_identity_key(self, participant_id: str) -> str | None:
        """The identity key a member registered when it joined (None: it did not join)."""
        with self._session() as s:
            row = s.get(_MembershipRow, participant_id)
            return None if row is None or row.token_sha256 is None else row.identity_key

    def admin_events(self) -> list[AdminEventRecord]:
        """The admin trail, oldest first."""
        with self._session() as s:
            rows = s.scalars(select(_AdminEventRow).order_by(_AdminEventRow.seq))
            return [_admin_event(r) for r in rows]

    # -- last contact -------------------------------------------------------------------------
    def record_last_seen(self, times: Mapping[str, datetime]) -> None:
        """Store each participant's latest contact time (one transaction; an earlier time
        than the stored one is ignored)."""
        if not times:
            return
        with self._session() as s:
            stored = {
                r.participant_id: r
                for r in s.scalars(
                    select(_LastSeenRow).where(_LastSeenRow.participant_id.in_(list(times)))
                )
            }
            for pid, at in times.items():
                row = stored.get(pid)
                if row is None:
                    s.add(_LastSeenRow(participant_id=pid, at=at))
                elif _aware(row.at) < at:
                    row.at = at

    def last_seen(self) -> dict[str, datetime]:
        """Every participant's stored last contact (UTC) by id."""
        with self._session() as s:
            return {r.participant_id: _aware(r.at) for r in s.scalars(select(_LastSeenRow))}

    # -- jobs -----------------------------------------------------------------------------------
    def create_job(
        self, job_id: str, spec: JobCreate, *, n_features: int, owner: str | None = None
    ) -> JobRecord:
        """Store a new pending job, created by the analyst ``owner``."""
        now = _now()
        with self._session() as s:
            row = _JobRow(
                id=job_id, algorithm=spec.algorithm, spec=spec.model_dump_json(),
                n_features=n_features, state="pending", created_at=now, updated_at=now,
                owner=owner,
            )
            s.add(row)
            s.flush()
            return _job(row)

    def job(self, job_id: str) -> JobRecord | None:
        with self._session() as s:
            row = s.get(_JobRow, job_id)
            return None if row is None else _job(row)

    def jobs(self, states: Sequence[JobState] | None = None) -> list[JobRecord]:
        """Jobs, oldest first (optionally only those in ``states``)."""
        query = select(_JobRow).order_by(_JobRow.created_at, _JobRow.id)
        if states is not None:
            query = query.where(_JobRow.state.in_(list(states)))
        with self._session() as s:
            return [_job(r) for r in s.scalars(query)]

    def set_state(
        self,
        job_id: str,
        state: JobState,
        *,
        only_from: Sequence[JobState] | None = None,
        error: str | None = None,
        result: ResultDocument | None = None,
        progress: JobProgress | None = None,
    ) -> bool:
        """Move a job to ``state`` (only if its state is in ``only_from``, when given)."""
        values: dict[str, Any] = {"state": state, "updated_at": _now()}
        if error is not None:
            values["error"] = error
        if result is not None:
            values["result"] = result.model_dump_json()
        if progress is not None:
            values["progress"] = progress.model_dump_json()
        query = update(_JobRow).where(_JobRow.id == job_id)
        if only_from is not None:
            query = query.where(_JobRow.state.in_(list(only_from)))
        with self._session() as s:
            changed: int = s.execute(query.values(**values)).rowcount  # type: ignore[attr-defined]
            return changed > 0

    # -- tasks ----------------------------------------------------------------------------------
    def write(self, batch: Batch) -> None:
        """Store new tasks, replies, blobs and progress in one transaction (SQLAlchemy Core
        statements on one connection: a round's rows, without the ORM's work per row)."""
        now = _now()
        with self._lock, self.engine.begin() as connection:
            if batch.blobs:
                have = set(connection.execute(
                    select(_BlobRow.sha256).where(_BlobRow.sha256.in_(list(batch.blobs)))
                ).scalars())
                new = [{"sha256": k, "data": v} for k, v in batch.blobs.items() if k not in have]
                if new:
                    connection.execute(insert(_BlobRow), new)
            if batch.tasks:
                connection.execute(insert(_TaskRow), [
                    {"job_id": t.job_id, "participant": t.participant, "task_id": t.task_id,
                     "kind": t.kind, "spec": t.spec_json, "created_at": now}
                    for t in batch.tasks
                ])
            if batch.replies:
                connection.execute(insert(_ReplyRow), [
                    {"job_id": r.job_id, "participant": r.participant, "task_id": r.task_id,
                     "reply": r.reply_json, "answered_at": now}
                    for r in batch.replies
                ])
            for job_id, progress in batch.progress.items():
                connection.execute(
                    update(_JobRow)
                    .where(_JobRow.id == job_id)
                    .values(progress=progress.model_dump_json(), updated_at=now)
                )

    def blob(self, sha256: str) -> bytes | None:
        """A stored blob by its SHA-256 hex digest."""
        with self._session() as s:
            row = s.get(_BlobRow, sha256)
            return None if row is None else row.data

    def job_log(self, job_id: str) -> dict[tuple[str, int], TaskRecord]:
        """Every stored task of a job by (participant, task id), specs as stored (with blob
        references), replies where answered."""
        query = (
            select(_TaskRow, _ReplyRow.reply)
            .outerjoin(_ReplyRow, _ANSWERS_TASK)
            .where(_TaskRow.job_id == job_id)
            .order_by(_TaskRow.participant, _TaskRow.task_id)
        )
        with self._session() as s:
            return {
                (row.participant, row.task_id): TaskRecord(
                    job_id=row.job_id, participant=row.participant, task_id=row.task_id,
                    kind=row.kind, spec_json=row.spec, reply_json=reply,
                )
                for row, reply in s.execute(query)
            }

    def task_history(self, job_id: str) -> list[TaskHistory]:
        """Every stored task of a job, when it was stored and whether it was answered, in the
        order they were stored (the answers are not read, only a time-out's reason)."""
        timed_out = case(
            (_ReplyRow.reply.startswith('{"' + _TIMED_OUT), _ReplyRow.reply), else_=None
        )
        query = (
            select(_TaskRow.participant, _TaskRow.task_id, _TaskRow.kind, _TaskRow.created_at,
                   _ReplyRow.task_id.is_not(None), timed_out)
            .outerjoin(_ReplyRow, _ANSWERS_TASK)
            .where(_TaskRow.job_id == job_id)
            .order_by(_TaskRow.created_at, _TaskRow.task_id, _TaskRow.participant)
        )
        with self._session() as s:
            return [
                TaskHistory(
                    participant=participant, task_id=task_id, kind=kind,
                    stored_at=_aware(stored),
                    answered=bool(answered) and reason is None,
                    timed_out=_timeout_reason(reason),
                )
                for participant, task_id, kind, stored, answered, reason in s.execute(query)
            ]

    def tasks(self, job_id: str) -> list[TaskRecord]:
        """Every stored task of a job, by participant and task id, blobs put back."""
        records = list(self.job_log(job_id).values())
        cache: dict[str, bytes] = {}

        def fetch(name: str) -> bytes:
            if name not in cache:
                data = self.blob(name)
                if data is None:
                    raise LookupError(f"blob {name} of job {job_id!r} is missing")
                cache[name] = data
            return cache[name]

        out: list[TaskRecord] = []
        for record in records:
            doc = json.loads(record.spec_json)
            if references(doc):
                record = replace(record, spec_json=json.dumps(inline(doc, fetch)))
            out.append(record)
        return out
