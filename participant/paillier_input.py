"""A participant's side of the Paillier secure sums of one job (``crypto.paillier``).

The coordinator sends a :class:`protocol.wire.messages.PaillierInputTask` per sum;
:class:`PaillierSession` answers it:

1. answer the very task answered last again with the same ciphertexts (a coordinator resumed
   after a crash asks once more: nothing new leaves); refuse any other round not newer than
   the last one answered in this job (a replay), a
   ``max_parties`` below the minimum cohort, and a public key whose fingerprint does not
   match its modulus, that is smaller than ``min_key_bits``, or (when ``expected_key`` is
   given) that is not the key this participant fetched itself from the counting service — so
   a coordinator cannot substitute a key whose private half it holds;
2. compute the statistic on the local rows (the plain task's computation), check the declared
   encoding names exactly its summed fields and every value lies within its bound (a value
   over its bound is a fatal refusal saying nothing of the data,
   ``dispatch.over_bound_refusal``);
3. tell the counting service it contributes to the round (``announce``), which decrypts the
   round only if the coordinator names exactly the announced contributors;
4. encrypt each field packed under the key (fresh randomness per ciphertext) and answer.

Any failed check is a refusal whose reason the coordinator shows.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from phe.paillier import PaillierPublicKey

from fedclust.core.errors import ProtocolError, RefusedError
from fedclust.crypto.fixedpoint import BoundError
from fedclust.crypto.paillier import SlotSpec, encrypt_vector
from fedclust.participant import dispatch
from fedclust.participant.local import LocalParticipant
from fedclust.protocol.wire import messages as msg
from fedclust.protocol.wire.secure import public_key_of

__all__ = ["PaillierSession"]


class PaillierSession:
    """One participant's Paillier sums within one job; feed it PaillierInputTask specs.

    Args:
        local: the participant's rows and policy (computes the statistics).
        participant_id: this participant's id in the federation.
        job_id: the job.
        announce: tells the counting service that this participant contributes to a round
            (the agent: ``POST /jobs/{id}/paillier/contributions``; the simulator:
            ``PaillierKeyHolder.record_contribution``); called before encrypting.
        expected_key: fetches the job's public key from the counting service itself; the
            key in each task must be that one. None trusts the task's key (tests only).
        min_cohort: the smallest ``max_parties`` this participant takes part in (>= 3).
        min_key_bits: the smallest modulus accepted (2048 by default).
        last_round: the latest round begun before (the agent's saved state): no older or
            equal round is answered again, across restarts too.
    """

    def __init__(
        self,
        local: LocalParticipant,
        *,
        participant_id: str,
        job_id: str,
        announce: Callable[[int], None],
        expected_key: Callable[[], msg.PaillierKey] | None = None,
        min_cohort: int = 3,
        min_key_bits: int = 2048,
        last_round: int = 0,
    ) -> None:
        if min_cohort < 3:
            raise ValueError("min_cohort must be at least 3.")
        self._local = local
        self._id = participant_id
        self._job = job_id
        self._announce = announce
        self._expected_key = expected_key
        self._pinned: msg.PaillierKey | None = None
        self._min_cohort = min_cohort
        self._min_key_bits = min_key_bits
        self._last_round = last_round
        self._answered: tuple[msg.PaillierInputTask, msg.PaillierInputReply] | None = None
        self._lock = threading.Lock()

    @property
    def job_id(self) -> str:
        return self._job

    @property
    def last_round(self) -> int:
        """The latest round answered (or begun) in this job; 0 before the first."""
        return self._last_round

    def handle(self, spec: msg.TaskSpec) -> msg.Reply:
        """The encrypted answer to one PaillierInputTask, or a refusal saying why."""
        with self._lock:
            try:
                if not isinstance(spec, msg.PaillierInputTask):
                    raise RefusedError(f"{spec.kind!r} is not a Paillier input task.")
                return self._input(spec)
            except RefusedError as exc:
                return msg.RefusalReply(reason=str(exc))
            except BoundError as exc:
                return dispatch.over_bound_refusal(exc, participant=self._id, job=self._job)
            except (ProtocolError, ValueError) as exc:
                return msg.RefusalReply(reason=f"Paillier sum refused: {exc}")

    def _key(self, spec: msg.PaillierInputTask) -> PaillierPublicKey:
        try:
            public_key = public_key_of(spec.public_key)
        except ProtocolError as exc:
            raise RefusedError(f"{exc} Refused.") from None
        bits = int(public_key.n).bit_length()
        if bits < self._min_key_bits:
            raise RefusedError(
                f"the Paillier key has a {bits}-bit modulus; at least {self._min_key_bits} "
                "bits are required: refused."
            )
        if self._expected_key is not None:
            if self._pinned is None:
                try:
                    self._pinned = self._expected_key()
                except Exception as exc:  # the counting service's client may raise anything
                    raise RefusedError(
                        "could not fetch the job's Paillier key from the counting service "
                        f"({type(exc).__name__}: {exc}): refused."
                    ) from None
            if spec.public_key != self._pinned:
                raise RefusedError(
                    "the Paillier key in the task is not the job's key at the counting service "
                    "(a substituted key?): refused."
                )
        return public_key

    def _input(self, spec: msg.PaillierInputTask) -> msg.Reply:
        if self._answered is not None and self._answered[0] == spec:
            return self._answered[1]
        if spec.round <= self._last_round:
            raise RefusedError(
                f"Paillier sum round {spec.round} of job {self._job!r} is not newer than "
                f"round {self._last_round}, already answered: refused as a replay."
            )
        if spec.max_parties < self._min_cohort:
            raise RefusedError(
                f"a Paillier sum for at most {spec.max_parties} parties is below this "
                f"participant's minimum cohort of {self._min_cohort}: refused."
            )
        public_key = self._key(spec)
        fields = dispatch.encoded_fields(self._local, spec.statistic, spec.encoding)
        slots = {
            name: SlotSpec(name, e.scale_bits, e.bound, spec.max_parties)
            for name, (_, e) in fields.items()
        }
        for name, (value, _) in fields.items():
            slots[name].encode(value)  # the bound check, before announcing (BoundError)
        self._last_round = spec.round
        try:
            self._announce(spec.round)
        except Exception as exc:  # HTTP client or in-process key holder: any failure refuses
            raise RefusedError(
                f"could not announce the contribution to Paillier round {spec.round} to the "
                f"counting service ({type(exc).__name__}: {exc}): refused."
            ) from None
        reply = msg.PaillierInputReply(
            vectors={
                name: msg.EncryptedField.model_validate(
                    encrypt_vector(public_key, value, slots[name]).to_dict()
                )
                for name, (value, _) in fields.items()
            }
        )
        self._answered = (spec, reply)
        return reply
