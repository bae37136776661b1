"""A participant seen from the coordinator over the wire: it answers tasks as a local one does.

:class:`RemoteParticipant` sends each task (``answer``, or ``ask`` for a reply of a given
type) through a :class:`TaskChannel`, so every driver in ``coordinator`` runs unchanged over
the network; :meth:`RemoteParticipant.answer_round` sends a round's tasks through a
:class:`RoundChannel` at once, for one waiting thread. A refusal reply becomes
:class:`~core.errors.RefusedError` (a fatal one, or a reply of the wrong kind or shape, a
:class:`~core.errors.ProtocolError`: the job cannot go on).

A participant that does not answer a task in time has dropped out of the job: ``dropped``
says why, and every later task to it fails at once with
:class:`~core.errors.UnavailableError` instead of waiting out another timeout, so the
round drivers leave it out (``coordinator._rounds.present``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar, runtime_checkable

from fedclust.core.errors import ProtocolError, RefusedError, UnavailableError
from fedclust.protocol.wire import messages as msg

R = TypeVar("R")


class TaskChannel(Protocol):
    """Delivers one task to one participant and returns its reply (blocking)."""

    def ask(self, participant: str, spec: msg.TaskSpec) -> msg.Reply: ...


@runtime_checkable
class RoundChannel(TaskChannel, Protocol):
    """A channel that also delivers a round's tasks at once and waits for them in the
    calling thread (the broker's ``JobChannel``): each reply, or the UnavailableError of a
    participant that did not answer in time."""

    def ask_many(
        self, asked: Sequence[tuple[str, msg.TaskSpec]]
    ) -> Sequence[msg.Reply | UnavailableError]: ...


class RemoteParticipant:
    """A participant reached through ``channel``; ``n_features`` comes from its enrolment."""

    def __init__(self, name: str, *, channel: TaskChannel, n_features: int) -> None:
        self.name = name
        self.n_features = n_features
        self.channel = channel
        self.dropped: str | None = None  # why it left the job (a task not answered in time)

    def _gone(self) -> UnavailableError:
        return UnavailableError(
            f"participant {self.name!r} dropped out of this job earlier ({self.dropped})"
        )

    def _send(self, spec: msg.TaskSpec) -> msg.Reply:
        if self.dropped is not None:
            raise self._gone()
        try:
            return self.channel.ask(self.name, spec)
        except UnavailableError as exc:
            self.dropped = str(exc)
            raise

    def ask(self, spec: msg.TaskSpec, expected: type[R]) -> R:
        """Send ``spec``; its reply if of type ``expected`` (a refusal raises RefusedError,
        another kind ProtocolError)."""
        reply = self._send(spec)
        if isinstance(reply, msg.RefusalReply):
            raise reply.error(self.name)
        if not isinstance(reply, expected):
            raise ProtocolError(
                f"participant {self.name!r} answered a {msg.task_name(spec)!r} task with a "
                f"{reply.kind!r} reply."
            )
        return reply

    @staticmethod
    def answer_round(
        channel: RoundChannel, asked: Sequence[tuple[RemoteParticipant, msg.TaskSpec]]
    ) -> list[msg.Reply | RefusedError | UnavailableError]:
        """:meth:`answer` of every (participant, spec), all reached through ``channel``,
        asked at once (one wait for the round): refusals and silence are returned, not
        raised; a fatal refusal (ProtocolError) is raised, the first in order, once every
        reply is in. A participant that dropped out earlier is not asked."""
        live = [i for i, (p, _) in enumerate(asked) if p.dropped is None]
        replies = channel.ask_many([(asked[i][0].name, asked[i][1]) for i in live])
        outcomes: list[msg.Reply | RefusedError | UnavailableError] = [
            p._gone() for p, _ in asked
        ]
        fatal: Exception | None = None
        for i, reply in zip(live, replies, strict=True):
            participant = asked[i][0]
            if isinstance(reply, UnavailableError):
                participant.dropped = str(reply)
                outcomes[i] = reply
            elif isinstance(reply, msg.RefusalReply):
                error = reply.error(participant.name)
                if isinstance(error, RefusedError):
                    outcomes[i] = error
                elif fatal is None:
                    fatal = error
            else:
                outcomes[i] = reply
        if fatal is not None:
            raise fatal
        return outcomes

    def answer(self, spec: msg.TaskSpec) -> msg.Reply:
        """The reply to one task, whatever its kind (a plain sum's statistic, a stage of a
        secure sum); a refusal raises RefusedError, silence UnavailableError."""
        reply = self._send(spec)
        if isinstance(reply, msg.RefusalReply):
            raise reply.error(self.name)
        return reply
