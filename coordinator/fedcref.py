"""The FedCRef iteration loop (Nardi, Valerio & Passarella, Algorithm 1).

:func:`run_fedcref`: every participant makes its initial clustering and one autoencoder per
local cluster (``fedcref_init``); each iteration then (a) retrains changed local models
(``fedcref_train``), (b) shares models and scores clusters against the others' models
(``fedcref_models``, ``fedcref_scores``, eq. 2), (c) keeps the symmetric associations and
takes their connected components of >= 2 clusters as groups, (d) trains one model per group
by FedAvg from SUMS of n·θ and n (``aggregate``, where secure aggregation plugs in; groups of
fewer than 3 participants are listed as unprotected), (e) refines every active participant's
assignment (``fedcref_refine``, Algorithm 2), which freezes at agreement >= tau (0.8). Stops
when none is active, when group counts varied <= 10 % over three iterations, or after
``max_iterations``. The driver never sees labels, rows or errors; evaluation runs only
through the optional ``evaluate`` hook.

Design notes: ``docs/fedcref.md`` (§ The iteration loop).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, TypeVar

import numpy as np
from numpy.typing import NDArray

from fedclust.coordinator._rounds import (
    MIN_PROTECTED_MEMBERS,
    add_contributions,
    gather_required,
)
from fedclust.core.errors import ProtocolError
from fedclust.core.validation import FloatArray, check_float, check_int, rng_from
from fedclust.protocol.maths.fedcref import (
    AutoencoderSpec,
    ClusterRef,
    FedCRefEvaluation,
    Grouping,
    client_frozen,
    combine_fedavg,
    counts_stable,
    find_groups,
    symmetric_edges,
)

__all__ = [
    "MIN_PROTECTED_MEMBERS",
    "FedAvgRequest",
    "FedCRefIteration",
    "FedCRefParticipant",
    "FedCRefResult",
    "run_fedcref",
    "sum_contributions",
]

_SEED_BOUND = 2**31 - 1

FedCRefStop = Literal["all_frozen", "stable", "max_iterations"]
Contribution = dict[str, NDArray[np.float64]]


class FedCRefParticipant(Protocol):
    """What FedCRef asks of a participant (``participant.deep.fedcref_local.FedCRefLocal``)."""

    @property
    def name(self) -> str: ...

    @property
    def n_features(self) -> int: ...

    def fedcref_init(self, spec: AutoencoderSpec, *, seed: int) -> int: ...

    def fedcref_train(self, *, seed: int) -> None: ...

    def fedcref_models(self) -> list[NDArray[np.float32]]: ...

    def fedcref_scores(
        self, models: Sequence[NDArray[np.float32]], *, alpha: float
    ) -> FloatArray: ...

    def fedcref_fedavg_step(
        self,
        model: NDArray[np.float32] | None,
        clusters: Sequence[int],
        *,
        epochs: int,
        seed: int,
    ) -> Contribution: ...

    def fedcref_refine(
        self, group_models: Sequence[NDArray[np.float32]], *, seed: int
    ) -> float: ...


P = TypeVar("P", bound=FedCRefParticipant)


@dataclass(frozen=True)
class FedAvgRequest:
    """One FedAvg sum of a group, asked of every member alike: each member's clusters in the
    group and its seed, the start ``model`` (None: the size-weighted local models) and the
    local ``epochs``. Called with a member, it asks that member for its contribution."""

    model: NDArray[np.float32] | None
    clusters: Mapping[str, tuple[int, ...]]
    seeds: Mapping[str, int]
    epochs: int

    def __call__(self, p: FedCRefParticipant) -> Contribution:
        return p.fedcref_fedavg_step(
            self.model, self.clusters[p.name], epochs=self.epochs, seed=self.seeds[p.name]
        )


Aggregate = Callable[[Sequence[P], FedAvgRequest], Contribution]


def sum_contributions(members: Sequence[P], ask: Callable[[P], Contribution]) -> Contribution:
    """The default ``aggregate``: ask every member (concurrently) and add their named arrays
    (:func:`~coordinator._rounds.add_contributions`)."""
    answers = gather_required(members, ask)
    return add_contributions([(m.name, a) for m, a in zip(members, answers, strict=True)])


@dataclass(frozen=True)
class FedCRefIteration:
    """One iteration: the grouping found, what was protectable, who refined, evaluation.

    ``small_groups`` are indices of groups whose FedAvg sums had fewer than
    :data:`MIN_PROTECTED_MEMBERS` distinct participants (no protection by summing).
    ``agreements`` pairs each participant that refined with the agreement of its consecutive
    assignments. ``wrong_associations`` and ``mean_accuracy`` come from the evaluation hook
    (None without one); the accuracy is measured after this iteration's refinement.
    """

    iteration: int
    grouping: Grouping
    small_groups: tuple[int, ...]
    agreements: tuple[tuple[str, float], ...]
    frozen: tuple[str, ...]
    wrong_associations: int | None = None
    mean_accuracy: float | None = None

    @property
    def n_groups(self) -> int:
        return len(self.grouping.groups)

    @property
    def n_isolated(self) -> int:
        return len(self.grouping.isolated)


@dataclass(frozen=True)
class FedCRefResult:
    """A FedCRef run: per-iteration records, the last grouping and its federated models.

    Cluster references (participant index, local cluster) index ``participants``;
    ``group_models[g]`` is the FedAvg model of ``grouping.groups[g]`` of the last iteration
    (before that iteration's refinement renumbered local clusters).
    """

    spec: AutoencoderSpec
    participants: tuple[str, ...]
    initial_k: tuple[int, ...]
    iterations: tuple[FedCRefIteration, ...]
    stop_reason: FedCRefStop
    group_models: tuple[NDArray[np.float32], ...]
    initial_accuracy: float | None = None
    notes: tuple[str, ...] = ()

    @property
    def n_iterations(self) -> int:
        return len(self.iterations)

    @property
    def grouping(self) -> Grouping:
        return self.iterations[-1].grouping if self.iterations else Grouping((), ())


def _seeds(rng: np.random.Generator, names: Sequence[str]) -> dict[str, int]:
    base = int(rng.integers(_SEED_BOUND))
    return {name: base + i for i, name in enumerate(names)}


def _ask_train(seeds: dict[str, int]) -> Callable[[FedCRefParticipant], None]:
    def ask(p: FedCRefParticipant) -> None:
        p.fedcref_train(seed=seeds[p.name])

    return ask


def _ask_refine(
    models: dict[str, list[NDArray[np.float32]]], seeds: dict[str, int]
) -> Callable[[FedCRefParticipant], float]:
    def ask(p: FedCRefParticipant) -> float:
        return p.fedcref_refine(models[p.name], seed=seeds[p.name])

    return ask


def _associate(
    participants: Sequence[P], spec: AutoencoderSpec, *, alpha: float, theta: float
) -> Grouping:
    """Steps b-c: share the models, gather eq. 2 scores, keep symmetric edges, components."""
    names = [p.name for p in participants]
    shared = gather_required(participants, lambda p: p.fedcref_models())
    refs: list[ClusterRef] = []
    flat: list[NDArray[np.float32]] = []
    for i, models in enumerate(shared):
        for q, m in enumerate(models):
            refs.append((i, q))
            flat.append(spec.check_params(m, name=f"model {q} of {names[i]!r}"))
    others = {i: [j for j, r in enumerate(refs) if r[0] != i] for i in range(len(names))}
    position = {name: i for i, name in enumerate(names)}
    score_rows = gather_required(
        participants,
        lambda p: p.fedcref_scores([flat[j] for j in others[position[p.name]]], alpha=alpha),
    )
    scores: dict[tuple[ClusterRef, ClusterRef], float] = {}
    for i, rows in enumerate(score_rows):
        S = np.asarray(rows, dtype=np.float64)
        if S.shape != (len(shared[i]), len(others[i])):
            raise ProtocolError(f"participant {names[i]!r} returned scores of the wrong shape.")
        for q in range(S.shape[0]):
            for c, j in enumerate(others[i]):
                scores[((i, q), refs[j])] = float(S[q, c])
    return find_groups(refs, symmetric_edges(scores, theta=theta))


def _train_group(
    participants: Sequence[P],
    grouping: Grouping,
    g: int,
    spec: AutoencoderSpec,
    combine: Aggregate[P],
    rng: np.random.Generator,
    *,
    rounds: int,
    epochs: int,
) -> NDArray[np.float32]:
    """Step d: FedAvg of group g from the sums its members return."""
    member_ids = grouping.participants(g)
    group = [participants[i] for i in member_ids]
    mine = {
        participants[i].name: tuple(q for i2, q in grouping.groups[g] if i2 == i)
        for i in member_ids
    }
    start = FedAvgRequest(None, mine, dict.fromkeys(mine, 0), 0)
    model = combine_fedavg(combine(group, start), spec)
    for _ in range(rounds):
        request = FedAvgRequest(model, mine, _seeds(rng, [p.name for p in group]), epochs)
        model = combine_fedavg(combine(group, request), spec)
    return model


def run_fedcref(
    participants: Sequence[P],
    *,
    hidden: tuple[int, ...] = (100, 64, 32),
    alpha: float = 75.0,
    theta: float = 0.2,
    tau: float = 0.8,
    fedavg_rounds: int = 15,
    fedavg_epochs: int = 2,
    max_iterations: int = 10,
    refine_with: Literal["groups", "all"] = "all",
    stable_window: int = 3,
    stable_tolerance: float = 0.1,
    seed: int | None = None,
    aggregate: Aggregate[P] | None = None,
    evaluate: Callable[[Grouping | None], FedCRefEvaluation] | None = None,
    on_iteration: Callable[[FedCRefIteration], None] | None = None,
) -> FedCRefResult:
    """FedCRef (Nardi, Valerio & Passarella, Alg. 1 with the refinement of Alg. 2).

    Args:
        participants: at least two, with distinct names and rows of one width.
        hidden: encoder widths (the decoder mirrors them); the paper's 100-64-32.
        alpha, theta: association percentile and threshold (eq. 2); paper 75 and 0.2 (the
            authors' code: 0.25).
        tau: a participant freezes when its consecutive assignments agree >= tau.
        fedavg_rounds, fedavg_epochs: FedAvg rounds per group and local epochs per round.
        max_iterations: the most iterations.
        refine_with: the federated models a participant refines with: every group's ("all",
            the authors' code; on MNIST at d = 0.5 final ACC 0.80 against 0.67) or those of
            its own groups only ("groups", the narrower reading of Algorithm 2).
        stable_window, stable_tolerance: stop when group and isolated counts varied by at
            most ``stable_tolerance`` (relative) over the last ``stable_window`` iterations.
        seed: algorithmic randomness; every participant seed is derived from it.
        aggregate: sums the named arrays a group's members return for a
            :class:`FedAvgRequest` (the secure aggregation hook); default
            :func:`sum_contributions`.
        evaluate: simulator-only hook measuring the participants against true labels; called
            with None after the initial clustering and after each refinement, and with the
            grouping right after it is found (for wrong associations).
        on_iteration: observer called with each finished iteration.
    """
    owner = "run_fedcref"
    alpha = check_float(alpha, name="alpha", owner=owner, low=0.0, high=100.0)
    theta = check_float(theta, name="theta", owner=owner, low=0.0)
    tau = check_float(tau, name="tau", owner=owner, low=0.0, high=1.0)
    fedavg_rounds = check_int(fedavg_rounds, name="fedavg_rounds", owner=owner, low=0)
    fedavg_epochs = check_int(fedavg_epochs, name="fedavg_epochs", owner=owner, low=1)
    max_iterations = check_int(max_iterations, name="max_iterations", owner=owner, low=1)
    if refine_with not in ("groups", "all"):
        raise ValueError(
            f"The 'refine_with' parameter of {owner} must be 'groups' or 'all'. "
            f"Got {refine_with!r} instead."
        )
    stable_window = check_int(stable_window, name="stable_window", owner=owner, low=1)
    stable_tolerance = check_float(
        stable_tolerance, name="stable_tolerance", owner=owner, low=0.0
    )
    if len(participants) < 2:
        raise ValueError(f"{owner} needs at least two participants; got {len(participants)}.")
    names = [p.name for p in participants]
    if len(set(names)) != len(names):
        raise ValueError(f"{owner} needs participants with distinct names.")
    widths = {p.n_features for p in participants}
    if len(widths) != 1:
        by_width = ", ".join(f"{p.name!r}: {p.n_features}" for p in participants)
        raise ValueError(
            f"{owner} needs rows of one width (the same image size) at every participant; "
            f"got {by_width}."
        )
    spec = AutoencoderSpec(widths.pop(), tuple(hidden))
    combine: Aggregate[P] = aggregate if aggregate is not None else sum_contributions
    rng = rng_from(seed)

    seeds = _seeds(rng, names)
    initial_k = tuple(
        gather_required(participants, lambda p: p.fedcref_init(spec, seed=seeds[p.name]))
    )
    initial_accuracy = evaluate(None).mean_accuracy if evaluate is not None else None

    active = set(names)
    history: list[tuple[int, int]] = []
    records: list[FedCRefIteration] = []
    group_models: list[NDArray[np.float32]] = []
    stop: FedCRefStop = "max_iterations"
    for it in range(1, max_iterations + 1):
        seeds = _seeds(rng, names)
        gather_required(participants, _ask_train(seeds))
        grouping = _associate(participants, spec, alpha=alpha, theta=theta)
        wrong = evaluate(grouping).wrong_associations if evaluate is not None else None

        group_models = []
        small: list[int] = []
        for g in range(len(grouping.groups)):
            if len(grouping.participants(g)) < MIN_PROTECTED_MEMBERS:
                small.append(g)
            group_models.append(
                _train_group(
                    participants, grouping, g, spec, combine, rng,
                    rounds=fedavg_rounds, epochs=fedavg_epochs,
                )
            )

        theirs: dict[str, list[NDArray[np.float32]]] = {n: [] for n in names}
        for g, _members in enumerate(grouping.groups):
            takers = range(len(names)) if refine_with == "all" else grouping.participants(g)
            for i in takers:
                theirs[names[i]].append(group_models[g])
        refining = [p for p in participants if p.name in active]
        agreements = gather_required(refining, _ask_refine(theirs, _seeds(rng, names)))
        frozen = tuple(
            p.name
            for p, a in zip(refining, agreements, strict=True)
            if client_frozen(a, tau=tau)
        )
        active -= set(frozen)
        accuracy = evaluate(None).mean_accuracy if evaluate is not None else None
        record = FedCRefIteration(
            iteration=it,
            grouping=grouping,
            small_groups=tuple(small),
            agreements=tuple((p.name, float(a)) for p, a in zip(refining, agreements, strict=True)),
            frozen=frozen,
            wrong_associations=wrong,
            mean_accuracy=accuracy,
        )
        records.append(record)
        if on_iteration is not None:
            on_iteration(record)
        history.append((record.n_groups, record.n_isolated))
        if not active:
            stop = "all_frozen"
            break
        if counts_stable(history, window=stable_window, tolerance=stable_tolerance):
            stop = "stable"
            break

    notes: list[str] = []
    unprotected = sorted({g for r in records[-1:] for g in r.small_groups})
    if unprotected:
        notes.append(
            f"{len(unprotected)} group(s) of the last iteration had fewer than "
            f"{MIN_PROTECTED_MEMBERS} participants: their FedAvg sums could not hide a "
            "member's model update."
        )
    return FedCRefResult(
        spec=spec,
        participants=tuple(names),
        initial_k=initial_k,
        iterations=tuple(records),
        stop_reason=stop,
        group_models=tuple(group_models),
        initial_accuracy=initial_accuracy,
        notes=tuple(notes),
    )
