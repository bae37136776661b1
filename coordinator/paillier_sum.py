"""Secure sums by Paillier encryption: the coordinator adds ciphertexts it cannot read.

One stage per sum. The coordinator sends every participant a
:class:`protocol.wire.messages.PaillierInputTask` (the statistic, its fixed-point encoding from
:func:`coordinator.secure_sum.field_encodings` with ``n_parties = max_parties`` = the cohort
size, and the job's public key); each participant tells the key holder (the counting service)
that it contributes to the round, then answers its fields packed and encrypted
(``crypto.paillier``). The coordinator checks each answer, multiplies the ciphertexts per
field (``E(a)·E(b) = E(a + b)``) and asks the key holder to decrypt the aggregate, naming the
participants that answered; the key holder decrypts only if they are exactly those that
announced a contribution, at least the minimum cohort, and only once per round
(:mod:`counting.keyholder`). The coordinator never holds the private key; the key holder never
sees an individual ciphertext. Assumption: the coordinator and the counting service do not
collude.

Error bound per decoded sum of n contributions: n·2^-(f+1) (``SlotSpec.error_bound``), f the
field's ``scale_bits``, plus one float64 rounding.

Dropouts: a participant that refuses or does not answer is left out (noted), unless
``required=True``; one that announced a contribution but whose answer never arrived makes the
key holder refuse the round (the contributors differ), and the sum fails saying why.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from phe.paillier import PaillierPublicKey

from fedclust.coordinator.secure_sum import CohortSums, total_reply
from fedclust.core.errors import ProtocolError, RefusedError
from fedclust.crypto.paillier import EncryptedVector, SlotSpec, add
from fedclust.protocol.wire import messages as msg
from fedclust.protocol.wire.secure import public_key_of

__all__ = ["JobKeyHolder", "KeyHolder", "PaillierSummation"]

R = TypeVar("R")


class KeyHolder(Protocol):
    """The key holder of one job as the coordinator sees it: public key and decryption only."""

    def public_key(self) -> msg.PaillierKey: ...

    def decrypt(self, request: msg.PaillierDecryptRequest) -> msg.PaillierDecryption:
        """The decoded sums; raise RefusedError when the decryption rule refuses."""
        ...


@dataclass(frozen=True)
class JobKeyHolder:
    """A :class:`KeyHolder` bound to ``job_id`` from two callables.

    Network: ``JobKeyHolder(job, client.paillier_key, client.paillier_decrypt)`` with a
    :class:`coordinator.counting_client.CountingClient`; in process:
    ``JobKeyHolder(job, holder.public_key, holder.decrypt)`` with a
    :class:`counting.keyholder.PaillierKeyHolder`.
    """

    job_id: str
    fetch_key: Callable[[str], msg.PaillierKey]
    request_decryption: Callable[[msg.PaillierDecryptRequest], msg.PaillierDecryption]

    def public_key(self) -> msg.PaillierKey:
        return self.fetch_key(self.job_id)

    def decrypt(self, request: msg.PaillierDecryptRequest) -> msg.PaillierDecryption:
        return self.request_decryption(request)


class PaillierSummation(CohortSums):
    """Secure sums of one job under Paillier; one instance per job run.

    Args:
        job_id: the job (its key pair at the key holder is per job).
        key_holder: the job's public key and the decryption of aggregates.
        max_rows: bound on any participant's number of rows (or later: ``set_bounds``).
        value_bound: bound on |x| for every value the algorithms see (likewise).
        min_cohort: the fewest contributions a sum may have (>= 3).
        concurrent: ask the participants at once (see ``CohortSums``).
    """

    def __init__(
        self,
        job_id: str,
        key_holder: KeyHolder,
        *,
        max_rows: int | None = None,
        value_bound: float | None = None,
        min_cohort: int = 3,
        concurrent: bool = True,
    ) -> None:
        super().__init__(
            job_id, max_rows=max_rows, value_bound=value_bound, min_cohort=min_cohort,
            concurrent=concurrent,
        )
        self._key_holder = key_holder
        self._key: tuple[msg.PaillierKey, PaillierPublicKey] | None = None

    def _public_key(self) -> tuple[msg.PaillierKey, PaillierPublicKey]:
        if self._key is None:
            wire = self._key_holder.public_key()
            self._key = (wire, public_key_of(wire))
        return self._key

    def sum(
        self,
        participants: Sequence[Any],
        statistic: msg.SumTaskSpec,
        reply_type: type[R],
        *,
        required: bool = False,
    ) -> tuple[R, tuple[str, ...]]:
        """Run one Paillier sum of ``statistic`` over ``participants`` (module docstring)."""
        by_name, cohort, n_features, encoding = self._begin(participants, statistic, required)
        r = self._round
        wire_key, public_key = self._public_key()
        specs = {
            e.name: SlotSpec(e.name, e.scale_bits, e.bound, len(cohort)) for e in encoding
        }
        shapes = msg.sum_fields(statistic, n_features)
        task = msg.PaillierInputTask(
            round=r, statistic=statistic, encoding=encoding, public_key=wire_key,
            max_parties=len(cohort),
        )
        replies = self._stage(
            by_name, cohort, required, f"Paillier input of sum {r} ({msg.task_name(statistic)})",
            lambda _: task, msg.PaillierInputReply,
        )
        if len(replies) < self._min_cohort:
            raise RefusedError(
                f"Paillier sum {r} ({msg.task_name(statistic)}): only {len(replies)} of "
                f"{len(cohort)} participants contributed ({', '.join(sorted(replies)) or 'none'}); "
                f"the minimum cohort is {self._min_cohort}."
            )
        received: dict[str, list[EncryptedVector]] = {name: [] for name in specs}
        for name, reply in replies.items():
            for field, vector in self._check(name, reply, public_key, specs, shapes).items():
                received[field].append(vector)
        contributors = sorted(replies)
        self.cohorts.admit(contributors, f"{msg.task_name(statistic)!r} sum")  # decrypted over them
        request = msg.PaillierDecryptRequest(
            job_id=self._job, round=r, contributors=contributors,
            vectors={
                field: msg.EncryptedField.model_validate(add(vectors).to_dict())
                for field, vectors in received.items()
            },
        )
        decryption = self._key_holder.decrypt(request)
        if (
            decryption.job_id != self._job
            or decryption.round != r
            or set(decryption.sums) != set(specs)
        ):
            raise ProtocolError(
                f"the key holder answered Paillier sum {r} with another job, round or fields."
            )
        decoded = {}
        for field, array in decryption.sums.items():
            values = array.to_numpy()
            if array.dtype != "float64" or values.shape != shapes[field]:
                raise ProtocolError(
                    f"the key holder's sum of field {field!r} is not float64 of shape "
                    f"{shapes[field]}."
                )
            decoded[field] = values
        return total_reply(statistic, decoded, reply_type), tuple(contributors)

    def _check(
        self,
        name: str,
        reply: msg.PaillierInputReply,
        public_key: PaillierPublicKey,
        specs: Mapping[str, SlotSpec],
        shapes: Mapping[str, tuple[int, ...]],
    ) -> dict[str, EncryptedVector]:
        """One participant's encrypted fields, parsed; ProtocolError naming it if malformed."""
        if set(reply.vectors) != set(specs):
            raise ProtocolError(
                f"participant {name!r}: a Paillier answer must carry the fields "
                f"{sorted(specs)}; got {sorted(reply.vectors)}."
            )
        out = {}
        for field, encrypted in reply.vectors.items():
            try:
                vector = EncryptedVector.from_dict(encrypted.model_dump(), public_key)
            except (ProtocolError, ValueError) as exc:
                raise ProtocolError(f"participant {name!r}, field {field!r}: {exc}") from None
            if vector.spec != specs[field] or vector.shape != shapes[field]:
                raise ProtocolError(
                    f"participant {name!r}: field {field!r} must be encoded as declared, of "
                    f"shape {shapes[field]}; got shape {vector.shape}."
                )
            if vector.n_contributions != 1:
                raise ProtocolError(
                    f"participant {name!r}: field {field!r} claims "
                    f"{vector.n_contributions} contributions; one is expected."
                )
            out[field] = vector
        return out
