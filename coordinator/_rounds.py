"""What every round driver shares: the initial centers and gathering one round's answers.

Gathering is the one place a coordinator talks to participants, so the in-process simulator
and the network service differ only in the participant objects handed to it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol, TypeVar, cast

import numpy as np
from numpy.typing import ArrayLike

from fedclust.coordinator.remote import RemoteParticipant, RoundChannel, TaskChannel
from fedclust.coordinator.result import FederatedResult, RoundRecord, StopReason
from fedclust.core.errors import ProtocolError, RefusedError, UnavailableError
from fedclust.core.validation import FloatArray, check_centers
from fedclust.protocol.maths.release_guard import release_would_expose
from fedclust.protocol.wire import messages as msg

#: Fewest distinct participants whose sum can hide each member's contribution (a group sum of
#: FedCRef or fed-distill with fewer members is formed in the clear and noted; a job that
#: loses participants goes on only with at least this many left: :func:`require_cohort`).
MIN_PROTECTED_MEMBERS = 3


class Named(Protocol):
    """A participant as the round machinery sees it."""

    @property
    def name(self) -> str: ...


class Answering(Named, Protocol):
    """A participant that answers any task (``SummedParticipant`` of the summations)."""

    def answer(self, spec: msg.TaskSpec) -> msg.Reply: ...


P = TypeVar("P", bound=Named)
A = TypeVar("A", bound=Answering)
T = TypeVar("T")


def dropped(participant: object) -> str | None:
    """Why ``participant`` left the job (a remote one that did not answer in time), or None."""
    reason = getattr(participant, "dropped", None)
    return reason if isinstance(reason, str) else None


def dropout_note(name: str, during: str, reason: str) -> str:
    """The result's note on a participant that dropped out ``during`` a stage."""
    return f"participant {name!r} dropped out {during} ({reason}); the job went on without it"


def present(participants: Sequence[P]) -> list[P]:
    """The participants that have not dropped out of the job."""
    return [p for p in participants if dropped(p) is None]


def require_cohort(participants: Sequence[P], minimum: int = MIN_PROTECTED_MEMBERS) -> list[P]:
    """The participants present; after dropouts, at least ``minimum`` of them.

    Raises:
        RefusedError: participants dropped out and fewer than ``minimum`` are left (one line
            naming who dropped out).
    """
    live = present(participants)
    if len(live) < len(participants) and len(live) < minimum:
        gone = ", ".join(repr(p.name) for p in participants if dropped(p) is not None)
        raise RefusedError(
            f"only {len(live)} participant(s) left after {gone} dropped out; a job goes on "
            f"after dropouts only with at least {minimum} participants"
        )
    return live


class ReleasedCohorts:
    """The cohorts over which a job released protected statistics to the coordinator: the
    count total's, and every secure sum's contributors.

    A statistic over ``cohort`` is admitted only when, with those released before, it makes
    no nonzero combination of fewer than ``min_cohort`` participants' statistics derivable
    (:func:`protocol.maths.release_guard.release_would_expose`): after a dropout, a sum over those
    left, beside one over everyone, would give the dropped participant's statistics (its
    FedFuzzDB memberships add up to its N_l) by difference. The participants and the counting
    service enforce the same rule against a coordinator that does not; this is the honest
    coordinator stopping first, with one line saying why.
    """

    def __init__(self, min_cohort: int = MIN_PROTECTED_MEMBERS) -> None:
        self._min = min_cohort
        self._released: set[frozenset[str]] = set()

    def admit(self, cohort: Collection[str], what: str) -> None:
        """Record a release of ``what`` over ``cohort``, or raise RefusedError (:meth:`check`)."""
        self.check(cohort, what)
        self._released.add(frozenset(cohort))

    def check(self, cohort: Collection[str], what: str) -> None:
        """Raise RefusedError (one line naming the participants it would expose, public ids
        only) unless a release of ``what`` over ``cohort`` is safe; records nothing (a sum
        begun over a cohort is released over those of it that answer)."""
        members = frozenset(cohort)
        if members in self._released:
            return
        exposed = release_would_expose(self._released, members, self._min)
        if exposed is not None:
            raise RefusedError(
                f"the {what} over the {len(members)} participants left would reveal the "
                f"statistics of {', '.join(repr(p) for p in exposed)} by difference with what "
                f"was released over more participants before (fewer than {self._min} apart); "
                "the job stops here, and nothing over those left is released"
            )


def resolve_init(
    init: ArrayLike | None, k: int, n_features: int, rng: np.random.Generator | None
) -> FloatArray:
    """Validated (K, D) initial centers; None draws them uniformly in [0, 1]^D from ``rng``
    (which only a None ``init`` needs).

    The uniform unit-cube start is the authors' (Stallmann & Wilbik; Corcuera Bárcena et al.):
    it assumes data scaled to [0, 1]. The K sweep passes centers drawn from the federation's
    moments instead (``coordinator.sweep.initial_centers``).
    """
    if init is None:
        if rng is None:
            raise ValueError("resolve_init draws the initial centers from rng; give one.")
        return rng.uniform(0.0, 1.0, size=(k, n_features))
    centers = check_centers(init, n_features=n_features, name="init")
    if centers.shape[0] != k:
        raise ValueError(f"init must have k={k} rows; got shape {centers.shape}.")
    return centers


class RoundLog:
    """The rounds of one run, each also passed to an optional observer as it completes."""

    def __init__(self, on_round: Callable[[RoundRecord], None] | None = None) -> None:
        self.records: list[RoundRecord] = []
        self._on_round = on_round

    def add(self, record: RoundRecord) -> None:
        """Record a finished round and tell the observer."""
        self.records.append(record)
        if self._on_round is not None:
            self._on_round(record)


def add_contributions(
    parts: Sequence[tuple[str, Mapping[str, ArrayLike]]],
) -> dict[str, FloatArray]:
    """The element-wise sum of the participants' named arrays, ``(name, arrays)`` in order;
    every participant must give the same names and shapes (else ProtocolError naming it)."""
    total: dict[str, FloatArray] = {}
    for name, part in parts:
        if total and set(part) != set(total):
            raise ProtocolError(
                f"participant {name!r} returned keys {sorted(part)}; expected {sorted(total)}."
            )
        for key, value in part.items():
            arr = np.asarray(value, dtype=np.float64)
            if key not in total:
                total[key] = arr.copy()
            elif total[key].shape != arr.shape:
                raise ProtocolError(
                    f"participant {name!r} returned {key!r} of shape {arr.shape}; expected "
                    f"{total[key].shape}."
                )
            else:
                total[key] = total[key] + arr
    return total


def iterate_centers(
    centers: FloatArray,
    step: Callable[[int, FloatArray], tuple[FloatArray, tuple[str, ...]]],
    *,
    max_rounds: int,
    eps: float,
    on_round: Callable[[RoundRecord], None] | None = None,
) -> FederatedResult:
    """The round loop of an algorithm that moves its centers once a round: round r's
    ``step(r, C)`` gives the new centers and who answered; the run stops once the centers
    move less than ``eps`` (Frobenius norm: "converged") or after ``max_rounds``."""
    log = RoundLog(on_round)
    stop: StopReason = "max_rounds"
    for round_number in range(1, max_rounds + 1):
        new_centers, names = step(round_number, centers)
        shift = float(np.linalg.norm(new_centers - centers))
        centers = new_centers
        log.add(RoundRecord(round=round_number, shift=shift, responders=names))
        if shift < eps:
            stop = "converged"
            break
    return FederatedResult(
        centers=centers, n_rounds=len(log.records), stop_reason=stop,
        history=tuple(log.records),
    )


class Gatherer:
    """Collects one round's answers, asking every participant at once.

    A participant that raises :class:`RefusedError` (its policy or a privacy rule) is left
    out of that round and its first refusal is recorded in :attr:`notes`; a round in which
    every participant refuses fails with ``RefusedError``. A participant that does not
    answer in time (:class:`UnavailableError`) has dropped out: it is left out of this and
    every later round (not asked again), noted once. With ``required=True`` (rounds whose
    result would be wrong without everyone: the declarations, the validation sums) any
    refusal or dropout fails the round, naming the participant; with ``refusals_fail=True``
    (stages that go on without a participant that left the job, but not with one that stays
    in it without its answer: counting, standardisation, the local K) a refusal does.

    :meth:`gather_replies` sends each participant its task (:func:`answer_each`: remote
    participants in one wait for the round).
    """

    def __init__(self) -> None:
        self.notes: list[str] = []
        self._refused: set[str] = set()
        self._gone: set[str] = set()

    def _note_dropout(self, name: str, reason: str) -> None:
        if name not in self._gone:
            self._gone.add(name)
            self.notes.append(
                f"participant {name!r} dropped out ({reason}); left out of the later rounds"
            )

    def gather_replies(
        self,
        round_number: int,
        participants: Sequence[A],
        spec_for: Callable[[int, A], msg.TaskSpec],
        check: Callable[[A, msg.Reply], T],
        *,
        required: bool = False,
        refusals_fail: bool = False,
        concurrent: bool = False,
    ) -> tuple[list[T], tuple[str, ...]]:
        """Send each participant (with its index) its task; return the replies, each passed
        through ``check`` (which may raise ProtocolError: the first in order is raised), and
        who gave them. ``concurrent`` as in :func:`answer_each`."""
        asked = self._to_ask(participants, required)
        outcomes = answer_each([(p, spec_for(i, p)) for i, p in asked], concurrent=concurrent)
        return self._sort(
            round_number, asked,
            [o if isinstance(o, Exception) else check(p, o)
             for (_, p), o in zip(asked, outcomes, strict=True)],
            required=required, refusals_fail=refusals_fail,
        )

    def _to_ask(self, participants: Sequence[P], required: bool) -> list[tuple[int, P]]:
        """(index, participant) of those to ask: without the dropped ones (noted), unless
        ``required``."""
        asked = list(enumerate(participants))  # each keeps its index (e.g. for its seed)
        if not required:
            for _, participant in asked:
                reason = dropped(participant)
                if reason is not None:
                    self._note_dropout(participant.name, reason)
            asked = [(i, p) for i, p in asked if dropped(p) is None]
        return asked

    def _sort(
        self,
        round_number: int,
        asked: Sequence[tuple[int, P]],
        outcomes: Sequence[T | RefusedError | UnavailableError],
        *,
        required: bool,
        refusals_fail: bool,
    ) -> tuple[list[T], tuple[str, ...]]:
        """The answers among ``outcomes`` and who gave them; refusals and dropouts noted or
        raised (see the class doc)."""
        answers: list[T] = []
        names: list[str] = []
        last: RefusedError | UnavailableError | None = None
        for (_, participant), outcome in zip(asked, outcomes, strict=True):
            if isinstance(outcome, UnavailableError):
                if required:
                    raise outcome
                last = outcome
                self._note_dropout(participant.name, str(outcome))
                continue
            if isinstance(outcome, RefusedError):
                if required or refusals_fail:
                    raise RefusedError(f"participant {participant.name!r} refused: {outcome}")
                last = outcome
                if participant.name not in self._refused:
                    self._refused.add(participant.name)
                    self.notes.append(f"participant {participant.name!r} refused: {outcome}")
                continue
            answers.append(outcome)
            names.append(participant.name)
        if not answers and (last is not None or self._gone):
            where = f"round {round_number}: " if round_number else ""
            if isinstance(last, RefusedError):
                raise RefusedError(
                    f"{where}every participant asked refused; last reason: {last}"
                )
            raise UnavailableError(
                f"{where}every participant has dropped out"
                + (f" (the last: {last})" if last is not None else "")
            )
        return answers, tuple(names)


R = TypeVar("R")


def gather_present(
    participants: Sequence[A],
    spec_for: Callable[[int, A], msg.TaskSpec],
    reply_type: type[R],
) -> tuple[list[R], tuple[str, ...]]:
    """The replies (of type ``reply_type``) of the participants present to their tasks
    (``spec_for(index, participant)``, the index among those present) and who gave them:
    one that does not answer drops out of the job, any refusal fails (``refusals_fail``,
    see :class:`Gatherer`)."""
    return _gather_each(present(participants), spec_for, reply_type, refusals_fail=True)


def gather_required(
    participants: Sequence[A],
    spec_for: Callable[[int, A], msg.TaskSpec],
    reply_type: type[R],
    *,
    concurrent: bool = False,
) -> list[R]:
    """Every participant's reply (of type ``reply_type``) to its task (``spec_for(index,
    participant)``), in order; any refusal or dropout fails (``required``, see
    :class:`Gatherer`). ``concurrent`` as in :func:`answer_each`."""
    replies, _ = _gather_each(
        participants, spec_for, reply_type, required=True, concurrent=concurrent
    )
    return replies


def _gather_each(
    participants: Sequence[A],
    spec_for: Callable[[int, A], msg.TaskSpec],
    reply_type: type[R],
    **flags: bool,
) -> tuple[list[R], tuple[str, ...]]:
    """:meth:`Gatherer.gather_replies` of each participant's task ``spec_for(index,
    participant)``, built once, under ``flags``; nothing to ask: nothing."""
    specs = [spec_for(i, p) for i, p in enumerate(participants)]
    if not specs:
        return [], ()
    return Gatherer().gather_replies(
        0, participants, lambda i, _: specs[i], expect(specs[0], reply_type), **flags
    )


def expect(spec: msg.TaskSpec, reply_type: type[R]) -> Callable[[Named, msg.Reply], R]:
    """The check of :meth:`Gatherer.gather_replies` for replies to ``spec`` that must be of
    type ``reply_type`` (another kind is a ProtocolError naming the participant)."""

    def check(participant: Named, reply: msg.Reply) -> R:
        if not isinstance(reply, reply_type):
            raise ProtocolError(
                f"participant {participant.name!r} answered a {msg.task_name(spec)!r} task with a "
                f"{reply.kind!r} reply."
            )
        return reply

    return check


def answer_each(
    asked: Sequence[tuple[A, msg.TaskSpec]], *, concurrent: bool = False
) -> list[msg.Reply | RefusedError | UnavailableError]:
    """Each participant's reply to its task (``answer``), refusals and dropouts returned, not
    raised. Remote participants whose channel delivers a round at once (the broker's) are
    asked through it, one wait for all of them
    (:meth:`~coordinator.remote.RemoteParticipant.answer_round`); any others one after
    another (in-process participants: nothing to wait on, one GIL; 3.5x faster than a thread
    each for the simulator's plain FCM round at 30 participants, ``docs/benchmarks.md``), or
    each in its own thread when ``concurrent`` (fed-distill's and FedCRef's stages: their
    in-process models train outside the GIL)."""
    outcomes: dict[int, msg.Reply | RefusedError | UnavailableError] = {}
    channels: dict[int, tuple[TaskChannel, list[int]]] = {}
    for i, (participant, _) in enumerate(asked):
        if isinstance(participant, RemoteParticipant):
            channels.setdefault(id(participant.channel), (participant.channel, []))[1].append(i)
    for channel, indices in channels.values():
        if isinstance(channel, RoundChannel):  # once per channel: a protocol's check is slow
            remote = [(cast(RemoteParticipant, asked[i][0]), asked[i][1]) for i in indices]
            outcomes.update(
                zip(indices, RemoteParticipant.answer_round(channel, remote), strict=True)
            )
    rest = [(i, asked[i]) for i in range(len(asked)) if i not in outcomes]
    answers = _ask_all(
        [(i, p) for i, (p, _) in rest], lambda i, p: p.answer(asked[i][1]),
        concurrent=concurrent,
    )
    outcomes.update(zip((i for i, _ in rest), answers, strict=True))
    return [outcomes[i] for i in range(len(asked))]


def _ask_all(
    participants: Sequence[tuple[int, P]], ask: Callable[[int, P], T], *, concurrent: bool
) -> list[T | RefusedError | UnavailableError]:
    """Call ``ask`` for every (index, participant), concurrently (one thread each) unless
    not ``concurrent``; refusals and dropouts are returned, not raised."""

    def one(index: int, participant: P) -> T | RefusedError | UnavailableError:
        try:
            return ask(index, participant)
        except (RefusedError, UnavailableError) as exc:
            return exc

    if len(participants) <= 1 or not concurrent:
        return [one(i, p) for i, p in participants]
    with ThreadPoolExecutor(max_workers=min(len(participants), 64)) as pool:
        futures = [pool.submit(one, i, p) for i, p in participants]
        return [f.result() for f in futures]
