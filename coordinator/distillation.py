"""Driver of clustered federated distillation (Yang & Tae 2023, Appl. Sci. 14(1), 277).

:func:`run_fed_distill`: one shot, four stages (a :class:`StageRecord` each), each a round of
wire tasks (``distill_train``; ``distill_counts``; ``distill_soft``; ``distill_step``):
``train_local``; ``counts`` (mode "clustered" only: count vectors scaled and grouped by Ward
clustering under ``distance_threshold``, ``protocol.maths.distillation``); ``teachers`` (per
group, the members' (P_l, 1) SUMMED, by the job's ``summation`` for >= 3 members, and
T_g = ΣP_l / |g|); ``distill`` (every participant towards its group's teacher). Modes:
"clustered" (the paper), "global" (FedDF: one group of all) and "local" (stage 1 only). An
``evaluate`` hook records accuracies after stages 1 and 4. Groups under
``MIN_PROTECTED_MEMBERS`` = 3 cannot hide a contribution and are listed in
``unprotected_groups`` and ``notes``. Only the participants' replies reach the coordinator;
seeds come from ``seed`` and the participants' order, and grouping is deterministic.

Design notes: ``docs/fed-distill.md`` (§ The driver).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, TypeVar

import numpy as np

from fedclust.coordinator._rounds import (
    MIN_PROTECTED_MEMBERS,
    Gatherer,
    add_contributions,
    expect,
    gather_required,
)
from fedclust.coordinator.secure_sum import Summation
from fedclust.core.errors import ProtocolError
from fedclust.core.validation import FloatArray, rng_from
from fedclust.protocol.algorithms.fed_distill_params import DistillParams
from fedclust.protocol.maths import distillation as dist
from fedclust.protocol.wire import messages as msg

__all__ = [
    "MIN_PROTECTED_MEMBERS",
    "DistillParticipantLike",
    "FedDistillResult",
    "StageRecord",
    "run_fed_distill",
]

Mode = Literal["clustered", "global", "local"]
_SEED_BOUND = 2**31 - 1
#: The batch sizes of the authors' code (local training, distillation), used when the job's
#: ``batch_size`` is absent.
LOCAL_BATCH, DISTILL_BATCH = 32, 64


class DistillParticipantLike(Protocol):
    """A participant as clustered federated distillation asks it: it answers the tasks
    ``distill_train``, ``distill_counts``, ``distill_soft`` and ``distill_step`` (and, in a
    secure sum, its stages): ``participant.distill_tasks.DistillTasks`` behind the agent, or
    ``coordinator.remote.RemoteParticipant``."""

    @property
    def name(self) -> str: ...

    @property
    def n_features(self) -> int: ...

    def answer(self, spec: msg.TaskSpec) -> msg.Reply:
        """The reply; raise RefusedError on a refusal, UnavailableError on silence."""
        ...


P = TypeVar("P", bound=DistillParticipantLike)
Contribution = dict[str, FloatArray]


@dataclass(frozen=True)
class StageRecord:
    """One stage as the coordinator saw it: its name, who answered, and a short detail."""

    stage: str
    responders: tuple[str, ...]
    detail: str = ""


@dataclass(frozen=True)
class FedDistillResult:
    """Outcome of one run.

    Attributes:
        mode: "clustered", "global" or "local".
        groups: participant names per group (groups in order of their first member).
        unprotected_groups: the groups whose teacher sum had fewer than 3 members, so secure
            aggregation could not hide individual contributions (empty in "local" mode: no
            sums are formed).
        scaled_counts: the min-max scaled clients × labels count matrix ("clustered" only),
            rows in the order of the participants that answered.
        accuracy_before / accuracy: (name, accuracy) after local training / after
            distillation, when an evaluation hook was given (else empty).
        group_accuracy: mean accuracy after distillation per group (aligned with groups).
        overall_accuracy: mean over participants after distillation (None without hook).
    """

    mode: Mode
    groups: tuple[tuple[str, ...], ...]
    unprotected_groups: tuple[tuple[str, ...], ...]
    scaled_counts: FloatArray | None
    accuracy_before: tuple[tuple[str, float], ...] = ()
    accuracy: tuple[tuple[str, float], ...] = ()
    group_accuracy: tuple[float, ...] = ()
    overall_accuracy: float | None = None
    history: tuple[StageRecord, ...] = ()
    notes: tuple[str, ...] = field(default=())

    def group_labels(self, names: Sequence[str]) -> list[int]:
        """The group index of each named participant (-1 when it took no part)."""
        where = {n: g for g, members in enumerate(self.groups) for n in members}
        return [where.get(n, -1) for n in names]


def _contribution(reply: msg.DistillSoftReply) -> Contribution:
    """The driver's names for the wire's summed fields."""
    return {dist.SOFT_SUM: reply.soft_sum.to_numpy(), dist.COUNT: reply.members.to_numpy()}


def _seeds(rng: np.random.Generator, n: int) -> list[int]:
    base = int(rng.integers(_SEED_BOUND // 2))
    return [base + 2 * i for i in range(n)]  # train_local uses seed and seed + 1


def run_fed_distill(
    participants: Sequence[P],
    params: DistillParams,
    *,
    seed: int | None = None,
    summation: Summation | None = None,
    evaluate: Callable[[P], float] | None = None,
) -> FedDistillResult:
    """Clustered federated distillation (Yang & Tae 2023) or its baselines.

    Training, counting and distillation send every participant its task at once
    (``Gatherer.gather_replies``: remote participants on the broker in one round, one waiting
    thread; in-process ones a thread each, ``concurrent``, since their models train outside
    the GIL); the teachers' sums go group by group (a small group's members one after
    another).

    Args:
        participants: at least one; names must be distinct.
        params: the job's parameters: the public unlabelled set (n_public, n_features), as
            the participants' classifiers expect it; ``distance_threshold`` (Ward merge
            distance at which grouping stops, paper 2); ``temperature`` (T of the
            distillation loss, paper 0.1); ``epochs`` (distillation epochs, paper 50);
            ``mode`` "clustered", "global" (FedDF-style) or "local" (no sharing); the
            training hyper-parameters of the tasks.
        seed: algorithmic randomness (initialisation, splits, batch order).
        summation: how a group of >= 3 members sums its soft predictions (the service's
            masking); None, and every smaller group, sums them in the clear.
        evaluate: simulation hook returning a participant's accuracy on its test rows.

    Returns:
        A :class:`FedDistillResult`.
    """
    owner = "run_fed_distill"
    public = params.public.to_numpy()  # finite, non-empty, 2-D (DistillParams)
    if len(participants) == 0:
        raise ValueError(f"{owner} needs at least one participant; got none.")
    names = [p.name for p in participants]
    if len(set(names)) != len(names):
        raise ValueError(f"{owner} needs distinct participant names.")
    widths = {p.n_features for p in participants}
    if widths != {public.shape[1]}:
        raise ValueError(
            f"distill.public must have the participants' n_features={sorted(widths)} columns; "
            f"got shape {public.shape}."
        )
    mode = params.mode
    batch = params.batch_size
    rng = rng_from(seed)
    train_seeds = _seeds(rng, len(participants))
    distill_seeds = _seeds(rng, len(participants))
    gatherer = Gatherer()
    history: list[StageRecord] = []
    notes: list[str] = []

    # 1. local training
    train = [
        msg.DistillTrainTask(
            seed=s, n_classes=params.n_classes, classifier=params.classifier,
            max_epochs=params.local_epochs, learning_rate=params.learning_rate,
            batch_size=batch if batch is not None else LOCAL_BATCH,
        )
        for s in train_seeds
    ]
    _, responders = gatherer.gather_replies(
        1, participants, lambda i, _: train[i], expect(train[0], msg.AckReply),
        concurrent=True,
    )
    history.append(StageRecord("train_local", responders))
    index = {p.name: i for i, p in enumerate(participants)}
    active = [participants[index[n]] for n in responders]
    before = _evaluate_all(active, evaluate)

    # 2. grouping
    scaled: FloatArray | None = None
    if mode == "local":
        labels = np.arange(len(active), dtype=np.int64)
    elif mode == "global":
        labels = dist.global_groups(len(active))
    else:
        counts_task = msg.DistillCountsTask(public=params.public, n_classes=params.n_classes)
        answers = [
            r.label_counts.to_numpy().astype(np.float64)
            for r in gather_required(
                active, lambda _, p: counts_task, msg.DistillCountsReply, concurrent=True
            )
        ]
        if len({np.shape(a) for a in answers}) != 1:
            raise ProtocolError("participants returned label-count vectors of different lengths.")
        scaled = dist.scale_counts(np.vstack(answers))
        labels = dist.group_clients(scaled, distance_threshold=params.distance_threshold)
        history.append(StageRecord(
            "counts", tuple(p.name for p in active), f"{int(labels.max()) + 1} groups"
        ))
        notes.append(
            "each participant's label-count vector on the public set was disclosed to the "
            "coordinator in clear (the grouping needs every one)."
        )
    members = [[active[i] for i in g] for g in dist.groups_as_lists(labels)]
    groups = tuple(tuple(p.name for p in g) for g in members)
    notes = [*gatherer.notes, *notes]
    if mode == "local":
        return FedDistillResult(
            mode, groups, (), None, before, before, _group_acc(before, labels),
            _mean(before), tuple(history), tuple(notes),
        )

    # 3. teachers from group sums
    teachers: list[FloatArray] = []
    unprotected: list[tuple[str, ...]] = []
    for g, group in enumerate(members):
        soft = msg.DistillSoftTask(
            public=params.public, n_classes=params.n_classes, members=list(groups[g])
        )
        if summation is not None and len(group) >= MIN_PROTECTED_MEMBERS:
            total = _contribution(
                summation.sum(group, soft, msg.DistillSoftReply, required=True)[0]
            )
        else:
            # (the lambda runs within this iteration: it sees this group's task)
            replies = gather_required(group, lambda _, p: soft, msg.DistillSoftReply)  # noqa: B023
            total = add_contributions(
                [(p.name, _contribution(r)) for p, r in zip(group, replies, strict=True)]
            )
        teacher = dist.combine_teacher(total)
        if round(float(total[dist.COUNT][0])) != len(group):
            raise ProtocolError(
                f"group {g}: the summed count does not match its {len(group)} members."
            )
        if teacher.shape[0] != public.shape[0]:
            raise ProtocolError(f"group {g}: the teacher has the wrong number of rows.")
        teachers.append(teacher)
        if len(group) < MIN_PROTECTED_MEMBERS:
            unprotected.append(groups[g])
            notes.append(
                f"group {g} has {len(group)} member(s) (< {MIN_PROTECTED_MEMBERS}): its "
                "teacher sum could not be protected by secure aggregation."
            )
    history.append(StageRecord("teachers", tuple(n for grp in groups for n in grp),
                               f"{len(teachers)} teacher(s)"))

    # 4. distillation
    group_of = {p.name: int(labels[i]) for i, p in enumerate(active)}
    wire_teachers = [msg.WireArray.of(t) for t in teachers]

    def step(_: int, p: P) -> msg.TaskSpec:
        return msg.DistillStepTask(
            public=params.public, teacher=wire_teachers[group_of[p.name]],
            temperature=params.temperature, epochs=params.epochs,
            seed=distill_seeds[index[p.name]], learning_rate=params.learning_rate,
            batch_size=batch if batch is not None else DISTILL_BATCH,
        )

    gather_required(active, step, msg.AckReply, concurrent=True)
    history.append(StageRecord("distill", tuple(p.name for p in active)))
    after = _evaluate_all(active, evaluate)
    return FedDistillResult(
        mode, groups, tuple(unprotected), scaled, before, after, _group_acc(after, labels),
        _mean(after), tuple(history), tuple(notes),
    )


def _evaluate_all(
    active: Sequence[P], evaluate: Callable[[P], float] | None
) -> tuple[tuple[str, float], ...]:
    if evaluate is None:
        return ()
    return tuple((p.name, float(evaluate(p))) for p in active)


def _group_acc(
    acc: tuple[tuple[str, float], ...], labels: np.ndarray[tuple[int], np.dtype[np.int64]]
) -> tuple[float, ...]:
    if not acc:
        return ()
    return tuple(float(v) for v in dist.group_means([a for _, a in acc], labels))


def _mean(acc: tuple[tuple[str, float], ...]) -> float | None:
    return float(np.mean([a for _, a in acc])) if acc else None
