"""Choosing K: a federated sweep over a K range scored by FedFuzzDB (Stallmann & Wilbik §2.2.3).

For every K the chosen algorithm runs to completion; then one validation round collects each
participant's FedFuzzDB sums against the final centers, and the index is computed with ΣN_l
obtained from a separate counting service (``total_count``), so the coordinator never learns
any participant's N_l (eq. 14–16). The selected K is the minimum of the index; the elbow of
the curve is reported beside it.

A participant that dropped out during the sweep (it did not answer a task in time) is left
out of the validation too: FedFuzzDB is then computed over the participants left, with
their N from their summed memberships (memberships sum to 1 per row) instead of the
counting service's ΣN_l of everyone, and the result says so. The memberships' sum is part
of what the masked sum releases anyway; with the total over everyone it tells the
coordinator the dropped participants' rows together, which the note states.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from numpy.typing import ArrayLike
from pydantic import BaseModel

from fedclust.coordinator._rounds import dropped, present, resolve_init
from fedclust.coordinator.result import FederatedResult, ProgressCallback, RoundRecord, RunOptions
from fedclust.coordinator.secure_sum import PlainSummation, Summation
from fedclust.coordinator.standardise import pooled_mean_scale
from fedclust.core.validation import FloatArray, check_int, rng_from
from fedclust.protocol import algorithms
from fedclust.protocol.maths import choose_k, validity
from fedclust.protocol.wire import messages as msg
from fedclust.protocol.wire.messages import Algorithm


class SweepParticipant(Protocol):
    """What the sweep itself asks of a participant (the algorithms ask more)."""

    name: str

    def answer(self, spec: msg.TaskSpec) -> msg.Reply:
        """The reply to a task, here the ``moment_sums`` and ``fuzzy_db_sums`` statistics."""
        ...


@dataclass(frozen=True)
class SweepEntry:
    """One K of the sweep: the run's result and its FedFuzzDB value (of the centers with
    support: fewer than K when ``empty_clusters`` > 0)."""

    k: int
    fed_fuzzy_db: float
    result: FederatedResult

    @property
    def empty_clusters(self) -> int:
        """Clusters of the K that no point supports (the run reports fewer centers)."""
        return self.k - int(self.result.centers.shape[0])


@dataclass(frozen=True)
class Survivors:
    """The participants left after dropouts and their rows N (from summed memberships)."""

    names: tuple[str, ...]
    rows: int


@dataclass(frozen=True)
class SweepResult:
    """The sweep: one entry per K, the K of minimum FedFuzzDB and the elbow K; with
    dropouts, ``survivors`` of the last validation over the participants left."""

    algorithm: Algorithm
    entries: tuple[SweepEntry, ...]
    k_selected: int
    k_elbow: int | None
    notes: tuple[str, ...] = field(default=())
    survivors: Survivors | None = None

    def entry(self, k: int) -> SweepEntry:
        """The entry of one K."""
        for e in self.entries:
            if e.k == k:
                return e
        raise KeyError(f"K={k} was not part of the sweep")


def initial_centers(
    box: tuple[FloatArray, FloatArray], k: int, rng: np.random.Generator
) -> FloatArray:
    """K centers drawn uniformly from the box mean ± √3·std of the pooled data.

    The box has the pooled data's mean and variance per feature (one round of moment sums,
    ``coordinator.standardise.pooled_mean_scale``: aggregates only). It replaces the
    authors' uniform [0, 1]^d start, which assumes data already scaled to the unit cube.
    """
    mean, scale = box
    half = np.sqrt(3.0) * scale
    return rng.uniform(mean - half, mean + half, size=(k, mean.shape[0]))


def run_algorithm(
    algorithm: Algorithm,
    participants: Sequence[Any],
    k: int,
    *,
    seed: int | np.random.Generator | None = None,
    m: float = 2.0,
    eps: float = 1e-3,
    max_rounds: int = 100,
    gamma: float = 1.0,
    init: FloatArray | None = None,
    init_given: bool = False,
    on_round: Callable[[RoundRecord], None] | None = None,
    summation: Summation | None = None,
    params: BaseModel | None = None,
) -> FederatedResult:
    """Run one federated clustering algorithm for one K through the participants.

    The registry's procedure of ``algorithm`` runs (``protocol.algorithms``). ``init``, the
    (K, D) global centers the run starts from: the sweep's draw for a fuzzy algorithm, or
    with ``init_given`` the analyst's (``RunOptions.init_given``), for the algorithms that
    take them (``takes_init``); None leaves the driver's own seeding (the fuzzy drivers:
    uniform in [0, 1]^D; federated k-means: k-means++ at every participant). With a ``summation``
    every sum-type statistic travels protected; an algorithm that sends local centers by
    design (``plain_only``) is refused. The random draws do not depend on the protection.
    ``params``: the algorithm's own parameters (``RunOptions.params``).
    """
    spec = algorithms.get(algorithm, "sweep")
    if init is not None and (init_given or not spec.fuzzy):  # (fuzzy: the sweep's draw)
        _require_takes_init(spec)
    summation = summation if summation is not None else PlainSummation()
    if summation.protected and spec.plain_only:
        raise ValueError(
            f"{algorithm!r} sends each participant's local centers by design; run it with "
            "protection 'none'."
        )
    options = RunOptions(
        rng=rng_from(seed), m=m, eps=eps, max_rounds=max_rounds, gamma=gamma, init=init,
        init_given=init_given, on_round=on_round, summation=summation, params=params,
    )
    result: FederatedResult = spec.procedure()(participants, k, options)
    return result


def fed_fuzzy_db(
    participants: Sequence[SweepParticipant],
    centers: FloatArray,
    total_count: Callable[[], int],
    *,
    m: float = 2.0,
    q: float = 1.0,
    p: float = 2.0,
    summation: Summation | None = None,
) -> float:
    """FedFuzzDB of centers: one round of sums, ΣN_l from the counting service (eq. 14–16)."""
    score, _ = validate(participants, centers, total_count, m=m, q=q, p=p, summation=summation)
    return score


def validate(
    participants: Sequence[SweepParticipant],
    centers: FloatArray,
    total_count: Callable[[], int],
    *,
    m: float = 2.0,
    q: float = 1.0,
    p: float = 2.0,
    summation: Summation | None = None,
) -> tuple[float, Survivors | None]:
    """:func:`fed_fuzzy_db` over the participants that have not dropped out; with dropouts
    also who was left and their N (see the module docstring)."""
    live = present(participants)
    summation = summation if summation is not None else PlainSummation()
    task = msg.StatisticTask.of("fuzzy_db_sums", centers, m=m, q=q)
    total, _ = summation.sum(live, task, msg.StatisticReply, required=True)
    sums = [validity.FuzzyDBSums(
        spread=total.fields["spread"].to_numpy(), membership=total.fields["membership"].to_numpy()
    )]
    if len(live) == len(participants):
        return validity.combine_fuzzy_db(sums, centers, total_count(), q=q, p=p), None
    rows = round(sum(float(np.sum(s.membership)) for s in sums))
    survivors = Survivors(tuple(part.name for part in live), rows)
    score = validity.combine_fuzzy_db(sums, centers, max(rows, 1), q=q, p=p, count_rtol=None)
    return score, survivors


def _require_takes_init(spec: algorithms.AlgorithmSpec) -> None:
    if not spec.takes_init:
        raise ValueError(f"{spec.name!r} takes no init: it does not start from global centers.")


def given_init(
    init: ArrayLike, algorithm: Algorithm, ks: Sequence[int], n_features: int
) -> FloatArray:
    """The analyst's initial centers ``init`` checked against the job: an algorithm that
    takes them (``takes_init``) and one K; then :func:`_rounds.resolve_init` checks its K rows
    of the data's D columns.

    Raises:
        ValueError: naming ``init`` and what it must be.
    """
    _require_takes_init(algorithms.get(algorithm, "sweep"))
    if len(ks) != 1:
        raise ValueError(
            f"init gives the initial centers of one K; the sweep has {len(ks)} K values."
        )
    return resolve_init(init, ks[0], n_features, None)


def run_sweep(
    algorithm: Algorithm,
    participants: Sequence[Any],
    ks: Sequence[int],
    *,
    total_count: Callable[[], int],
    seed: int | np.random.SeedSequence | None = None,
    init: ArrayLike | None = None,
    m: float = 2.0,
    q: float = 1.0,
    p: float = 2.0,
    eps: float = 1e-3,
    max_rounds: int = 100,
    gamma: float = 1.0,
    on_progress: ProgressCallback | None = None,
    summation: Summation | None = None,
    params: BaseModel | None = None,
) -> SweepResult:
    """Sweep K over ``ks``; select the K with the smallest FedFuzzDB (§2.2.3).

    FedFuzzDB needs K >= 2 (its max over j ≠ i is empty for K = 1). With a ``summation``
    every sum (moments, the algorithm's, FedFuzzDB's) travels protected. Every random draw
    comes from one tree, ``SeedSequence(seed)``: per K one stream for the initial centers
    and one for the algorithm, the same whatever the protection. ``init`` (one K only:
    :func:`given_init`) starts the run from the analyst's centers instead of drawn ones; no
    moment round is then needed for the fuzzy algorithms' box. A K whose points could not
    fill K clusters (``SweepEntry.empty_clusters``) is not selected while another K is
    complete. ``params``: the algorithm's own parameters, for every run (``RunOptions``).
    """
    if len(ks) == 0:
        raise ValueError("The K range is empty; give at least one K >= 2.")
    for k in ks:
        check_int(k, name="k", owner="run_sweep", low=2)
    root = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
    entries = []
    notes: list[str] = []
    given = None
    if init is not None:
        given = given_init(init, algorithm, ks, participants[0].n_features)
    box = None
    if given is None and algorithms.get(algorithm).fuzzy:
        before = present(participants)
        box = pooled_mean_scale(participants, total_count, two_pass=False, summation=summation)
        notes.extend(
            f"participant {p.name!r} dropped out while the initial centers' box was summed "
            f"({dropped(p)}); the sweep went on without it"
            for p in before
            if dropped(p) is not None
        )
    survivors: Survivors | None = None
    for k, stream in zip(ks, root.spawn(len(ks)), strict=True):
        init_stream, algorithm_stream = (np.random.default_rng(s) for s in stream.spawn(2))
        init = given if box is None else initial_centers(box, k, init_stream)
        on_round = None
        if on_progress is not None:
            on_progress("clustering", k, None)
            on_round = functools.partial(on_progress, "clustering", k)
        result = run_algorithm(
            algorithm, participants, k, seed=algorithm_stream, m=m, eps=eps,
            max_rounds=max_rounds, gamma=gamma, init=init, init_given=given is not None,
            on_round=on_round, summation=summation, params=params,
        )
        if result.centers.shape[0] < 2:
            raise ValueError(
                f"K={k}: the participants' local centers fill fewer than two clusters; there "
                "is no clustering to score."
            )
        if on_progress is not None:
            on_progress("validating", k, None)
        score, left = validate(
            participants, result.centers, total_count, m=m, q=q, p=p, summation=summation
        )
        entries.append(SweepEntry(k=k, fed_fuzzy_db=score, result=result))
        notes.extend(f"K={k}: {note}" for note in result.notes)
        if left is not None:
            survivors = left
            notes.append(
                f"K={k}: FedFuzzDB over the participants left ({', '.join(left.names)}), "
                "with their N from their summed memberships, not the counting service's "
                "total: the coordinator can tell the rows of those who dropped out together."
            )
    complete = [e for e in entries if e.empty_clusters == 0] or entries
    k_list = [e.k for e in complete]
    scores = [e.fed_fuzzy_db for e in complete]
    k_elbow = choose_k.select_elbow(k_list, scores) if len(k_list) >= 3 else None
    return SweepResult(
        algorithm=algorithm,
        entries=tuple(entries),
        k_selected=choose_k.select_minimum(k_list, scores),
        k_elbow=k_elbow,
        notes=tuple(notes),
        survivors=survivors,
    )
