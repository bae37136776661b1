"""Who may report to the counting service: the config file's participants and run-time changes.

Membership is the counting operator's act, not the coordinator's. The coordinator may only
*ask* for a member's credential (``PUT /participants/{id}`` with its token's SHA-256, when a
member joins the federation): the request waits in the store until the counting operator
approves it on the counting host (``fedclust counter members approve ID``). So the operator of
a coordinator cannot invent members at the counting service and, with rosters made of them,
isolate one real organisation's count (a total minus the invented members' own counts). The
coordinator may revoke (``DELETE /participants/{id}``), which only ever removes a member.

A run-time membership, kept in the store, supersedes the config file's entry for that id: an
approved member's token replaces it, a revoked member has none. The memberships are read from
the store on every check, so an approval made by another process (the CLI) applies from the
next request on, without a restart.
"""

from __future__ import annotations

from fedclust.counting.db import CountingStore
from fedclust.counting.settings import CountingSettings

__all__ = ["Members"]


class Members:
    """The current participants' token digests and the coordinator's pending requests."""

    def __init__(self, settings: CountingSettings, store: CountingStore) -> None:
        self._configured = {p.id: p.token_sha256 for p in settings.participants}
        self._coordinator = settings.coordinator_token_sha256
        self._store = store

    def _current(self) -> dict[str, str]:
        merged = self._configured | self._store.memberships()
        return {pid: digest for pid, digest in merged.items() if digest is not None}

    def credentials(self) -> list[tuple[str, str]]:
        """``(participant id, token SHA-256)`` of every current member."""
        return list(self._current().items())

    def is_member(self, participant_id: str) -> bool:
        return participant_id in self._current()

    def is_pending(self, participant_id: str) -> bool:
        """Whether a request for ``participant_id`` awaits the counting operator."""
        return participant_id in self._store.membership_requests()

    def __len__(self) -> int:
        return len(self._current())

    def request(self, participant_id: str, token_sha256: str) -> bool:
        """The coordinator asks for this credential: True when it is in force already,
        else the request is stored for the counting operator's approval (False).

        Raises:
            ValueError: the digest is the coordinator's or another member's.
        """
        current = self._current()
        if current.get(participant_id) == token_sha256:
            return True
        if token_sha256 == self._coordinator or any(
            d == token_sha256 and p != participant_id for p, d in current.items()
        ):
            raise ValueError("every participant and the coordinator need their own token")
        self._store.request_membership(participant_id, token_sha256)
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
            d == pending and p != participant_id for p, d in self._current().items()
        ):
            raise ValueError("every participant and the coordinator need their own token")
        try:
            return self._store.approve_membership(participant_id, pending)
        except (KeyError, ValueError):  # changed by the coordinator in between
            raise ValueError(
                f"the request of {participant_id!r} changed while it was approved: look again"
            ) from None

    def revoke(self, participant_id: str) -> None:
        """Refuse every token of ``participant_id`` from now on (and drop its request)."""
        self._store.set_membership(participant_id, None)
