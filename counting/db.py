"""Storage of the counting service: each job's roster, the counts reported for it, releases.

SQLAlchemy 2 over any URL (SQLite by default; PostgreSQL via ``postgresql+psycopg://`` is
tested). Tables: ``roster_entries``, ``counts`` and ``released_rosters`` (the counts and their
release); ``paillier_keys``, ``paillier_contributions`` and ``paillier_closed_rounds`` (the key
holder, :mod:`counting.keyholder`); ``released_cohorts``, ``admitted_rosters`` and
``unmask_views`` (the guards); ``memberships`` and ``membership_requests``
(:mod:`counting.members`). :class:`CountingStore` serialises its operations with a lock;
:meth:`CountingStore.release` applies the release rules in the same transaction as the record
of a release. Schema revisions: Alembic's (:data:`MIGRATIONS`, :mod:`infra.schema`; an older
database is upgraded by ``fedclust counter migrate``).

Design notes: ``docs/services.md`` (§ Counting service storage: every table's columns).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypeVar

from sqlalchemy import (
    BigInteger,
    DateTime,
    ForeignKeyConstraint,
    Integer,
    String,
    Text,
    func,
    select,
)
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column
from sqlalchemy.pool import StaticPool
from tenacity import Retrying, retry_if_exception_type

from fedclust.counting.keyholder import (
    RoundClosedError,
    check_contributors,
    closed_message,
    cohort_refusal,
    first_outside,
    not_admitted_message,
)
from fedclust.infra.database import ensure_head, make_engine, open_engine
from fedclust.infra.schema import Migrations, migrate
from fedclust.protocol.maths.release_guard import release_would_expose

__all__ = [
    "MIGRATIONS",
    "AlreadyReportedError",
    "CountingStore",
    "IncompleteJobError",
    "NotOnRosterError",
    "ReleaseRefusedError",
    "RosterConflictError",
    "RosterNotAdmittedError",
    "StoreError",
    "Tally",
    "UnknownJobError",
    "ViewConflictError",
    "make_engine",
    "migrate_database",
]


class StoreError(Exception):
    """A request the store refuses; the message is safe to show (it holds no counts)."""


class UnknownJobError(StoreError):
    """No roster has been registered for the job."""


class NotOnRosterError(StoreError):
    """The participant is not on the job's roster."""


class AlreadyReportedError(StoreError):
    """The participant has already reported its count for the job."""


class RosterConflictError(StoreError):
    """A different roster was put for a job that already has counts."""


class RosterNotAdmittedError(StoreError):
    """The job's roster here is not within the roster a reporter admitted for the job."""


class ViewConflictError(StoreError):
    """Another view of a masked sum's unmasking was registered first."""


class IncompleteJobError(StoreError):
    """The total is asked for before every participant on the roster (or the minimum) reported."""


class ReleaseRefusedError(StoreError):
    """With the totals released before, this job's total would expose a small cohort's count.

    ``participants``: a smallest set of participants with a derivable nonzero combination of
    their counts. The refusal depends on rosters only, and the released rosters only grow
    (a roster is fixed once counts exist), so it is final.
    """

    def __init__(self, message: str, participants: tuple[str, ...]) -> None:
        super().__init__(message)
        self.participants = participants


class _Base(DeclarativeBase):
    pass


# The schema's revisions (counting/migrations/versions/): a new table or column here is a new
# revision there.
MIGRATIONS = Migrations("fedclust.counting", "counting service", "counter", _Base.metadata)


class RosterEntry(_Base):
    __tablename__ = "roster_entries"

    job_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    participant_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class CountRow(_Base):
    __tablename__ = "counts"

    job_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    participant_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    count: Mapped[int] = mapped_column(BigInteger)
    admitted_sha256: Mapped[str] = mapped_column(String(64))  # in admitted_rosters
    reported_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    __table_args__ = (  # a count is only ever stored for a roster member
        ForeignKeyConstraint(
            ["job_id", "participant_id"],
            ["roster_entries.job_id", "roster_entries.participant_id"],
        ),
    )


class ReleasedRoster(_Base):
    __tablename__ = "released_rosters"

    # Release order; two processes recording a release after the same one collide on it.
    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    job_id: Mapped[str] = mapped_column(String(64), unique=True)
    released_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class PaillierKeyRow(_Base):
    __tablename__ = "paillier_keys"

    job_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    private_key: Mapped[str] = mapped_column(Text)  # JSON {"p": int, "q": int}; never logged
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class PaillierContributionRow(_Base):
    __tablename__ = "paillier_contributions"

    job_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    round: Mapped[int] = mapped_column(Integer, primary_key=True)
    participant_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    admitted_sha256: Mapped[str] = mapped_column(String(64))  # in admitted_rosters
    announced_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class PaillierClosedRound(_Base):
    __tablename__ = "paillier_closed_rounds"

    job_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    round: Mapped[int] = mapped_column(Integer, primary_key=True)
    closed_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    # The decrypted request's SHA-256: only that very request is answered again.
    request_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)


class MembershipRow(_Base):
    """A participant's credential as changed at run time (a member the counting operator
    approved, or None: revoked); it supersedes the config file's entry for that id."""

    __tablename__ = "memberships"

    participant_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    token_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)
    changed_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class MembershipRequestRow(_Base):
    """A credential the coordinator asked for; accepted only once the counting operator
    approves it (it then moves to ``memberships``)."""

    __tablename__ = "membership_requests"

    participant_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    token_sha256: Mapped[str] = mapped_column(String(64))
    requested_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class ReleasedCohortRow(_Base):
    """One member of a cohort whose statistic the coordinator may have learned (a released
    total's roster, a decrypted Paillier round's contributors, an announced masked sum's
    cohort), named by the SHA-256 of its sorted ids: the guard's record, whatever the job."""

    __tablename__ = "released_cohorts"

    cohort_sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    participant_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    released_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class AdmittedRosterRow(_Base):
    """One member of a roster a participant admitted for a job (its count report or Paillier
    contribution carries it), named like a released cohort; shared by every report of it."""

    __tablename__ = "admitted_rosters"

    roster_sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    participant_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    admitted_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class UnmaskViewRow(_Base):
    """The first view registered of a masked sum's unmasking: the SHA-256 of its sorted
    survivors and dropouts (:func:`view_sha256`)."""

    __tablename__ = "unmask_views"

    job_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    setup: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    round: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    view_sha256: Mapped[str] = mapped_column(String(64))
    registered_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


@dataclass(frozen=True)
class Tally:
    """The state of one job: roster size, how many reported, and their sum."""

    roster_size: int
    reporters: int
    total: int


def migrate_database(database_url: str) -> tuple[str | None, str]:
    """Upgrade the database at ``database_url`` to the newest revision (creating an empty
    one); its revision before and after."""
    engine = open_engine(database_url)
    try:
        return migrate(engine, MIGRATIONS)
    finally:
        engine.dispose()


class CountingStore:
    """Rosters and counts of every job, in the database at ``database_url``."""

    def __init__(self, database_url: str) -> None:
        """Open the database; an empty one is created at the newest schema revision.

        Raises:
            SchemaBehindError: the database is behind (or predates) the newest revision:
                ``fedclust counter migrate`` upgrades it.
        """
        self._engine = open_engine(database_url)
        ensure_head(self._engine, MIGRATIONS)
        self._lock = threading.Lock()

    def close(self) -> None:
        """Release the database connections."""
        self._engine.dispose()

    def set_membership(self, participant_id: str, token_sha256: str | None) -> None:
        """Store a member's new credential (its token's SHA-256), or None: revoked (a
        pending request of that id is dropped too)."""
        with self._lock, Session(self._engine) as session, session.begin():
            if token_sha256 is None:
                request = session.get(MembershipRequestRow, participant_id)
                if request is not None:
                    session.delete(request)
            row = session.get(MembershipRow, participant_id)
            if row is None:
                row = MembershipRow(participant_id=participant_id)
                session.add(row)
            row.token_sha256 = token_sha256
            row.changed_at = datetime.now(UTC)

    def _read_lock(self) -> AbstractContextManager[object]:
        """What a plain read holds: no lock (each session has its own connection from the
        pool), but the store's lock where all threads share one connection (an in-memory
        SQLite), whose rollback at a read's end would undo another thread's transaction."""
        return self._lock if isinstance(self._engine.pool, StaticPool) else nullcontext()

    def memberships(self) -> dict[str, str | None]:
        """Every run-time credential by participant id (None: revoked); a read
        (:meth:`_read_lock`)."""
        with self._read_lock(), Session(self._engine) as session:
            return {
                r.participant_id: r.token_sha256 for r in session.scalars(select(MembershipRow))
            }

    def request_membership(self, participant_id: str, token_sha256: str) -> None:
        """Record the coordinator's request for a credential (the newest replaces an older
        one of the same id); nothing is accepted until :meth:`approve_membership`."""
        with self._lock, Session(self._engine) as session, session.begin():
            row = session.get(MembershipRequestRow, participant_id)
            if row is None:
                row = MembershipRequestRow(participant_id=participant_id)
                session.add(row)
            row.token_sha256 = token_sha256
            row.requested_at = datetime.now(UTC)

    def membership_requests(self) -> dict[str, str]:
        """The pending requests: participant id -> requested token SHA-256; a read
        (:meth:`_read_lock`)."""
        with self._read_lock(), Session(self._engine) as session:
            return {
                r.participant_id: r.token_sha256
                for r in session.scalars(select(MembershipRequestRow))
            }

    def approve_membership(self, participant_id: str, token_sha256: str | None) -> str:
        """Accept the pending request of ``participant_id`` (the counting operator's act) and
        return its digest; with ``token_sha256`` only if it is the requested one.

        Raises:
            KeyError: no pending request for this id.
            ValueError: the request's digest differs from ``token_sha256``.
        """
        with self._lock, Session(self._engine) as session, session.begin():
            request = session.get(MembershipRequestRow, participant_id)
            if request is None:
                raise KeyError(participant_id)
            if token_sha256 is not None and request.token_sha256 != token_sha256:
                raise ValueError(participant_id)
            digest = request.token_sha256
            row = session.get(MembershipRow, participant_id)
            if row is None:
                row = MembershipRow(participant_id=participant_id)
                session.add(row)
            row.token_sha256 = digest
            row.changed_at = datetime.now(UTC)
            session.delete(request)
            return digest

    def reject_membership(self, participant_id: str) -> bool:
        """Drop the pending request of ``participant_id``; whether there was one."""
        with self._lock, Session(self._engine) as session, session.begin():
            request = session.get(MembershipRequestRow, participant_id)
            if request is not None:
                session.delete(request)
            return request is not None

    def put_roster(self, job_id: str, participants: Sequence[str]) -> None:
        """Register the job's roster; putting the same roster again changes nothing.

        Once counts exist the roster may only narrow to the cohort that goes on after
        dropouts (a subset; the counts of those left out are deleted unreleased), and only
        while nothing of the job was released (its total, a decrypted Paillier round): the
        job's total is then released over the cohort that finished, and never over two.

        Raises:
            RosterConflictError: the job has counts and ``participants`` is no subset of its
                roster, or something of the job was released already.
        """
        wanted = set(participants)
        with self._lock, Session(self._engine) as session, session.begin():
            current = set(
                session.scalars(
                    select(RosterEntry.participant_id).where(RosterEntry.job_id == job_id)
                )
            )
            if current == wanted:
                return
            reported = session.scalar(
                select(func.count()).select_from(CountRow).where(CountRow.job_id == job_id)
            )
            if reported and not wanted < current:
                raise RosterConflictError(
                    f"job {job_id!r} already has counts; its roster can only narrow to the "
                    "participants that go on after dropouts."
                )
            released = session.scalar(
                select(ReleasedRoster.seq).where(ReleasedRoster.job_id == job_id)
            ) is not None or session.scalar(
                select(func.count()).select_from(PaillierClosedRound)
                .where(PaillierClosedRound.job_id == job_id)
            )
            if released:
                raise RosterConflictError(
                    f"job {job_id!r} released a statistic over its roster already; its roster "
                    "can no longer change."
                )
            if reported:  # narrow: the counts of those left out go unreleased
                for gone in current - wanted:
                    count = session.get(CountRow, (job_id, gone))
                    if count is not None:
                        session.delete(count)
                    session.flush()
                    entry = session.get(RosterEntry, (job_id, gone))
                    assert entry is not None
                    session.delete(entry)
                return
            now = datetime.now(UTC)
            for entry in session.scalars(select(RosterEntry).where(RosterEntry.job_id == job_id)):
                session.delete(entry)
            session.flush()
            session.add_all(
                RosterEntry(job_id=job_id, participant_id=p, created_at=now) for p in sorted(wanted)
            )

    def report(
        self, job_id: str, participant_id: str, count: int,
        admitted: Iterable[str] | None = None,
    ) -> None:
        """Store one participant's count for a job, with the roster it admitted for the job
        (None: the job's roster as it stands, for a caller that set that roster itself).

        Raises:
            UnknownJobError: the job has no roster.
            NotOnRosterError: the participant is not on it.
            RosterNotAdmittedError: the job's roster is not within ``admitted`` (equal, or
                narrowed after dropouts); a count over members the participant did not admit
                is never taken.
            AlreadyReportedError: the participant has reported for this job before.
        """
        with self._lock, Session(self._engine) as session:
            with session.begin():
                roster = _roster(session, job_id)
                if participant_id not in roster:
                    raise NotOnRosterError(
                        f"participant {participant_id!r} is not on the roster of job {job_id!r}."
                    )
                wanted = roster if admitted is None else frozenset(admitted)
                if not roster <= wanted:
                    raise RosterNotAdmittedError(
                        not_admitted_message(
                            f"the roster of job {job_id!r} at the counting service", roster,
                            participant_id, wanted,
                        )
                    )
                if session.get(CountRow, (job_id, participant_id)) is not None:
                    raise AlreadyReportedError(_already(job_id, participant_id))
            key = _admit(self._engine, wanted)
            try:
                with session.begin():
                    session.add(
                        CountRow(
                            job_id=job_id,
                            participant_id=participant_id,
                            count=count,
                            admitted_sha256=key,
                            reported_at=datetime.now(UTC),
                        )
                    )
            except IntegrityError:  # another process of the same service won the race
                raise AlreadyReportedError(_already(job_id, participant_id)) from None

    def tally(self, job_id: str) -> Tally:
        """Roster size, number of reporters and ΣN_l of a job; this releases nothing.

        Raises:
            UnknownJobError: the job has no roster.
        """
        with self._lock, Session(self._engine) as session:
            return _tally(session, job_id, len(_roster(session, job_id)))

    def release(self, job_id: str, *, min_participants: int) -> Tally:
        """The job's tally for release to the coordinator, recorded as released.

        Released once the whole roster, and at least ``min_participants``, reported, only
        over a roster within the roster each reporter admitted, and only if the totals
        released before together with this one determine no nonzero combination of the
        counts of fewer than ``min_participants`` participants
        (:func:`protocol.maths.release_guard.release_would_expose`). A job released before is
        released again without a new check: its total reveals nothing new.

        Raises:
            UnknownJobError: the job has no roster.
            IncompleteJobError: not everyone has reported yet (the message says how many did).
            RosterNotAdmittedError: the roster reaches beyond a reporter's admitted roster.
            ReleaseRefusedError: the release would expose a count of a smaller cohort.
        """
        with self._lock:
            return _until_no_collision(lambda: self._release_once(job_id, min_participants))

    def _release_once(self, job_id: str, min_participants: int) -> Tally:
        """One attempt of :meth:`release`, in one transaction."""
        with Session(self._engine) as session, session.begin():
            roster = _roster(session, job_id)
            tally = _tally(session, job_id, len(roster))
            _check_complete(tally, min_participants)
            reporters = session.execute(
                select(CountRow.participant_id, CountRow.admitted_sha256)
                .where(CountRow.job_id == job_id)
            )
            outside = first_outside(_admitted(session, {p: key for p, key in reporters}), roster)
            if outside is not None:
                raise RosterNotAdmittedError(
                    not_admitted_message(f"ΣN_l of job {job_id!r} is over its roster", roster,
                                         *outside)
                )
            done = select(ReleasedRoster.seq).where(ReleasedRoster.job_id == job_id)
            if session.scalar(done) is not None:
                return tally
            # Read the last sequence number before the rosters: a release committed in between
            # is then either among the rosters read or makes the insert below collide.
            last = session.execute(
                select(func.coalesce(func.max(ReleasedRoster.seq), 0))
            ).scalar_one()
            exposed = _release_cohort(session, roster, min_participants)
            if exposed is not None:
                raise ReleaseRefusedError(_refused(job_id, exposed, min_participants), exposed)
            session.add(
                ReleasedRoster(seq=int(last) + 1, job_id=job_id, released_at=datetime.now(UTC))
            )
            return tally

    def announce_cohort(
        self, job_id: str, participant_id: str, cohort: Sequence[str], *, min_cohort: int
    ) -> None:
        """Record the cohort of a masked sum ``participant_id`` contributes to (idempotent).

        Raises:
            UnknownJobError: the job has no roster.
            NotOnRosterError: the participant or a cohort member is not on it, or the
                participant is not in the cohort.
            ReleaseRefusedError: with the cohorts released before (totals, decrypted Paillier
                rounds, announced cohorts of any job), it would make a statistic of fewer than
                ``min_cohort`` participants derivable.
        """
        members = frozenset(cohort)

        def once() -> None:
            with Session(self._engine) as session, session.begin():
                _require_on_roster(
                    _roster(session, job_id), job_id, participant_id, members, members,
                    "the cohort announced",
                )
                exposed = _release_cohort(session, members, min_cohort)
                if exposed is not None:
                    raise ReleaseRefusedError(
                        _cohort_refused(job_id, members, exposed, min_cohort), exposed
                    )

        with self._lock:
            _until_no_collision(once)

    def register_unmasking(
        self, job_id: str, participant_id: str, setup: int, round_no: int,
        survivors: Sequence[str], dropped: Sequence[str], *, min_cohort: int,
    ) -> None:
        """Register ``participant_id``'s view of masked sum ``round_no`` of key setup
        ``setup``: who survived, who dropped out. The first view of a round is kept and only
        that very view is accepted again (a participant restarted registers it once more);
        its survivors pass the differencing guard as a released cohort
        (:meth:`announce_cohort`). So the coordinator unmasks a round under one view: with
        two, it could collect a participant's pair keys under the one (it "dropped out") and
        the shares of its self-mask under the other (it "survived").

        Raises:
            UnknownJobError: the job has no roster.
            NotOnRosterError: the participant is not among the survivors, or someone named
                is off the job's roster.
            ViewConflictError: another view of the round was registered first.
            ReleaseRefusedError: the survivors, with the cohorts released before, would make
                a statistic of fewer than ``min_cohort`` participants derivable.
        """
        alive, gone = frozenset(survivors), frozenset(dropped)
        view = view_sha256(alive, gone)

        def once() -> None:
            with Session(self._engine) as session, session.begin():
                _require_on_roster(
                    _roster(session, job_id), job_id, participant_id, alive, alive | gone,
                    "an unmasking view",
                )
                first = session.get(UnmaskViewRow, (job_id, setup, round_no))
                if first is not None and first.view_sha256 != view:
                    raise ViewConflictError(_view_conflict(job_id, setup, round_no))
                exposed = _release_cohort(session, alive, min_cohort)
                if exposed is not None:
                    raise ReleaseRefusedError(
                        _cohort_refused(job_id, alive, exposed, min_cohort), exposed
                    )
                if first is None:
                    session.add(
                        UnmaskViewRow(
                            job_id=job_id, setup=setup, round=round_no, view_sha256=view,
                            registered_at=datetime.now(UTC),
                        )
                    )
                    session.flush()

        with self._lock:
            _until_no_collision(once)

    # -- the Paillier key holder's store (counting.keyholder.PaillierStore) -------------------
    def roster(self, job_id: str) -> frozenset[str]:
        """The job's roster (empty when it has none)."""
        with self._lock, Session(self._engine) as session:
            return frozenset(
                session.scalars(
                    select(RosterEntry.participant_id).where(RosterEntry.job_id == job_id)
                )
            )

    def paillier_key(self, job_id: str) -> tuple[int, int] | None:
        """The job's private primes ``(p, q)``, or None."""
        with self._lock, Session(self._engine) as session:
            row = session.get(PaillierKeyRow, job_id)
            return None if row is None else _primes(row.private_key)

    def add_paillier_key(self, job_id: str, p: int, q: int) -> tuple[int, int]:
        """Keep the job's key unless it has one; return the stored one (first wins)."""
        with self._lock, Session(self._engine) as session:
            try:
                with session.begin():
                    if session.get(PaillierKeyRow, job_id) is None:
                        session.add(
                            PaillierKeyRow(
                                job_id=job_id,
                                private_key=json.dumps({"p": p, "q": q}),
                                created_at=datetime.now(UTC),
                            )
                        )
            except IntegrityError:  # another process stored a key first
                pass
            with session.begin():
                row = session.get(PaillierKeyRow, job_id)
                assert row is not None
                return _primes(row.private_key)

    def add_paillier_contribution(
        self, job_id: str, round_no: int, participant: str, admitted: frozenset[str]
    ) -> None:
        """Record a contribution announcement with the roster its participant admitted
        (idempotent: the first record stays); refused once the round is closed."""
        with self._lock, Session(self._engine) as session:
            key = _admit(self._engine, admitted)
            try:
                with session.begin():
                    if session.get(PaillierClosedRound, (job_id, round_no)) is not None:
                        raise RoundClosedError(closed_message(job_id, round_no))
                    if session.get(PaillierContributionRow, (job_id, round_no, participant)):
                        return
                    session.add(
                        PaillierContributionRow(
                            job_id=job_id, round=round_no, participant_id=participant,
                            admitted_sha256=key, announced_at=datetime.now(UTC),
                        )
                    )
            except IntegrityError:  # the same announcement raced in from another process
                pass

    def close_paillier_round(
        self, job_id: str, round_no: int, contributors: frozenset[str], request_sha256: str,
        *, min_cohort: int,
    ) -> None:
        """Mark the round decrypted if ``contributors`` is exactly its recorded set, lies
        within the roster each of them admitted and, with every cohort released before
        (count totals and decrypted rounds, of any job), makes no combination of fewer than
        ``min_cohort`` participants derivable; the request that closed it may come again."""
        with self._lock:
            _until_no_collision(
                lambda: self._close_paillier_round_once(
                    job_id, round_no, contributors, request_sha256, min_cohort
                )
            )

    def _close_paillier_round_once(
        self, job_id: str, round_no: int, contributors: frozenset[str], request_sha256: str,
        min_cohort: int,
    ) -> None:
        """One attempt of :meth:`close_paillier_round`, in one transaction."""
        with Session(self._engine) as session, session.begin():
            closed = session.get(PaillierClosedRound, (job_id, round_no))
            if closed is not None:
                if closed.request_sha256 == request_sha256:
                    return
                raise RoundClosedError(closed_message(job_id, round_no))
            names = session.execute(
                select(
                    PaillierContributionRow.participant_id, PaillierContributionRow.admitted_sha256
                ).where(
                    PaillierContributionRow.job_id == job_id,
                    PaillierContributionRow.round == round_no,
                )
            )
            check_contributors(
                job_id, round_no, _admitted(session, {p: key for p, key in names}), contributors
            )
            exposed = _release_cohort(session, contributors, min_cohort)
            if exposed is not None:
                raise cohort_refusal(job_id, round_no, contributors, exposed, min_cohort)
            session.add(
                PaillierClosedRound(
                    job_id=job_id, round=round_no, closed_at=datetime.now(UTC),
                    request_sha256=request_sha256,
                )
            )


def cohort_sha256(cohort: Iterable[str]) -> str:
    """The name of a cohort in ``released_cohorts``: the SHA-256 of its sorted ids."""
    return hashlib.sha256("\n".join(sorted(cohort)).encode()).hexdigest()


def view_sha256(survivors: frozenset[str], dropped: frozenset[str]) -> str:
    """The name of an unmasking view in ``unmask_views``: the SHA-256 of its sorted ids."""
    return hashlib.sha256(json.dumps([sorted(survivors), sorted(dropped)]).encode()).hexdigest()


_T = TypeVar("_T")


def _until_no_collision(attempt: Callable[[], _T]) -> _T:
    """``attempt()``, one transaction, run again at once for as long as it collides with a row
    another process of the service committed in between (``IntegrityError``): each collision
    means the state it read changed, so the next attempt decides anew on the new state."""
    return Retrying(retry=retry_if_exception_type(IntegrityError), reraise=True)(attempt)


def _admit(engine: Engine, roster: frozenset[str]) -> str:
    """Record ``roster`` in ``admitted_rosters`` unless it is there (another process may
    record it at the same time); its name (:func:`cohort_sha256`)."""
    key = cohort_sha256(roster)
    with Session(engine) as session:
        try:
            with session.begin():
                if session.get(AdmittedRosterRow, (key, min(roster))) is None:
                    now = datetime.now(UTC)
                    session.add_all(
                        AdmittedRosterRow(roster_sha256=key, participant_id=p, admitted_at=now)
                        for p in sorted(roster)
                    )
        except IntegrityError:  # recorded by another process meanwhile
            pass
    return key


def _admitted(session: Session, names: Mapping[str, str]) -> dict[str, frozenset[str]]:
    """participant -> the roster it admitted, for ``names`` (participant -> roster name)."""
    members: dict[str, set[str]] = {}
    for key, participant in session.execute(
        select(AdmittedRosterRow.roster_sha256, AdmittedRosterRow.participant_id).where(
            AdmittedRosterRow.roster_sha256.in_(set(names.values()))
        )
    ):
        members.setdefault(key, set()).add(participant)
    return {p: frozenset(members.get(key, ())) for p, key in names.items()}


def _require_on_roster(
    roster: frozenset[str], job_id: str, sender: str, cohort: frozenset[str],
    named: frozenset[str], what: str,
) -> None:
    """Raise :class:`NotOnRosterError` unless ``cohort`` holds its ``sender`` and everyone
    ``named`` is on the job's ``roster``."""
    outside = sorted((named | {sender}) - roster)
    if outside or sender not in cohort:
        raise NotOnRosterError(
            f"{what} for job {job_id!r} must hold its sender among those taking part and "
            f"name only the job's roster; {', '.join(outside) or sender} does not."
        )


def _release_cohort(
    session: Session, cohort: frozenset[str], min_cohort: int
) -> tuple[str, ...] | None:
    """Record ``cohort`` as released unless, with every cohort released before, it would make
    a combination of fewer than ``min_cohort`` participants derivable; then return a smallest
    such participant set (:func:`protocol.maths.release_guard.release_would_expose`) and record
    nothing. A cohort released before passes at once."""
    key = cohort_sha256(cohort)
    if session.get(ReleasedCohortRow, (key, min(cohort))) is not None:
        return None
    released: dict[str, set[str]] = {}
    for name, participant in session.execute(
        select(ReleasedCohortRow.cohort_sha256, ReleasedCohortRow.participant_id)
    ):
        released.setdefault(name, set()).add(participant)
    exposed = release_would_expose(released.values(), cohort, min_cohort)
    if exposed is None:
        now = datetime.now(UTC)
        session.add_all(
            ReleasedCohortRow(cohort_sha256=key, participant_id=p, released_at=now)
            for p in sorted(cohort)
        )
        session.flush()  # another process recording the same cohort collides here
    return exposed


def _roster(session: Session, job_id: str) -> frozenset[str]:
    """The job's roster; raises :class:`UnknownJobError` when it has none."""
    roster = frozenset(
        session.scalars(select(RosterEntry.participant_id).where(RosterEntry.job_id == job_id))
    )
    if not roster:
        raise UnknownJobError(f"the counting service has no roster for job {job_id!r}.")
    return roster


def _tally(session: Session, job_id: str, roster_size: int) -> Tally:
    reporters, total = session.execute(
        select(func.count(), func.coalesce(func.sum(CountRow.count), 0)).where(
            CountRow.job_id == job_id
        )
    ).one()
    return Tally(roster_size=roster_size, reporters=int(reporters), total=int(total))


def _check_complete(tally: Tally, minimum: int) -> None:
    """Raise :class:`IncompleteJobError` unless the whole roster, and the minimum, reported."""
    if tally.reporters < minimum:
        raise IncompleteJobError(
            f"only {tally.reporters} of min {minimum} participants have reported; "
            "ΣN_l is not released yet"
        )
    if tally.reporters < tally.roster_size:
        raise IncompleteJobError(
            f"only {tally.reporters} of the roster's {tally.roster_size} participants have "
            "reported; ΣN_l is released once all have (a partial total would reveal a count by "
            "difference)"
        )


def _refused(job_id: str, exposed: tuple[str, ...], minimum: int) -> str:
    """Why the total of ``job_id`` is refused; names participants (public), never counts."""
    names = ", ".join(repr(p) for p in exposed)
    what = (
        f"the count of participant {names}"
        if len(exposed) == 1
        else f"a combination of the counts of participants {names}"
    )
    return (
        f"ΣN_l of job {job_id!r} is not released, now or later: its roster, combined with the "
        f"totals released before, would make a count of fewer than {minimum} participants "
        f"derivable ({what})"
    )


def _cohort_refused(
    job_id: str, cohort: frozenset[str], exposed: tuple[str, ...], minimum: int
) -> str:
    """Why a masked sum's cohort is refused; names participants (public), never a value."""
    return (
        f"a masked sum of job {job_id!r} over {sorted(cohort)} is refused, now and later: with "
        f"the cohorts released before, it would make a statistic of fewer than {minimum} "
        f"participants derivable ({', '.join(exposed)})"
    )


def _view_conflict(job_id: str, setup: int, round_no: int) -> str:
    return (
        f"job {job_id!r}, masked sum {round_no} (key setup {setup}): another participant "
        "registered a different view of who survived and who dropped out; a round is unmasked "
        "under one view only (under two, a participant's pair keys and its self-mask's shares "
        "would both be handed out): refused."
    )


def _primes(text: str) -> tuple[int, int]:
    doc = json.loads(text)
    return int(doc["p"]), int(doc["q"])


def _already(job_id: str, participant_id: str) -> str:
    return f"participant {participant_id!r} has already reported its count for job {job_id!r}."
