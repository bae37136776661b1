"""The Paillier key holder of the counting service: one key pair per job, aggregate decryption.

:class:`PaillierKeyHolder` generates a job's key pair on the first request (kept as p, q),
records each participant's announced contribution with the roster it admitted
(:meth:`PaillierKeyHolder.record_contribution`) and decrypts the coordinator's aggregate
(:meth:`PaillierKeyHolder.decrypt`; scheme: ``crypto.paillier``). Decryption rule: the
contributors named are exactly those recorded for the round, at least ``min_cohort`` (>= 3),
each within the roster it admitted; every field claims that many contributions under the
job's key; a round is decrypted once (that same request is answered again) and then closed;
and a round the release guard (:mod:`protocol.maths.release_guard`) finds would expose fewer
than ``min_cohort`` participants with the cohorts released before is refused. The private key
never leaves the store and is never logged. Assumption: no collusion with the coordinator.

Design notes: ``docs/secure-sums.md`` (§ The Paillier key holder).
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from phe.paillier import PaillierPrivateKey, PaillierPublicKey

from fedclust.core.errors import ProtocolError, RefusedError
from fedclust.core.validation import check_int
from fedclust.crypto.paillier import (
    MIN_COHORT,
    EncryptedVector,
    PaillierKeyPair,
    decrypt_sum,
    key_fingerprint,
)
from fedclust.protocol.maths.release_guard import release_would_expose
from fedclust.protocol.wire import messages as msg
from fedclust.protocol.wire.secure import paillier_key_message

__all__ = [
    "DecryptionRefusedError",
    "KeyHolderError",
    "MemoryPaillierStore",
    "NotAdmittedError",
    "NotOnRosterError",
    "PaillierKeyHolder",
    "PaillierStore",
    "RoundClosedError",
    "UnknownJobError",
    "check_contributors",
    "closed_message",
    "cohort_refusal",
    "first_outside",
    "mismatch_message",
    "not_admitted_message",
]


class KeyHolderError(RefusedError):
    """The key holder refuses a request; the message is safe to show (no values, no keys)."""


class UnknownJobError(KeyHolderError):
    """The job has no roster at the counting service."""


class NotOnRosterError(KeyHolderError):
    """The participant is not on the job's roster."""


class NotAdmittedError(KeyHolderError):
    """The job's roster (or a round's contributors) lies outside the roster a contributor
    admitted for the job."""


class RoundClosedError(KeyHolderError):
    """The Paillier round was decrypted already: no further contribution or decryption."""


class DecryptionRefusedError(KeyHolderError):
    """A decryption request breaks the decryption rule (module docstring)."""


class PaillierStore(Protocol):
    """Where a key holder keeps rosters, key pairs and contribution records.

    Implementations make :meth:`add_paillier_contribution` and :meth:`close_paillier_round`
    atomic with respect to each other.
    """

    def roster(self, job_id: str) -> frozenset[str]:
        """The job's roster (empty if it has none)."""
        ...

    def paillier_key(self, job_id: str) -> tuple[int, int] | None:
        """The job's private primes ``(p, q)``, or None before the first key request."""
        ...

    def add_paillier_key(self, job_id: str, p: int, q: int) -> tuple[int, int]:
        """Keep ``(p, q)`` unless the job has a key already; return the job's key (first wins)."""
        ...

    def add_paillier_contribution(
        self, job_id: str, round_no: int, participant: str, admitted: frozenset[str]
    ) -> None:
        """Record that ``participant``, which admitted the roster ``admitted`` for the job,
        contributes to ``round_no`` (idempotent: the first record stays).

        Raises:
            RoundClosedError: the round was decrypted already.
        """
        ...

    def close_paillier_round(
        self, job_id: str, round_no: int, contributors: frozenset[str], request_sha256: str,
        *, min_cohort: int,
    ) -> None:
        """Mark the round decrypted if ``contributors`` is exactly its recorded set, lies
        within the roster each of them admitted (:func:`not_admitted_message`) and, with
        the cohorts released before, exposes no combination of fewer than ``min_cohort``
        participants (:func:`cohort_refusal`); keeps the request's SHA-256, and the same
        request again passes (nothing new is decrypted).

        Raises:
            RoundClosedError: the round was decrypted already, for another request.
            DecryptionRefusedError: ``contributors`` differs from the recorded set, reaches
                beyond a contributor's admitted roster, or would expose a small cohort.
        """
        ...


def check_contributors(
    job_id: str, round_no: int, admitted: Mapping[str, frozenset[str]],
    contributors: frozenset[str],
) -> None:
    """The decryption rule on who is summed: ``contributors`` must be exactly the participants
    recorded for the round (``admitted``: each with the roster it admitted for the job) and
    lie within every one's admitted roster; else DecryptionRefusedError saying which part."""
    recorded = frozenset(admitted)
    if recorded != contributors:
        raise DecryptionRefusedError(mismatch_message(job_id, round_no, recorded, contributors))
    outside = first_outside(admitted, contributors)
    if outside is not None:
        raise DecryptionRefusedError(
            not_admitted_message(
                f"job {job_id!r}, Paillier round {round_no}: its contributors",
                contributors, *outside,
            )
        )


def cohort_refusal(
    job_id: str, round_no: int, contributors: frozenset[str], exposed: tuple[str, ...],
    min_cohort: int,
) -> DecryptionRefusedError:
    """The refusal of a round whose contributors, with the cohorts released before, would
    make a combination of the ``exposed`` participants (fewer than ``min_cohort``) derivable
    (:func:`protocol.maths.release_guard.release_would_expose`); names ids, never a value."""
    return DecryptionRefusedError(
        f"job {job_id!r}, Paillier round {round_no}: its contributors "
        f"{sorted(contributors)}, with the cohorts released before, would make a statistic "
        f"of fewer than {min_cohort} participants derivable ({', '.join(exposed)}); refusing "
        "to decrypt, now and later."
    )


def mismatch_message(
    job_id: str, round_no: int, recorded: frozenset[str], named: frozenset[str]
) -> str:
    parts = []
    if named - recorded:
        parts.append(f"named but not recorded: {sorted(named - recorded)}")
    if recorded - named:
        parts.append(f"recorded but not named: {sorted(recorded - named)}")
    return (
        f"job {job_id!r}, Paillier round {round_no}: the contributors named differ from those "
        f"that announced a contribution ({'; '.join(parts)}); refusing to decrypt."
    )


def not_admitted_message(
    what: str, cohort: frozenset[str], participant: str, admitted: frozenset[str]
) -> str:
    """Why a statistic over ``cohort`` (``what`` names it) is refused: it reaches beyond
    the roster ``participant`` admitted for the job (its declare task's, judged by its
    roster rule); names ids only."""
    return (
        f"{what} {sorted(cohort)} is not within the roster participant {participant!r} "
        f"admitted for the job ({sorted(admitted)}): a participant's statistic is only ever "
        "released over members it admitted; refused."
    )


def first_outside(
    admitted: Mapping[str, frozenset[str]], cohort: frozenset[str]
) -> tuple[str, frozenset[str]] | None:
    """The first participant (by id) whose ``admitted`` roster does not hold ``cohort``,
    with that roster; None when every one does."""
    for participant in sorted(admitted):
        if not cohort <= admitted[participant]:
            return participant, admitted[participant]
    return None


def closed_message(job_id: str, round_no: int) -> str:
    return (
        f"job {job_id!r}, Paillier round {round_no} was decrypted already; a round is "
        "decrypted once and takes no later contributions."
    )


@dataclass
class MemoryPaillierStore:
    """An in-memory :class:`PaillierStore` (the simulator's counting service)."""

    rosters: dict[str, frozenset[str]] = field(default_factory=dict)
    _keys: dict[str, tuple[int, int]] = field(default_factory=dict, repr=False)
    # (job, round) -> contributor -> the roster it admitted
    _records: dict[tuple[str, int], dict[str, frozenset[str]]] = field(
        default_factory=dict, repr=False
    )
    _closed: dict[tuple[str, int], str] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def with_rosters(cls, rosters: Mapping[str, Iterable[str]]) -> MemoryPaillierStore:
        return cls({job: frozenset(members) for job, members in rosters.items()})

    def put_roster(self, job_id: str, participants: Iterable[str]) -> None:
        with self._lock:
            self.rosters[job_id] = frozenset(participants)

    def roster(self, job_id: str) -> frozenset[str]:
        with self._lock:
            return self.rosters.get(job_id, frozenset())

    def paillier_key(self, job_id: str) -> tuple[int, int] | None:
        with self._lock:
            return self._keys.get(job_id)

    def add_paillier_key(self, job_id: str, p: int, q: int) -> tuple[int, int]:
        with self._lock:
            return self._keys.setdefault(job_id, (p, q))

    def add_paillier_contribution(
        self, job_id: str, round_no: int, participant: str, admitted: frozenset[str]
    ) -> None:
        with self._lock:
            if (job_id, round_no) in self._closed:
                raise RoundClosedError(closed_message(job_id, round_no))
            self._records.setdefault((job_id, round_no), {}).setdefault(participant, admitted)

    def close_paillier_round(
        self, job_id: str, round_no: int, contributors: frozenset[str], request_sha256: str,
        *, min_cohort: int,
    ) -> None:
        with self._lock:
            closed = self._closed.get((job_id, round_no))
            if closed is not None:
                if closed == request_sha256:
                    return
                raise RoundClosedError(closed_message(job_id, round_no))
            check_contributors(
                job_id, round_no, self._records.get((job_id, round_no), {}), contributors
            )
            released = {frozenset(self._records[key]) for key in self._closed}
            exposed = release_would_expose(released, contributors, min_cohort)
            if exposed is not None:
                raise cohort_refusal(job_id, round_no, contributors, exposed, min_cohort)
            self._closed[(job_id, round_no)] = request_sha256


class PaillierKeyHolder:
    """Per job one Paillier key pair; decrypts only whole rounds of >= ``min_cohort`` parties.

    Args:
        store: rosters, keys and contribution records (SQLite in the counting service,
            :class:`MemoryPaillierStore` in the simulator).
        bits: modulus size of new keys (>= 1024; 2048 by default).
        min_cohort: the fewest contributions ever decrypted (>= 3).
    """

    def __init__(self, store: PaillierStore, *, bits: int = 2048, min_cohort: int = MIN_COHORT):
        owner = "PaillierKeyHolder"
        self._store = store
        self._bits = check_int(bits, name="bits", owner=owner, low=1024)
        self._min = check_int(min_cohort, name="min_cohort", owner=owner, low=MIN_COHORT)
        self._pairs: dict[str, PaillierKeyPair] = {}
        self._lock = threading.Lock()

    @property
    def min_cohort(self) -> int:
        return self._min

    def __repr__(self) -> str:
        return f"PaillierKeyHolder(bits={self._bits}, min_cohort={self._min})"

    def _roster(self, job_id: str) -> frozenset[str]:
        roster = self._store.roster(job_id)
        if not roster:
            raise UnknownJobError(f"the counting service has no roster for job {job_id!r}.")
        return roster

    def _pair(self, job_id: str) -> PaillierKeyPair:
        self._roster(job_id)
        with self._lock:
            pair = self._pairs.get(job_id)
            if pair is not None:
                return pair
            stored = self._store.paillier_key(job_id)
            if stored is None:
                fresh = PaillierKeyPair.generate(self._bits)
                stored = self._store.add_paillier_key(
                    job_id, int(fresh.private_key.p), int(fresh.private_key.q)
                )
            p, q = stored
            public_key = PaillierPublicKey(p * q)
            pair = PaillierKeyPair(public_key, PaillierPrivateKey(public_key, p, q))
            self._pairs[job_id] = pair
            return pair

    def public_key(self, job_id: str) -> msg.PaillierKey:
        """The job's public key (the pair is generated on the first request).

        Raises:
            UnknownJobError: the job has no roster.
        """
        return paillier_key_message(self._pair(job_id).public_key)

    def check_member(self, job_id: str, participant: str) -> None:
        """Refuse a participant that is not on the job's roster (NotOnRosterError)."""
        if participant not in self._roster(job_id):
            raise NotOnRosterError(
                f"participant {participant!r} is not on the roster of job {job_id!r}."
            )

    def record_contribution(
        self, job_id: str, round_no: int, participant: str,
        admitted: Iterable[str] | None = None,
    ) -> None:
        """Record that ``participant`` (on the roster) contributes to round ``round_no``.

        ``admitted``: the roster the participant admitted for the job (the service passes
        the one its notice carries); None where the caller itself set the job's roster (the
        simulator): that roster. Idempotent for the same participant. Raises
        NotOnRosterError, UnknownJobError, NotAdmittedError when the job's roster is not
        within ``admitted``, or RoundClosedError when the round was decrypted already.
        """
        check_int(round_no, name="round_no", owner="record_contribution", low=1)
        self.check_member(job_id, participant)
        roster = self._roster(job_id)
        wanted = roster if admitted is None else frozenset(admitted)
        if not roster <= wanted:
            raise NotAdmittedError(
                not_admitted_message(
                    f"job {job_id!r}, Paillier round {round_no}: the job's roster here",
                    roster, participant, wanted,
                )
            )
        self._store.add_paillier_contribution(job_id, round_no, participant, wanted)

    def decrypt(self, request: msg.PaillierDecryptRequest) -> msg.PaillierDecryption:
        """Decrypt and decode the aggregate of one round (decryption rule: module docstring).

        Raises:
            UnknownJobError: the job has no roster.
            DecryptionRefusedError: the request breaks the rule (the reason says which part).
            RoundClosedError: the round was decrypted before.
        """
        job, r = request.job_id, request.round
        where = f"job {job!r}, Paillier round {r}"
        pair = self._pair(job)
        contributors = frozenset(request.contributors)
        count = len(contributors)
        if count != len(request.contributors):
            raise DecryptionRefusedError(f"{where}: the contributors named are not distinct.")
        if count < self._min:
            raise DecryptionRefusedError(
                f"{where}: an aggregate of {count} contribution(s) is below the minimum cohort "
                f"of {self._min}; refusing to decrypt."
            )
        fingerprint = key_fingerprint(pair.public_key)
        vectors: dict[str, EncryptedVector] = {}
        for name, encrypted in request.vectors.items():
            if encrypted.n_contributions != count:
                raise DecryptionRefusedError(
                    f"{where}: field {name!r} claims {encrypted.n_contributions} contributions "
                    f"but {count} contributors are named; refusing to decrypt."
                )
            if encrypted.key_sha256 != fingerprint:
                raise DecryptionRefusedError(
                    f"{where}: field {name!r} is encrypted under another key than the job's."
                )
            try:
                vector = EncryptedVector.from_dict(encrypted.model_dump(), pair.public_key)
            except (ProtocolError, ValueError) as exc:
                raise DecryptionRefusedError(f"{where}: field {name!r}: {exc}") from None
            if vector.spec.statistic != name:
                raise DecryptionRefusedError(
                    f"{where}: field {name!r} carries statistic {vector.spec.statistic!r}."
                )
            vectors[name] = vector
        digest = hashlib.sha256(request.model_dump_json().encode()).hexdigest()
        self._store.close_paillier_round(job, r, contributors, digest, min_cohort=self._min)
        sums = {}
        for name, vector in vectors.items():
            try:
                values = decrypt_sum(pair.private_key, vector, count, self._min)
            except ProtocolError as exc:
                raise DecryptionRefusedError(f"{where}: {exc}") from None
            sums[name] = msg.WireArray.of(values)
        return msg.PaillierDecryption(job_id=job, round=r, sums=sums)
