"""Who may report to the counting service: the config file's participants and run-time changes.

Membership is the counting operator's act, not the coordinator's. The coordinator may only
*ask* for a member's credential (``PUT /participants/{id}`` with its token's SHA-256, when a
member joins the federation): the request waits in the store until the counting operator
approves it on the counting host (``fedclust counter members approve ID``). So the operator of
a coordinator cannot invent members at the counting service and, with rosters made of them,
isolate one real organisation's count (a total minus the invented members' own counts). The
coordinator may revoke (``DELETE /participants/{id}``), which only ever removes a member.

A run-time membership, kept in the store, supersedes the config file's entry for that id: an
approved member's token replaces it, a revoked member has none. Checks read an in-memory
snapshot of the memberships and pending requests, never the store (the body guard checks on
the event loop, a roster check once per participant). A change made through this object (the
coordinator's request or revoke, an approval) replaces the snapshot at once; one made by
another process (the CLI's approval or rejection) is seen once the snapshot is reread, which
the first check to find it older than :data:`REFRESH_SECONDS` does (one thread at a time, the
others keep the snapshot they have): within about a second, without a restart.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Final

from sqlalchemy.exc import SQLAlchemyError

from fedclust.counting.db import CountingStore
from fedclust.counting.settings import CountingSettings

__all__ = ["REFRESH_SECONDS", "Members"]

#: The most seconds a check trusts the snapshot before the store is read again.
REFRESH_SECONDS: Final = 1.0

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Snapshot:
    """The current members' token digests and the pending requests, as read at ``read_at``
    (this object's clock); replaced whole, never changed, so a reader needs no lock."""

    members: Mapping[str, str]
    pending: Mapping[str, str]
    read_at: float


class Members:
    """The current participants' token digests and the coordinator's pending requests.

    ``clock``: monotonic seconds, for the snapshot's age (:data:`REFRESH_SECONDS`).
    """

    def __init__(
        self, settings: CountingSettings, store: CountingStore,
        *, clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._configured = {p.id: p.token_sha256 for p in settings.participants}
        self._coordinator = settings.coordinator_token_sha256
        self._store = store
        self._clock = clock
        self._lock = threading.Lock()  # one rereads or changes the snapshot at a time
        self._snapshot = self._read()

    def _read(self) -> _Snapshot:
        """The memberships and requests in the store now."""
        read_at = self._clock()
        merged = self._configured | self._store.memberships()
        return _Snapshot(
            members={pid: digest for pid, digest in merged.items() if digest is not None},
            pending=self._store.membership_requests(),
            read_at=read_at,
        )

    def _current(self) -> _Snapshot:
        """The snapshot, reread first when it is older than :data:`REFRESH_SECONDS` and no
        other thread is rereading or changing it. A failed reread keeps the old one for
        another :data:`REFRESH_SECONDS` (only the store's own changes are missed meanwhile)."""
        snapshot = self._snapshot
        if self._clock() - snapshot.read_at < REFRESH_SECONDS:
            return snapshot
        if not self._lock.acquire(blocking=False):
            return snapshot
        try:
            snapshot = self._snapshot
            if self._clock() - snapshot.read_at >= REFRESH_SECONDS:
                try:
                    snapshot = self._read()
                except SQLAlchemyError as exc:
                    log.warning("the memberships could not be reread (%s); the last ones "
                                "read stay in force", type(exc).__name__)
                    snapshot = replace(snapshot, read_at=self._clock())
                self._snapshot = snapshot
            return snapshot
        finally:
            self._lock.release()

    def unknown(self, participant_ids: Iterable[str]) -> list[str]:
        """Those of ``participant_ids`` that are no current member, after rereading the store
        once if any is missing from the snapshot (the coordinator's roster may name a member
        the counting operator approved a moment ago; strangers' tokens never cause a read)."""
        missing = [p for p in participant_ids if p not in self._current().members]
        if missing:
            with self._lock:
                try:
                    self._snapshot = self._read()
                except SQLAlchemyError as exc:  # keep the snapshot: they stay unknown
                    log.warning("the memberships could not be reread (%s)", type(exc).__name__)
            missing = [p for p in missing if p not in self._snapshot.members]
        return missing

    def credentials(self) -> list[tuple[str, str]]:
        """``(participant id, token SHA-256)`` of every current member."""
        return list(self._current().members.items())

    def is_member(self, participant_id: str) -> bool:
        return participant_id in self._current().members

    def is_pending(self, participant_id: str) -> bool:
        """Whether a request for ``participant_id`` awaits the counting operator."""
        return participant_id in self._current().pending

    def __len__(self) -> int:
        return len(self._current().members)

    def request(self, participant_id: str, token_sha256: str) -> bool:
        """The coordinator asks for this credential: True when it is in force already,
        else the request is stored for the counting operator's approval (False).

        Raises:
            ValueError: the digest is the coordinator's or another member's.
        """
        current = self._current().members
        if current.get(participant_id) == token_sha256:
            return True
        if token_sha256 == self._coordinator or any(
            d == token_sha256 and p != participant_id for p, d in current.items()
        ):
            raise ValueError("every participant and the coordinator need their own token")
        with self._lock:
            self._store.request_membership(participant_id, token_sha256)
            snapshot = self._snapshot
            self._snapshot = replace(
                snapshot, pending={**snapshot.pending, participant_id: token_sha256}
            )
        return False

    def approve(self, participant_id: str, token_sha256: str | None = None) -> str:
        """The counting operator accepts the pending request of ``participant_id`` (with
        ``token_sha256``: only if it is the one requested); returns the accepted digest.

        Raises:
            ValueError: no pending request, another digest, or the digest is another
                principal's (the request is left pending).
        """
        pending = self._store.membership_requests().get(participant_id)
        if pending is None:
            raise ValueError(f"no membership request of {participant_id!r} is pending")
        if token_sha256 is not None and token_sha256 != pending:
            raise ValueError(
                f"the pending request of {participant_id!r} is for another token than the one "
                "given: ask the organisation for its token's SHA-256 again"
            )
        if pending == self._coordinator or any(
            d == pending and p != participant_id for p, d in self._current().members.items()
        ):
            raise ValueError("every participant and the coordinator need their own token")
        with self._lock:
            try:
                digest = self._store.approve_membership(participant_id, pending)
            except (KeyError, ValueError):  # changed by the coordinator in between
                raise ValueError(
                    f"the request of {participant_id!r} changed while it was approved: look "
                    "again"
                ) from None
            self._change(participant_id, digest)
        return digest

    def revoke(self, participant_id: str) -> None:
        """Refuse every token of ``participant_id`` from now on (and drop its request)."""
        with self._lock:
            self._store.set_membership(participant_id, None)
            self._change(participant_id, None)

    def _change(self, participant_id: str, token_sha256: str | None) -> None:
        """Put a credential just stored (None: revoked) into the snapshot, its request
        dropped; the caller holds the lock."""
        snapshot = self._snapshot
        members = {p: d for p, d in snapshot.members.items() if p != participant_id}
        if token_sha256 is not None:
            members[participant_id] = token_sha256
        pending = {p: d for p, d in snapshot.pending.items() if p != participant_id}
        self._snapshot = replace(snapshot, members=members, pending=pending)
