"""Answer one wire task with the participant's local computations.

The agent receives :class:`protocol.wire.messages.Task` objects; :func:`execute` checks the
participant's policy, runs the matching :class:`~participant.local.LocalParticipant`
method and wraps the result in its reply model. A refusal (policy, privacy rule) becomes a
:class:`~protocol.wire.messages.RefusalReply` carrying the reason.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Final, Protocol

from fedclust.core.errors import RefusedError
from fedclust.core.validation import FloatArray
from fedclust.crypto.fixedpoint import BoundError
from fedclust.participant.local import LocalParticipant
from fedclust.protocol.wire import messages as msg

log = logging.getLogger("fedclust.participant")

#: The reason of a fatal refusal (:func:`over_bound_refusal`): no number, no field.
OVER_BOUND_REASON: Final = (
    "a value this participant computed exceeds the bound the job derived from the declared "
    "bounds: its declaration ([policy] row_bound, value_bound) does not hold for what it "
    "computes, and the job cannot go on (details in the participant's log)."
)

_SECURE_STAGES = (
    msg.SecureSetupTask, msg.SecureGraphTask, msg.SecureInputTask, msg.SecureUnmaskTask,
    msg.PaillierInputTask,
)


class StageHandler(Protocol):
    """Answers the stages of secure sums (``participant.secure.SecureSession``,
    ``participant.paillier_input.PaillierSession``)."""

    def handle(self, spec: msg.TaskSpec) -> msg.Reply: ...


class SecureStages:
    """Routes masking stages to one session and Paillier inputs to another."""

    def __init__(self, masking: StageHandler | None, paillier: StageHandler | None) -> None:
        self._masking = masking
        self._paillier = paillier

    def handle(self, spec: msg.TaskSpec) -> msg.Reply:
        handler = self._paillier if isinstance(spec, msg.PaillierInputTask) else self._masking
        if handler is None:
            return msg.RefusalReply(reason=f"this participant takes no part in {spec.kind!r}.")
        return handler.handle(spec)


def execute(
    local: LocalParticipant, task: msg.Task, secure: StageHandler | None = None
) -> msg.Reply:
    """The reply of ``local`` to ``task`` (a refusal when its policy forbids it).

    Secure-sum stages go to ``secure``; without one they are refused.
    """
    try:
        local.policy.require(task.algorithm)
    except RefusedError as exc:
        return msg.RefusalReply(reason=str(exc))
    if isinstance(task.spec, _SECURE_STAGES):
        if secure is None:
            return msg.RefusalReply(reason="this participant takes part in no secure sums.")
        return secure.handle(task.spec)
    return answer(local, task.spec)


def encoded_fields(
    local: LocalParticipant, statistic: msg.SumTaskSpec, encoding: Sequence[msg.FieldEncoding]
) -> dict[str, tuple[FloatArray, msg.FieldEncoding]]:
    """Each summed field of ``statistic`` on the local rows with its declared encoding.

    The computation of a protected sum (masked or Paillier); a refusal of the computation,
    or an encoding that does not name exactly the statistic's fields, raises RefusedError.
    """
    reply = answer(local, statistic)
    if isinstance(reply, msg.RefusalReply):
        raise RefusedError(reply.reason)
    fields = msg.summands(reply)
    declared = {e.name: e for e in encoding}
    if set(declared) != set(fields) or len(declared) != len(encoding):
        raise RefusedError(
            f"the declared encoding names {sorted(declared)}, but a {msg.task_name(statistic)!r} "
            f"statistic has the fields {sorted(fields)}: refused."
        )
    return {name: (value, declared[name]) for name, value in fields.items()}


def over_bound_refusal(exc: BoundError, *, participant: str, job: str) -> msg.RefusalReply:
    """The fatal refusal of a protected sum whose value exceeded its declared bound.

    Only this participant's log learns which field, how many values and by how much; the
    coordinator gets :data:`OVER_BOUND_REASON`, the same text whatever the data, and fails
    the job (a dropout instead would tell it which participant's data broke the bound).
    """
    log.error(
        "job %s: participant %s: %d value(s) of field %r exceed the declared bound %r "
        "(largest magnitude %.6g); check its [policy] row_bound and value_bound",
        job, participant, exc.over, exc.statistic, exc.bound, exc.largest,
    )
    return msg.RefusalReply(reason=OVER_BOUND_REASON, fatal=True)


def answer(local: LocalParticipant, spec: msg.TaskSpec) -> msg.Reply:
    """The reply of ``local`` to one computation (policy of the job already checked)."""
    try:
        return local.answer(spec)
    except RefusedError as exc:
        return msg.RefusalReply(reason=str(exc))
