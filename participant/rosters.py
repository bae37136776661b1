"""The rosters of the jobs an agent joined, kept in its state folder (``rosters.json``).

Totals of protected sums over two rosters that differ by fewer participants than a cohort
reveal the differing participants' statistics by difference. The policy's roster rule
(:meth:`participant.policy.Policy.require_roster`) decides which rosters an agent joins; it
is evaluated once per job, on the job's declare task (the first task of every job), against
the rosters of every job joined before — across restarts, since they are saved here. A
re-delivered declare task of a joined job must carry the same roster.

Every other task of a job whose roster this agent never admitted is refused, whatever the
rule ("any" included), so a coordinator cannot skip the declaration: the roster rule and the
job's declared terms (``participant.terms``) can only be checked against a declaration; a
masking cohort must lie within the admitted roster. Reasons name rosters only (public facts).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from pathlib import Path

from fedclust.core.errors import RefusedError
from fedclust.infra.private_files import write_private
from fedclust.participant.policy import Policy, roster_text

__all__ = ["RosterBook"]


class RosterBook:
    """job id -> the roster this agent joined it with, persisted as JSON at ``path``.

    Raises:
        ValueError: the file exists but is not a saved roster book (at the agent's start).
    """

    def __init__(self, path: Path) -> None:
        self._path = path
        self._joined: dict[str, frozenset[str]] = {}
        if path.exists():
            try:
                stored = json.loads(path.read_text(encoding="utf-8"))
                self._joined = {
                    str(job): frozenset(str(p) for p in roster) for job, roster in stored.items()
                }
            except (ValueError, AttributeError, TypeError) as exc:
                raise ValueError(f"{path}: not a file of joined rosters ({exc})") from None
        self._lock = threading.Lock()

    def admit(self, job_id: str, roster: Sequence[str], policy: Policy, *, me: str) -> None:
        """Join ``job_id`` with ``roster`` or raise RefusedError saying why (the policy's
        rule, for the participant ``me``)."""
        wanted = frozenset(roster)
        with self._lock:
            known = self._joined.get(job_id)
            if known is not None:
                if known != wanted:
                    raise RefusedError(
                        f"job {job_id!r} was declared before with the roster "
                        f"{roster_text(known)}; a job's roster cannot change: refused."
                    )
                return
            policy.require_roster(wanted, self._joined.values(), me=me)
            self._joined[job_id] = wanted
            try:
                self._save()
            except OSError as exc:
                del self._joined[job_id]
                raise RefusedError(
                    f"this participant cannot save the rosters it joined ({exc.strerror}): "
                    "refused."
                ) from None

    def admitted(self, job_id: str) -> frozenset[str] | None:
        """The roster this agent joined ``job_id`` with (None: never declared to it)."""
        with self._lock:
            return self._joined.get(job_id)

    def require_admitted(self, job_id: str, cohort: Sequence[str] | None = None) -> None:
        """Refuse a task of a job not admitted (whatever the rule: without a declaration
        neither the roster rule nor the job's terms can be checked), or a secure sum whose
        ``cohort`` reaches beyond the admitted roster."""
        with self._lock:
            known = self._joined.get(job_id)
        if known is None:
            raise RefusedError(
                f"job {job_id!r} was never declared to this participant: every task of a job "
                "needs its declare task first (its roster and terms, checked against this "
                "participant's policy): refused."
            )
        if cohort is not None and not set(cohort) <= known:
            raise RefusedError(
                f"the secure sum's cohort {roster_text(cohort)} reaches beyond the job's roster "
                f"{roster_text(known)}: refused."
            )

    def _save(self) -> None:
        doc = {job: sorted(roster) for job, roster in sorted(self._joined.items())}
        write_private(self._path, json.dumps(doc))

