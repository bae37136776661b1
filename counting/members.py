"""Who may report to the counting service: the config file's participants and run-time changes.

The coordinator tells the service when a member joins (``PUT /participants/{id}`` with its
token's SHA-256) or is revoked (``DELETE /participants/{id}``). A run-time membership, kept in
the store, supersedes the config file's entry for that id: a joined member's token replaces
it, a revoked member has none. Each change swaps in a new table under a lock, so it applies
from the next request on without a restart; the stored memberships are read when the app is
created (one service process per database).
"""

from __future__ import annotations

import threading

from fedclust.counting.db import CountingStore
from fedclust.counting.settings import CountingSettings

__all__ = ["Members"]


class Members:
    """The current participants' token digests; changes are written through to the store."""

    def __init__(self, settings: CountingSettings, store: CountingStore) -> None:
        self._configured = {p.id: p.token_sha256 for p in settings.participants}
        self._coordinator = settings.coordinator_token_sha256
        self._store = store
        self._lock = threading.Lock()
        self._memberships = store.memberships()
        self._digests = self._current()

    def _current(self) -> dict[str, str]:
        merged = self._configured | self._memberships
        return {pid: digest for pid, digest in merged.items() if digest is not None}

    def credentials(self) -> list[tuple[str, str]]:
        """``(participant id, token SHA-256)`` of every current member."""
        return list(self._digests.items())

    def is_member(self, participant_id: str) -> bool:
        return participant_id in self._digests

    def __len__(self) -> int:
        return len(self._digests)

    def set(self, participant_id: str, token_sha256: str | None) -> None:
        """Give ``participant_id`` a new token (its SHA-256) or none (revoked), from now on.

        Raises:
            ValueError: the digest is the coordinator's or another member's.
        """
        with self._lock:
            if token_sha256 is not None and (
                token_sha256 == self._coordinator
                or any(d == token_sha256 and p != participant_id for p, d in self._digests.items())
            ):
                raise ValueError("every participant and the coordinator need their own token")
            self._store.set_membership(participant_id, token_sha256)
            self._memberships = self._memberships | {participant_id: token_sha256}
            self._digests = self._current()
