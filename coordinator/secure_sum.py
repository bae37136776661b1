"""The summations of the round drivers: every sum-type statistic is added by one of them.

A driver hands a sum-type statistic (``protocol.wire.messages.SumTaskSpec``) to a
:class:`Summation` and gets the total in the statistic's plain reply model, for the same
``protocol.combine_*`` functions whatever the protection: :class:`PlainSummation` adds the
participants' replies in the clear (protection "none"); :class:`MaskedSummation` runs SecAgg+
masking (``crypto.masking``) as tasks, so the coordinator learns Σ over participants, never
a term (Paillier: ``coordinator.paillier_sum``). Every protected field is encoded
(``crypto.fixedpoint``) under a bound from the job's N (``max_rows``) and B (``value_bound``;
``coordinator.declarations``), with f = 40 fractional bits and the fewest 64-bit words w with
n·bound·2^40 <= 2^(64w − 3); a bound beyond 16 words is refused. A decoded sum is within
n·2^-41 of the exact sum.

Dropouts of the masked-input stage are left out (the exact sum of the survivors), or fail the
sum with ``required=True``; too few survivors, a disconnected survivor graph, missing seed
shares or a silent survivor with a dropped neighbour raise ProtocolError.

Design notes: ``docs/secure-sums.md`` (§ The coordinator's secure sums: bounds per field).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal, Protocol, TypeVar, cast

import numpy as np
from numpy.typing import NDArray

from fedclust.coordinator._rounds import (
    Gatherer,
    ReleasedCohorts,
    answer_each,
    dropped,
    expect,
)
from fedclust.core.errors import ProtocolError, RefusedError, UnavailableError
from fedclust.crypto.fixedpoint import MAX_WORDS, WORD_BITS, Statistic, decode
from fedclust.crypto.graph import GraphParameters, graph_parameters
from fedclust.crypto.masking import JobConfig, MaskedInput, MaskingServer, UnmaskResponse
from fedclust.protocol.wire import messages as msg
from fedclust.protocol.wire.bounds import field_bounds
from fedclust.protocol.wire.secure import (
    b64,
    encrypted_share,
    raw,
    setup_job_id,
    signed_keys,
    to_key_advert,
)

__all__ = [
    "CohortSums", "JobSummation", "MaskedSummation", "PlainSummation", "Summation",
    "SummedParticipant",
    "field_encodings", "total_reply",
]

R = TypeVar("R")
#: Fractional bits of every summed field: the resolution 2^-40 of the precision guarantee.
SCALE_BITS = 40


class SummedParticipant(Protocol):
    """A participant as a summation sees it: it answers a task — a statistic in the clear,
    a stage of a masked or Paillier sum — with its reply (``participant.local.
    LocalParticipant.answer``, ``participant.secure.SecureMember``, ``RemoteParticipant``)."""

    name: str

    @property
    def n_features(self) -> int: ...

    def answer(self, spec: msg.TaskSpec) -> msg.Reply:
        """The reply; raise RefusedError on a refusal, UnavailableError on silence."""
        ...


class Summation(Protocol):
    """How a driver sums one statistic over participants: in the clear
    (:class:`PlainSummation`), masked (:class:`MaskedSummation`) or Paillier-encrypted
    (``coordinator.paillier_sum.PaillierSummation``); the drivers sum one way whatever the
    protection. ``notes`` say who was left out of which sum; ``cohorts`` are the cohorts a
    protected summation released statistics over (None in the clear: nothing to guard)."""

    notes: list[str]

    @property
    def protected(self) -> bool:
        """Whether the coordinator sees only aggregates (masked or encrypted sums)."""
        ...

    @property
    def cohorts(self) -> ReleasedCohorts | None: ...

    def sum(
        self,
        participants: Sequence[Any],
        statistic: msg.SumTaskSpec,
        reply_type: type[R],
        *,
        required: bool = False,
    ) -> tuple[R, tuple[str, ...]]:
        """The aggregate reply and the names of the participants it sums.

        Each participant must be a :class:`SummedParticipant`; the drivers' own participant
        protocols do not list ``answer``, so this accepts any.
        """
        ...


class PlainSummation:
    """Protection "none": each participant's statistic reaches the coordinator in the clear
    and is added here, in the participants' order.

    Not ``required``: a participant that does not answer drops out (left out of this and
    every later sum), one that refuses is left out of this sum, each noted once; a sum that
    nobody answers fails. ``required``: any refusal or dropout fails the sum
    (:class:`~coordinator._rounds.Gatherer`, whose messages these are).
    """

    protected = False
    cohorts: ReleasedCohorts | None = None

    def __init__(self) -> None:
        self._gatherer = Gatherer()
        self.notes: list[str] = self._gatherer.notes

    def sum(
        self,
        participants: Sequence[Any],
        statistic: msg.SumTaskSpec,
        reply_type: type[R],
        *,
        required: bool = False,
    ) -> tuple[R, tuple[str, ...]]:
        """The sum of the answers of ``participants`` and who gave them."""
        gatherer = Gatherer() if required else self._gatherer
        replies, names = gatherer.gather_replies(
            0, participants, lambda _, p: statistic,
            expect(statistic, reply_type),
            required=required,
        )
        total: dict[str, NDArray[np.float64]] = {}
        for reply in replies:
            for name, value in msg.summands(cast(msg.Reply, reply)).items():
                total[name] = total[name] + value if name in total else value
        return total_reply(statistic, total, reply_type), names


class JobSummation(Summation, Protocol):
    """A job's summation, whose bounds the job sets from the participants' declarations
    (``coordinator.declarations``) before its first sum."""

    def set_bounds(self, *, max_rows: int, value_bound: float) -> None:
        """The N and B of :func:`field_encodings` for the sums from now on."""
        ...


def field_encodings(
    statistic: msg.SumTaskSpec,
    *,
    n_features: int,
    n_parties: int,
    max_rows: int,
    value_bound: float,
) -> list[msg.FieldEncoding]:
    """The declared bound and scale of every summed field of ``statistic`` (module table:
    ``protocol.wire.bounds.field_bounds``, which every participant evaluates at its own declared
    bounds to refuse an encoding below what its values can need)."""
    bounds = field_bounds(
        statistic, n_features=n_features, max_rows=max_rows, value_bound=value_bound
    )
    out = []
    for name, bound in bounds.items():
        total = n_parties * Fraction(bound) * 2**SCALE_BITS
        words = next(
            (w for w in range(1, MAX_WORDS + 1) if total <= 2 ** (WORD_BITS * w - 3)), None
        )
        if words is None:
            raise ValueError(
                f"field {name!r} of {msg.task_name(statistic)!r}: n_parties · bound = "
                f"{n_parties * bound:.3g} exceeds the widest secure sum ({MAX_WORDS} words); "
                "lower the participants' declared row or value bounds, or the job's max_rows "
                "or value_bound where given."
            )
        out.append(
            msg.FieldEncoding(name=name, scale_bits=SCALE_BITS, bound=bound, words=words)
        )
    return out


def total_reply(
    statistic: msg.SumTaskSpec,
    decoded: dict[str, NDArray[np.float64]],
    reply_type: type[R],
) -> R:
    """The decoded sums in the plain reply model of ``statistic``."""
    total = msg.reply_of_sums(statistic, decoded)
    if not isinstance(total, reply_type):
        raise TypeError(f"a {msg.task_name(statistic)!r} sum is not a {reply_type.__name__}")
    return total


class CohortSums:
    """What every protected summation of a job shares: the declared bounds, the round counter,
    the notes and the asking of one stage (``MaskedSummation``, and
    ``coordinator.paillier_sum.PaillierSummation``).

    The bounds ``max_rows`` and ``value_bound`` are given at construction or later with
    :meth:`set_bounds` (``run_job`` derives them from the participants' declarations, and
    again for the standardised values); a sum before either is a ValueError.

    A stage's tasks go out at once (``coordinator._rounds.answer_each``): remote participants
    on the broker in one round, one waiting thread. ``concurrent``: ask any other
    participants one thread each; False asks them one after another, which is faster for
    in-process participants (the simulator: nothing to wait on, one GIL).
    """

    protected = True

    def __init__(
        self,
        job_id: str,
        *,
        max_rows: int | None = None,
        value_bound: float | None = None,
        min_cohort: int = 3,
        concurrent: bool = True,
    ) -> None:
        if min_cohort < 3:
            raise ValueError("min_cohort must be at least 3.")
        self._job = job_id
        self._bounds = (
            None if max_rows is None or value_bound is None else (max_rows, value_bound)
        )
        self._min_cohort = min_cohort
        self._round = 0
        #: Every cohort this job's protected statistics were released over (the sums', and
        #: the count total's: ``coordinator.standardise.PresentRows``).
        self.cohorts = ReleasedCohorts(min_cohort)
        self.notes: list[str] = []
        self._gone: set[str] = set()
        self._concurrent = concurrent

    @property
    def rounds(self) -> int:
        """Secure sums begun so far in this job."""
        return self._round

    def set_bounds(self, *, max_rows: int, value_bound: float) -> None:
        """The N and B of :func:`field_encodings` for the sums from now on."""
        if max_rows < 1 or not (math.isfinite(value_bound) and value_bound > 0):
            raise ValueError("max_rows must be >= 1 and value_bound a finite number > 0.")
        self._bounds = (max_rows, value_bound)

    def _begin(
        self, participants: Sequence[Any], statistic: msg.SumTaskSpec, required: bool
    ) -> tuple[dict[str, SummedParticipant], list[str], int, list[msg.FieldEncoding]]:
        """The cohort (refused below the minimum; without the participants that dropped
        out of the job, noted once), the features, the field encodings; counts the new
        round."""
        gone = sorted(p.name for p in participants if dropped(p) is not None)
        if gone and required:
            raise UnavailableError(
                f"participant(s) {', '.join(gone)} dropped out of the job, and every "
                "participant must join this sum"
            )
        for name in gone:
            if name not in self._gone:
                self._gone.add(name)
                self.notes.append(
                    f"participant {name!r} dropped out of the job; left out of the later sums"
                )
        by_name: dict[str, SummedParticipant] = {
            p.name: p for p in participants if p.name not in gone
        }
        cohort = sorted(by_name)
        if len(cohort) < self._min_cohort:
            raise RefusedError(
                f"a secure sum needs at least {self._min_cohort} participants; "
                f"{len(cohort)} would take part."
            )
        if self._bounds is None:
            raise ValueError("a secure sum needs the job's bounds first (set_bounds).")
        self.cohorts.check(cohort, f"{msg.task_name(statistic)!r} sum")
        n_features = participants[0].n_features
        max_rows, value_bound = self._bounds
        encoding = field_encodings(
            statistic, n_features=n_features, n_parties=len(cohort),
            max_rows=max_rows, value_bound=value_bound,
        )
        self._round += 1
        return by_name, cohort, n_features, encoding

    def _stage(
        self,
        by_name: Mapping[str, SummedParticipant],
        names: Sequence[str],
        required: bool,
        what: str,
        spec_for: Callable[[str], msg.TaskSpec],
        reply_type: type[R],
    ) -> dict[str, R]:
        """Ask ``names`` one stage at once; refusals and silence leave them out (noted)."""
        outcomes = answer_each(
            [(by_name[name], spec_for(name)) for name in names], concurrent=self._concurrent
        )
        answers: dict[str, R] = {}
        for name, outcome in zip(names, outcomes, strict=True):
            if isinstance(outcome, Exception):
                if required:
                    raise RefusedError(
                        f"participant {name!r} did not take part in the {what} of a secure "
                        f"sum every participant must join: {outcome}"
                    )
                self.notes.append(
                    f"participant {name!r} left a secure sum at the {what}: {outcome}"
                )
                continue
            if not isinstance(outcome, reply_type):
                raise ProtocolError(
                    f"participant {name!r} answered the {what} with a {outcome.kind!r} reply."
                )
            answers[name] = outcome
        return answers


@dataclass(frozen=True)
class _Setup:
    """One key setup of a job: its number, the roster asked, the server, who completed it."""

    number: int
    roster: frozenset[str]
    server: MaskingServer
    members: frozenset[str]
    parameters: GraphParameters


class MaskedSummation(CohortSums):
    """Secure sums of one job by SecAgg+ masking; one instance per job run.

    A sum whose cohort lies within the roster of an earlier key setup uses its keys;
    otherwise (the job's first sum, or a group of participants not set up together, as in
    fed-distill and FedCRef) a new setup is made among the cohort: ``secure_setup``, then
    ``secure_graph`` (every participant derives the masking graph from the signed adverts
    and the coordinator checks they all derived the one it did). Each sum then takes two
    stages, ``secure_input`` and ``secure_unmask`` (``crypto.masking``).

    Args:
        job_id: the job; binds every key and message of its sums.
        identities: the participants' registered Ed25519 public keys (raw bytes).
        max_rows: bound on any participant's number of rows (or later: ``set_bounds``).
        value_bound: bound on |x| for every value the algorithms see (likewise).
        min_cohort: the smallest cohort asked (the participants enforce their own too).
        concurrent: ask each stage's participants at once (see :class:`CohortSums`).
        graph: "auto" — the sparsest graph :func:`crypto.graph.graph_parameters` allows for
            the cohort (the complete graph for small cohorts); "full" — always the complete
            graph (Bonawitz et al.'s full mesh).
    """

    def __init__(
        self,
        job_id: str,
        identities: Mapping[str, bytes],
        *,
        max_rows: int | None = None,
        value_bound: float | None = None,
        min_cohort: int = 3,
        concurrent: bool = True,
        graph: Literal["auto", "full"] = "auto",
    ) -> None:
        super().__init__(
            job_id, max_rows=max_rows, value_bound=value_bound, min_cohort=min_cohort,
            concurrent=concurrent,
        )
        self._identities = dict(identities)
        self._graph_mode = graph
        self._setups: list[_Setup] = []
        self.setup_seconds = 0.0  # wall time of the key setups (O(n) per participant, once)

    @property
    def parameters(self) -> GraphParameters | None:
        """The graph parameters of the latest key setup (None before the first sum)."""
        return self._setups[-1].parameters if self._setups else None

    def _setup_for(
        self, by_name: Mapping[str, SummedParticipant], cohort: list[str], required: bool
    ) -> _Setup:
        """The key setup whose roster holds ``cohort``, made now if there is none."""
        wanted = frozenset(cohort)
        for setup in self._setups:
            if wanted <= setup.roster:
                return setup
        start = time.perf_counter()
        number = len(self._setups) + 1
        job = setup_job_id(self._job, number)
        params = graph_parameters(len(cohort), full=self._graph_mode == "full")
        config = JobConfig(job, tuple(cohort), params.degree, params.threshold, self._min_cohort)
        server = MaskingServer(config, self._identities)
        adverts = self._stage(
            by_name, cohort, required, "key setup",
            lambda _: msg.SecureSetupTask(
                setup=number, roster=cohort, degree=params.degree, threshold=params.threshold,
                identities={p: b64(self._identities[p]) for p in cohort},
            ),
            msg.KeyAdvertReply,
        )
        listed = server.receive_adverts(
            [to_key_advert(a.advert, job_id=job) for a in adverts.values()]
        )
        wire = [signed_keys(a) for a in listed]
        acks = self._stage(
            by_name, sorted(adverts), required, "graph derivation",
            lambda _: msg.SecureGraphTask(setup=number, adverts=wire), msg.GraphReply,
        )
        wrong = sorted(n for n, a in acks.items() if a.graph_sha256 != server.graph.digest)
        if wrong:
            raise ProtocolError(
                f"participant(s) {', '.join(wrong)} derived another masking graph than the "
                "coordinator from the same adverts."
            )
        setup = _Setup(number, wanted, server, frozenset(acks), params)
        self._setups.append(setup)
        self.notes.append(f"secure sums (key setup {number}): {params.describe()}.")
        self.setup_seconds += time.perf_counter() - start
        return setup

    def sum(
        self,
        participants: Sequence[Any],
        statistic: msg.SumTaskSpec,
        reply_type: type[R],
        *,
        required: bool = False,
    ) -> tuple[R, tuple[str, ...]]:
        """Run one secure sum of ``statistic`` over ``participants`` (module docstring)."""
        by_name, cohort, n_features, encoding = self._begin(participants, statistic, required)
        setup = self._setup_for(by_name, cohort, required)
        job = setup_job_id(self._job, setup.number)
        outside = [p for p in cohort if p not in setup.members]
        if outside and required:
            raise RefusedError(
                f"participant(s) {', '.join(outside)} took no part in the job's key setup, "
                "and every participant must join this sum."
            )
        cohort = [p for p in cohort if p in setup.members]
        if len(cohort) < self._min_cohort:
            raise RefusedError(
                f"a secure sum needs at least {self._min_cohort} participants with job keys; "
                f"{len(cohort)} would take part."
            )
        r = self._round
        rnd = setup.server.begin(r, cohort, {e.name: e.words for e in encoding})
        spec = msg.SecureInputTask(
            setup=setup.number, round=r, cohort=cohort, statistic=statistic, encoding=encoding
        )
        masked = self._stage(
            by_name, cohort, required, "masked input", lambda _: spec, msg.MaskedInputReply
        )
        for name, reply in masked.items():
            try:
                msg.check_reply(spec, reply, n_features)
                rnd.receive_masked_input(
                    MaskedInput(
                        job, r, name,
                        {k: v.to_numpy() for k, v in reply.vectors.items()},
                        tuple(
                            encrypted_share(s, job_id=job, round_no=r)
                            for s in reply.shares
                        ),
                        raw(reply.seed_commitment, "seed commitment"),
                    )
                )
            except (ValueError, RefusedError) as exc:
                raise ProtocolError(f"participant {name!r}: {exc}") from None
        request, inboxes = rnd.unmask_request()
        survivors, dropped = sorted(request.survivors), sorted(request.dropped)
        self.cohorts.admit(survivors, f"{msg.task_name(statistic)!r} sum")  # unmasked over them
        # Route the sealed shares as they arrived; one validated task, copied per recipient.
        sealed = {
            (name, s.recipient): s for name, reply in masked.items() for s in reply.shares
        }
        unmask = msg.SecureUnmaskTask(
            setup=setup.number, round=r, survivors=survivors, dropped=dropped, shares=[]
        )
        if dropped:
            self.notes.append(
                f"secure sum {r} ({msg.task_name(statistic)}): {', '.join(dropped)} dropped "
                "out; their masks were removed with their neighbours' round keys."
            )
        answers = self._stage(
            by_name, survivors, False, "unmasking",
            lambda name: unmask.model_copy(
                update={"shares": [sealed[(s.sender, s.recipient)] for s in inboxes[name]]}
            ),
            msg.UnmaskSharesReply,
        )
        for name, answer in answers.items():
            try:
                response = UnmaskResponse(
                    job, r, name,
                    self_mask_shares={
                        p: raw(v, "seed share") for p, v in answer.self_mask_shares.items()
                    },
                    pair_keys={p: raw(v, "round key") for p, v in answer.pair_keys.items()},
                )
            except RefusedError as exc:
                raise ProtocolError(f"participant {name!r}: {exc}") from None
            rnd.receive_unmask_response(response)
        totals = rnd.aggregate()
        decoded = {
            e.name: decode(
                Statistic(e.name, e.scale_bits, e.bound, e.words), totals[e.name], len(survivors)
            )
            for e in encoding
        }
        return total_reply(statistic, decoded, reply_type), tuple(survivors)
