"""One federated job from the counts to the result document, for simulator and service alike.

A job (:class:`protocol.wire.messages.JobCreate`) runs these stages through the participants:

0. every participant declares its public bounds, checked against the job, which give the
   bounds of the protected sums (``coordinator.declarations``);
1. every participant reports N_l to the counting service (the coordinator learns nothing);
2. optionally, federated standardisation (Σx, Σx² rounds; ΣN_l from the counting service);
3. optionally, each participant's local-only choice of K (Stallmann & Wilbik §2.2.3);
4. the K sweep of the chosen algorithm, scored by FedFuzzDB (``coordinator.sweep``);
5. the simplified silhouette of every K's centers.

A participant that does not answer a task in time drops out of the job, at any stage: the
job goes on over the participants left while at least
:data:`~coordinator._rounds.MIN_PROTECTED_MEMBERS` are (else it fails saying so), and the
result's notes name who dropped out and when. The counting service's ΣN_l is asked once
every participant has reported, and never after a dropout at the count (its total would no
longer fit); the N of those left after dropouts comes from their own summed moments
(``coordinator.standardise.PresentRows``), or, for FedFuzzDB and the silhouette, from their
summed memberships (``coordinator.sweep``).

The same function runs over :class:`participant.local.LocalParticipant` objects in the
simulator and over :class:`coordinator.remote.RemoteParticipant` proxies in the service.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedclust.coordinator._rounds import (
    dropout_note,
    dropped,
    gather_present,
    present,
    require_cohort,
)
from fedclust.coordinator.declarations import declare_job
from fedclust.coordinator.result import ProgressCallback
from fedclust.coordinator.secure_sum import JobSummation, PlainSummation, Summation
from fedclust.coordinator.standardise import PresentRows, standardise_federation
from fedclust.coordinator.sweep import SweepResult, given_init, run_sweep
from fedclust.core.errors import UnavailableError
from fedclust.core.validation import FloatArray
from fedclust.protocol import algorithms
from fedclust.protocol.maths import choose_k, validity
from fedclust.protocol.wire import messages as msg
from fedclust.protocol.wire.messages import JobCreate, ResultDocument, SweepEntryDocument

__all__ = ["JobOutcome", "result_document", "run_job"]

_SEED_BOUND = 2**31 - 1


@dataclass(frozen=True)
class JobOutcome:
    """What a job computed: the sweep, each K's silhouette, the local K's (of the participants
    that gave one), the scaling; ``notes`` of the stages before the sweep (dropouts)."""

    sweep: SweepResult
    silhouette: tuple[float, ...]
    local_k: tuple[int, ...] | None
    mean: FloatArray | None
    scale: FloatArray | None
    secure_notes: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    def centers(self, index: int) -> FloatArray:
        """The centers of sweep entry ``index`` in the data's original units."""
        centers = self.sweep.entries[index].result.centers
        if self.mean is None or self.scale is None:
            return centers
        return centers * self.scale + self.mean


def run_job(
    participants: Sequence[Any],
    spec: JobCreate,
    *,
    total_count: Callable[[], int],
    on_progress: ProgressCallback | None = None,
    summation: JobSummation | None = None,
) -> JobOutcome:
    """Run every stage of ``spec`` through ``participants``; ΣN_l from ``total_count``.

    ``summation`` carries every sum-type statistic protected (``spec.protection``); it must
    be given exactly when the protection is not "none".

    ``total_count`` is asked at most once, after every participant has reported (module
    docstring): the total cannot change within a job, so the later stages reuse it.

    ``on_progress(stage, k, round_record)`` is told of each stage ("declaring", "counting",
    "standardising", "local_k", "clustering", "validating", "silhouette") and of every
    finished round.

    Raises:
        RefusedError: among others, fewer than the minimum left after dropouts.
    """

    algorithm = algorithms.get(spec.algorithm)
    if algorithm.family != "sweep":
        raise ValueError(
            f"a {spec.algorithm!r} job runs with its registered procedure "
            f"({algorithm.procedure_path}), not run_job."
        )
    if (summation is None) != (spec.protection == "none"):
        raise ValueError(
            f"a job with protection {spec.protection!r} needs "
            f"{'no' if spec.protection == 'none' else 'a'} summation."
        )
    sums: Summation = PlainSummation() if summation is None else summation

    def stage(name: str) -> None:
        if on_progress is not None:
            on_progress(name, None, None)

    notes: list[str] = []
    noted: set[str] = set()

    def left_out(during: str) -> None:
        """Note who dropped out ``during`` a stage; fail below the minimum cohort."""
        for p in participants:
            reason = dropped(p)
            if reason is not None and p.name not in noted:
                noted.add(p.name)
                notes.append(dropout_note(p.name, during, reason))
        require_cohort(participants)

    init = None
    if spec.init is not None:  # checked before any participant is asked anything
        init = given_init(spec.init, spec.algorithm, spec.ks, participants[0].n_features)
    stage("declaring")
    bounds = declare_job(participants, spec, n_features=participants[0].n_features)
    left_out("at the declaration")
    if summation is not None:
        summation.set_bounds(max_rows=bounds.max_rows, value_bound=bounds.value_bound)

    stage("counting")
    gather_present(participants, lambda *_: msg.ReportCountTask(), msg.AckReply)
    left_out("at the count")
    rows = PresentRows(
        participants, total_count, value_bound=bounds.value_bound, summation=sums
    )
    if len(present(participants)) == len(participants):
        rows()  # the counting service's total, released now that everyone has reported

    local_k_stream, sweep_stream = np.random.SeedSequence(spec.seed).spawn(2)
    mean = scale = None
    if spec.standardise:
        stage("standardising")
        mean, scale = standardise_federation(participants, rows, summation=sums)
        left_out("during standardisation")
        z_bound = rows.value_bound = bounds.standardised(mean, scale)
        if summation is not None:
            summation.set_bounds(max_rows=bounds.max_rows, value_bound=z_bound)
    if init is not None:
        init = _init_in_units(init, mean, scale, None if summation is None else rows.value_bound)
    local_k = None
    if spec.local_k_range is not None:
        stage("local_k")
        lo, hi = spec.local_k_range
        rng = np.random.default_rng(local_k_stream)
        seeds = [int(rng.integers(_SEED_BOUND)) for _ in participants]
        by_name = {p.name: s for p, s in zip(participants, seeds, strict=True)}
        answers, _ = gather_present(
            participants,
            lambda _, p: msg.LocalKTask(k_min=lo, k_max=hi, m=spec.m, seed=by_name[p.name]),
            msg.LocalKReply,
        )
        local_k = tuple(a.k for a in answers)
        left_out("while choosing its local K")
    sweep = run_sweep(
        spec.algorithm, participants, spec.ks, total_count=rows,
        seed=sweep_stream, init=init, m=spec.m, eps=spec.eps,
        max_rounds=spec.max_rounds, gamma=spec.gamma, on_progress=on_progress,
        summation=sums, params=spec.algorithm_params,
    )
    stage("silhouette")
    live, n_rows = _scored(participants, sweep, rows)
    silhouette = []
    for entry in sweep.entries:
        centers = entry.result.centers
        task = msg.StatisticTask.of("silhouette_sums", centers)
        total, _ = sums.sum(live, task, msg.StatisticReply, required=True)
        summed = validity.SilhouetteSums(total=float(total.fields["total"].to_numpy()[0]))
        silhouette.append(validity.combine_silhouette([summed], n_rows))
    return JobOutcome(
        sweep=sweep, silhouette=tuple(silhouette), local_k=local_k, mean=mean, scale=scale,
        secure_notes=tuple(sums.notes),
        notes=(*notes, *rows.notes),
    )


def _init_in_units(
    init: FloatArray, mean: FloatArray | None, scale: FloatArray | None, bound: float | None
) -> FloatArray:
    """The job's ``init`` in the units the algorithms see (z-scores when the job
    standardises), checked, for a protected job, against the value bound B the encodings
    rest on: the bounds' table assumes centers within [-2B, 2B] (``protocol.wire.bounds``),
    and a participant refuses a task whose centers are beyond.

    Raises:
        ValueError: a coordinate of ``init`` beyond 2B.
    """
    units = init if mean is None or scale is None else (init - mean) / scale
    largest = float(np.max(np.abs(units)))
    if bound is not None and largest > 2.0 * bound:
        where = " (as z-scores)" if mean is not None else ""
        raise ValueError(
            f"init has a coordinate of magnitude {largest:.6g}{where}, beyond twice the value "
            f"bound {bound:.6g} the protected sums are encoded for; give initial centers "
            "within the data's range, or a larger value_bound."
        )
    return units


def _scored(
    participants: Sequence[Any], sweep: SweepResult, total_count: Callable[[], int]
) -> tuple[list[Any], int]:
    """Who the silhouette is scored over and their N: everyone and ΣN_l, or after dropouts
    the participants left and the N of the sweep's last validation over them.

    Raises:
        UnavailableError: participants dropped out after the last validation.
    """
    live = present(participants)
    if len(live) == len(participants):
        return live, total_count()
    left = sweep.survivors
    if left is None or set(left.names) != {p.name for p in live}:
        raise UnavailableError(
            "participants dropped out after the last validation; the silhouette cannot be "
            "scored over those left"
        )
    return live, left.rows


def result_document(
    outcome: JobOutcome,
    spec: JobCreate,
    *,
    dataset: str | None = None,
    ari: Sequence[float] | None = None,
    client_weighted_ari: Sequence[float] | None = None,
) -> ResultDocument:
    """The result document of a job (``simulate --json``, ``demo --json`` and the API):
    every K's centers, the job's seed and feature names; ``ari`` and ``client_weighted_ari``
    per K where labels are known (the simulator).

    A center that fewer than ``spec.min_center_contributors`` participants stand behind is
    withheld (None) with a note saying why.
    """
    entries = []
    withheld_notes = []
    for i, e in enumerate(outcome.sweep.entries):
        contributors = e.result.contributors
        centers: list[list[float] | None] = list(np.asarray(outcome.centers(i)).tolist())
        if contributors is not None:
            for j, n in enumerate(contributors):
                if n < spec.min_center_contributors:
                    centers[j] = None
                    withheld_notes.append(
                        f"K={e.k}: center {j} withheld: {int(n)} participant(s) stand behind "
                        f"it, fewer than min_center_contributors={spec.min_center_contributors}."
                    )
        entries.append(
            SweepEntryDocument(
                k=e.k,
                fed_fuzzy_db=e.fed_fuzzy_db,
                centers=centers,
                rounds=e.result.n_rounds,
                stop_reason=e.result.stop_reason,
                simplified_silhouette=outcome.silhouette[i],
                ari=None if ari is None else float(ari[i]),
                client_weighted_ari=(
                    None if client_weighted_ari is None else float(client_weighted_ari[i])
                ),
                center_contributors=(
                    None if contributors is None else [int(n) for n in contributors]
                ),
                empty_clusters=e.empty_clusters,
            )
        )
    local = outcome.local_k
    return ResultDocument(
        algorithm=spec.algorithm,
        dataset=dataset,
        participants=len(spec.participants),
        seed=spec.seed,
        standardised=spec.standardise,
        protection=spec.protection,
        k_selected=outcome.sweep.k_selected,
        k_elbow=outcome.sweep.k_elbow,
        sweep=entries,
        notes=[*outcome.notes, *outcome.sweep.notes, *outcome.secure_notes, *withheld_notes],
        local_k=None if local is None else list(local),
        k_range_rule_of_thumb=None if local is None else choose_k.k_range_rule_of_thumb(local),
        feature_names=spec.feature_names,
    )
