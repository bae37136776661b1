"""Driver of clustered federated distillation (Yang & Tae 2023, Appl. Sci. 14(1), 277).

:func:`run_fed_distill`: one shot, four stages (a :class:`StageRecord` each): ``train_local``;
``counts`` (mode "clustered" only: count vectors scaled and grouped by Ward clustering under
``distance_threshold``, ``protocol.maths.distillation``); ``teachers`` (per group, the
members' (P_l, 1) SUMMED by ``aggregate`` and T_g = ΣP_l / |g|); ``distill`` (every
participant towards its group's teacher). Modes: "clustered" (the paper), "global" (FedDF:
one group of all) and "local" (stage 1 only). An ``evaluate`` hook records accuracies after
stages 1 and 4. Groups under ``MIN_PROTECTED_MEMBERS`` = 3 cannot hide a contribution and are
listed in ``unprotected_groups`` and ``notes``. Only what the participant methods return
reaches the coordinator; seeds come from ``seed`` and grouping is deterministic.

Design notes: ``docs/fed-distill.md`` (§ The driver).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, TypeVar

import numpy as np
from numpy.typing import ArrayLike

from fedclust.coordinator._rounds import MIN_PROTECTED_MEMBERS, Gatherer, add_contributions
from fedclust.core.errors import ProtocolError
from fedclust.core.validation import FloatArray, check_data, check_float, check_int, rng_from
from fedclust.protocol.maths import distillation as dist

__all__ = [
    "MIN_PROTECTED_MEMBERS",
    "DistillParticipantLike",
    "FedDistillResult",
    "StageRecord",
    "run_fed_distill",
    "sum_contributions",
]

Mode = Literal["clustered", "global", "local"]
_SEED_BOUND = 2**31 - 1
_MODES = ("clustered", "global", "local")


class DistillParticipantLike(Protocol):
    """What clustered federated distillation asks of a participant."""

    @property
    def name(self) -> str: ...

    @property
    def n_features(self) -> int: ...

    def train_local(self, *, seed: int) -> None: ...

    def predict_counts(self, public_X: FloatArray) -> dict[str, FloatArray]: ...

    def predict_soft(self, public_X: FloatArray) -> dict[str, FloatArray]: ...

    def distill(
        self, teacher: FloatArray, public_X: FloatArray, *, temperature: float, epochs: int,
        seed: int,
    ) -> None: ...


P = TypeVar("P", bound=DistillParticipantLike)
Contribution = dict[str, FloatArray]
Aggregate = Callable[[Sequence[P], Callable[[P], Contribution]], Contribution]


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


def sum_contributions(
    participants: Sequence[P], ask: Callable[[P], Contribution]
) -> Contribution:
    """The default ``aggregate``: ask the members one after another (the simulator's models
    share this process's threads) and add their named arrays (:func:`add_contributions`)."""
    return add_contributions([(p.name, ask(p)) for p in participants])


def _seeds(rng: np.random.Generator, n: int) -> list[int]:
    base = int(rng.integers(_SEED_BOUND // 2))
    return [base + 2 * i for i in range(n)]  # train_local uses seed and seed + 1


def run_fed_distill(
    participants: Sequence[P],
    public_X: ArrayLike,
    *,
    distance_threshold: float = 2.0,
    temperature: float = 0.1,
    epochs: int = 50,
    mode: Mode = "clustered",
    seed: int | None = None,
    aggregate: Aggregate[P] | None = None,
    evaluate: Callable[[P], float] | None = None,
) -> FedDistillResult:
    """Clustered federated distillation (Yang & Tae 2023) or its baselines.

    Args:
        participants: at least one; names must be distinct.
        public_X: the public unlabelled set, (n_public, n_features), as the participants'
            classifiers expect it.
        distance_threshold: Ward merge distance at which grouping stops (paper: 2).
        temperature: T of the distillation loss (paper: 0.1).
        epochs: distillation epochs (paper: 50).
        mode: "clustered", "global" (FedDF-style) or "local" (no sharing).
        seed: algorithmic randomness (initialisation, splits, batch order).
        aggregate: sums named arrays over a group's members (the service plugs in secure
            aggregation); None = ``sum_contributions``.
        evaluate: simulation hook returning a participant's accuracy on its test rows.

    Returns:
        A :class:`FedDistillResult`.
    """
    owner = "run_fed_distill"
    if mode not in _MODES:
        raise ValueError(
            f"The 'mode' parameter of {owner} must be one of {_MODES}. Got {mode!r} instead."
        )
    threshold = check_float(
        distance_threshold, name="distance_threshold", owner=owner, low=0.0, low_open=True
    )
    temperature = check_float(temperature, name="temperature", owner=owner, low=0.0,
                              low_open=True)
    epochs = check_int(epochs, name="epochs", owner=owner, low=0)
    public = check_data(public_X, name="public_X")
    if len(participants) == 0:
        raise ValueError(f"{owner} needs at least one participant; got none.")
    names = [p.name for p in participants]
    if len(set(names)) != len(names):
        raise ValueError(f"{owner} needs distinct participant names.")
    widths = {p.n_features for p in participants}
    if widths != {public.shape[1]}:
        raise ValueError(
            f"public_X must have the participants' n_features={sorted(widths)} columns; got "
            f"shape {public.shape}."
        )
    summer: Aggregate[P] = sum_contributions if aggregate is None else aggregate
    rng = rng_from(seed)
    train_seeds = _seeds(rng, len(participants))
    distill_seeds = _seeds(rng, len(participants))
    gatherer = Gatherer()
    history: list[StageRecord] = []
    notes: list[str] = []

    # 1. local training
    _, responders = gatherer.gather(
        1, participants, lambda i, p: p.train_local(seed=train_seeds[i])
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
        answers, counted = gatherer.gather(
            2, active, lambda _, p: p.predict_counts(public), required=True
        )
        if len({np.shape(a[dist.LABEL_COUNTS]) for a in answers}) != 1:
            raise ProtocolError("participants returned label-count vectors of different lengths.")
        counts = np.vstack([a[dist.LABEL_COUNTS] for a in answers])
        scaled = dist.scale_counts(counts)
        labels = dist.group_clients(scaled, distance_threshold=threshold)
        history.append(StageRecord("counts", counted, f"{int(labels.max()) + 1} groups"))
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
        total = summer(group, lambda p: p.predict_soft(public))
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
    _, distilled = gatherer.gather(
        4,
        active,
        lambda _, p: p.distill(
            teachers[group_of[p.name]], public, temperature=temperature, epochs=epochs,
            seed=distill_seeds[index[p.name]],
        ),
        required=True,
    )
    history.append(StageRecord("distill", distilled))
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
