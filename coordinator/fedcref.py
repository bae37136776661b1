"""The FedCRef iteration loop (Nardi, Valerio & Passarella, Algorithm 1).

:func:`run_fedcref`: every participant makes its initial clustering and one autoencoder per
local cluster (``fedcref_init``; every step is a round of ``fedcref_*`` wire tasks, sent to
all participants at once); each iteration then (a) retrains changed local models
(``fedcref_train``), (b) shares models and scores clusters against the others' models
(``fedcref_models``, ``fedcref_scores``, eq. 2), (c) keeps the symmetric associations and
takes their connected components of >= 2 clusters as groups, (d) trains one model per group
by FedAvg from SUMS of n·θ and n (``fedcref_fedavg``: by the job's ``summation``, where
secure aggregation plugs in; groups of fewer than 3 participants are summed in the clear and
listed as unprotected), (e) refines every active participant's
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
from fedclust.coordinator.secure_sum import Summation
from fedclust.core.errors import ProtocolError
from fedclust.core.validation import check_float, check_int, rng_from
from fedclust.protocol.algorithms.fedcref_params import FedCRefParams
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
from fedclust.protocol.wire import messages as msg

__all__ = [
    "MIN_PROTECTED_MEMBERS",
    "FedCRefIteration",
    "FedCRefParticipant",
    "FedCRefResult",
    "run_fedcref",
]

_SEED_BOUND = 2**31 - 1

FedCRefStop = Literal["all_frozen", "stable", "max_iterations"]
Contribution = dict[str, NDArray[np.float64]]


class FedCRefParticipant(Protocol):
    """A participant as FedCRef asks it: it answers the ``fedcref_*`` tasks (and, in a
    secure sum, its stages): ``participant.fedcref_tasks.FedCRefTasks`` behind the agent, or
    ``coordinator.remote.RemoteParticipant``."""

    @property
    def name(self) -> str: ...

    @property
    def n_features(self) -> int: ...

    def answer(self, spec: msg.TaskSpec) -> msg.Reply:
        """The reply; raise RefusedError on a refusal, UnavailableError on silence."""
        ...


P = TypeVar("P", bound=FedCRefParticipant)


def _stack(models: Sequence[NDArray[np.float32]], n_params: int) -> msg.WireArray:
    """Models as one float32 (M, n_params) wire array (M may be 0)."""
    if not models:
        return msg.WireArray.of(np.zeros((0, n_params), dtype=np.float32))
    return msg.WireArray.of(np.stack([np.asarray(m, dtype=np.float32) for m in models]))


def _fedavg_task(
    model: NDArray[np.float32] | None,
    clusters: Mapping[str, Sequence[int]],
    seeds: Mapping[str, int],
    *,
    epochs: int,
    n_params: int,
) -> msg.FedCRefFedavgTask:
    """One FedAvg statistic of a group: each member's clusters in the group and its seed,
    the start ``model`` (None: the size-weighted local models) and the local ``epochs``."""
    return msg.FedCRefFedavgTask(
        model=None if model is None else msg.WireArray.of(np.asarray(model, dtype=np.float32)),
        n_params=n_params,
        members={name: list(ids) for name, ids in clusters.items()},
        seeds=dict(seeds),
        epochs=epochs,
    )


def _contribution(reply: msg.FedCRefFedavgReply) -> Contribution:
    """The driver's names for the wire's summed fields."""
    return {"weighted_params": reply.weighted_params.to_numpy(), "n": reply.rows.to_numpy()}


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


def _associate(
    participants: Sequence[P], spec: AutoencoderSpec, *, alpha: float, theta: float
) -> Grouping:
    """Steps b-c: share the models, gather eq. 2 scores, keep symmetric edges, components."""
    names = [p.name for p in participants]
    shared = [
        [row.astype(np.float32) for row in reply.models.to_numpy()]
        for reply in gather_required(
            participants, lambda _, p: msg.FedCRefModelsTask(), msg.FedCRefModelsReply,
            concurrent=True,
        )
    ]
    refs: list[ClusterRef] = []
    flat: list[NDArray[np.float32]] = []
    for i, models in enumerate(shared):
        for q, m in enumerate(models):
            refs.append((i, q))
            flat.append(spec.check_params(m, name=f"model {q} of {names[i]!r}"))
    others = {i: [j for j, r in enumerate(refs) if r[0] != i] for i in range(len(names))}
    score_rows = gather_required(
        participants,
        lambda i, _: msg.FedCRefScoresTask(
            models=_stack([flat[j] for j in others[i]], spec.n_params), alpha=alpha
        ),
        msg.FedCRefScoresReply,
        concurrent=True,
    )
    scores: dict[tuple[ClusterRef, ClusterRef], float] = {}
    for i, reply in enumerate(score_rows):
        S = np.asarray(reply.scores.to_numpy(), dtype=np.float64)
        if S.shape != (len(shared[i]), len(others[i])):
            raise ProtocolError(f"participant {names[i]!r} returned scores of the wrong shape.")
        for q in range(S.shape[0]):
            for c, j in enumerate(others[i]):
                scores[((i, q), refs[j])] = float(S[q, c])
    return find_groups(refs, symmetric_edges(scores, theta=theta))


def _group_sum(
    group: Sequence[P], task: msg.FedCRefFedavgTask, summation: Summation | None
) -> Contribution:
    """The sums of n·θ and n over a group's members: by ``summation`` (every member must take
    part) for >= 3 members, the one ``task`` naming every member; else in the clear, each
    member asked ``task`` with only its own clusters and seed."""
    if summation is not None and len(group) >= MIN_PROTECTED_MEMBERS:
        total, _ = summation.sum(group, task, msg.FedCRefFedavgReply, required=True)
        return _contribution(total)
    own = [
        task.model_copy(update={"members": {p.name: task.members[p.name]},
                                "seeds": {p.name: task.seeds[p.name]}})
        for p in group
    ]
    replies = gather_required(group, lambda i, _: own[i], msg.FedCRefFedavgReply, concurrent=True)
    return add_contributions(
        [(p.name, _contribution(r)) for p, r in zip(group, replies, strict=True)]
    )


def _train_group(
    participants: Sequence[P],
    grouping: Grouping,
    g: int,
    spec: AutoencoderSpec,
    summation: Summation | None,
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
    start = _fedavg_task(None, mine, dict.fromkeys(mine, 0), epochs=0, n_params=spec.n_params)
    model = combine_fedavg(_group_sum(group, start, summation), spec)
    for _ in range(rounds):
        seeds = _seeds(rng, [p.name for p in group])
        task = _fedavg_task(model, mine, seeds, epochs=epochs, n_params=spec.n_params)
        model = combine_fedavg(_group_sum(group, task, summation), spec)
    return model


def run_fedcref(
    participants: Sequence[P],
    params: FedCRefParams | None = None,
    *,
    stable_window: int = 3,
    stable_tolerance: float = 0.1,
    seed: int | None = None,
    summation: Summation | None = None,
    evaluate: Callable[[Grouping | None], FedCRefEvaluation] | None = None,
    on_iteration: Callable[[FedCRefIteration], None] | None = None,
) -> FedCRefResult:
    """FedCRef (Nardi, Valerio & Passarella, Alg. 1 with the refinement of Alg. 2).

    Each step but FedAvg sends every participant its task at once (``coordinator._rounds.
    gather_required``: remote participants on the broker in one round, one waiting thread;
    in-process ones a thread each, ``concurrent``, since their models train outside the
    GIL); FedAvg goes group by group.

    Args:
        participants: at least two, with distinct names and rows of one width.
        params: the job's parameters (None: the defaults): ``hidden`` encoder widths (the
            decoder mirrors them; the paper's 100-64-32); the initial clustering
            (``initial``, ``local_k``, ``k_max``, ``epochs``); ``alpha``, ``theta`` (eq. 2's
            percentile and threshold, paper 75 and 0.2, the authors' code 0.25); ``tau`` (a
            participant freezes when its consecutive assignments agree >= tau);
            ``fedavg_rounds``, ``fedavg_epochs``; ``max_iterations``; ``refine_with``: the
            federated models a participant refines with, every group's ("all", the authors'
            code; on MNIST at d = 0.5 final ACC 0.80 against 0.67) or its own groups' only
            ("groups", the narrower reading of Algorithm 2).
        stable_window, stable_tolerance: stop when group and isolated counts varied by at
            most ``stable_tolerance`` (relative) over the last ``stable_window`` iterations.
        seed: algorithmic randomness; every participant seed is derived from it.
        summation: how a group of >= 3 participants sums its FedAvg statistic (the service's
            masking); None, and every smaller group, sums in the clear.
        evaluate: simulator-only hook measuring the participants against true labels; called
            with None after the initial clustering and after each refinement, and with the
            grouping right after it is found (for wrong associations).
        on_iteration: observer called with each finished iteration.
    """
    owner = "run_fedcref"
    params = params if params is not None else FedCRefParams()
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
    spec = AutoencoderSpec(widths.pop(), tuple(params.hidden))
    rng = rng_from(seed)

    seeds = _seeds(rng, names)
    initial_k = tuple(
        reply.k for reply in gather_required(
            participants,
            lambda i, _: msg.FedCRefInitTask(
                hidden=spec.hidden, initial=params.initial, k=params.local_k, k_max=params.k_max,
                epochs=params.epochs, seed=seeds[names[i]],
            ),
            msg.FedCRefInitReply,
            concurrent=True,
        )
    )
    initial_accuracy = evaluate(None).mean_accuracy if evaluate is not None else None

    active = set(names)
    history: list[tuple[int, int]] = []
    records: list[FedCRefIteration] = []
    group_models: list[NDArray[np.float32]] = []
    stop: FedCRefStop = "max_iterations"
    for it in range(1, params.max_iterations + 1):
        seeds = _seeds(rng, names)
        gather_required(
            participants, lambda i, _: msg.FedCRefTrainTask(seed=seeds[names[i]]),  # noqa: B023
            msg.AckReply, concurrent=True,
        )
        grouping = _associate(participants, spec, alpha=params.alpha, theta=params.theta)
        wrong = evaluate(grouping).wrong_associations if evaluate is not None else None

        group_models = []
        small: list[int] = []
        for g in range(len(grouping.groups)):
            if len(grouping.participants(g)) < MIN_PROTECTED_MEMBERS:
                small.append(g)
            group_models.append(
                _train_group(
                    participants, grouping, g, spec, summation, rng,
                    rounds=params.fedavg_rounds, epochs=params.fedavg_epochs,
                )
            )

        theirs: dict[str, list[NDArray[np.float32]]] = {n: [] for n in names}
        for g, _members in enumerate(grouping.groups):
            takers = range(len(names)) if params.refine_with == "all" else grouping.participants(g)
            for i in takers:
                theirs[names[i]].append(group_models[g])
        refining = [p for p in participants if p.name in active]
        refine_seeds = _seeds(rng, names)
        agreements = [
            reply.agreement for reply in gather_required(
                refining,
                lambda _, p: msg.FedCRefRefineTask(
                    models=_stack(theirs[p.name], spec.n_params),  # noqa: B023
                    seed=refine_seeds[p.name],  # noqa: B023
                ),
                msg.FedCRefRefineReply,
                concurrent=True,
            )
        ]
        frozen = tuple(
            p.name
            for p, a in zip(refining, agreements, strict=True)
            if client_frozen(a, tau=params.tau)
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
