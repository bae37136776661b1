"""In-process simulator: a federation of :class:`LocalParticipant` objects in one process.

It runs the very functions the network service runs — participant computations from
``protocol`` behind :class:`participant.local.LocalParticipant`, round drivers from
``coordinator`` — and an in-process stand-in for the separate counting service, so the
coordinator side sees only what a participant sends it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike
from pydantic import BaseModel

from fedclust.coordinator.job import JobOutcome, result_document, run_job
from fedclust.coordinator.paillier_sum import JobKeyHolder
from fedclust.coordinator.result import ProgressCallback
from fedclust.coordinator.secure_sum import JobSummation
from fedclust.coordinator.summations import job_summation
from fedclust.coordinator.sweep import SweepResult
from fedclust.core.validation import check_data, check_int
from fedclust.counting.keyholder import MemoryPaillierStore, PaillierKeyHolder
from fedclust.crypto.masking import IdentityKey
from fedclust.data.federations import Federation
from fedclust.participant.dispatch import SecureStages
from fedclust.participant.local import LocalParticipant
from fedclust.participant.paillier_input import PaillierSession
from fedclust.participant.secure import PeerPins, SecureMember, SecureSession
from fedclust.protocol import algorithms
from fedclust.protocol.maths import metrics
from fedclust.protocol.wire.messages import (
    Algorithm,
    JobCreate,
    ProtectionScheme,
    ResultDocument,
    draw_seed,
)

SIMULATION_JOB_ID = "simulation"


class CountingService:
    """In-process stand-in for the counting service: takes each N_l, releases only ΣN_l.

    As the real service (``counting``), it releases the total only once every participant
    of the roster has reported, and the roster has at least ``min_participants``: a total
    released at R and again at R + 1 reporters would give away the last one's N_l.
    (Stallmann & Wilbik §2.2.3 recommend a party other than the coordinator for this.)
    It serves one roster, so the real service's guard against differencing the totals of
    several rosters (:mod:`protocol.maths.release_guard`) has nothing to refuse here: the multiples
    of one roster's indicator vector give no count of fewer than ``min_participants``.
    """

    def __init__(self, roster: Sequence[str], *, min_participants: int = 3) -> None:
        self._min = check_int(
            min_participants, name="min_participants", owner="CountingService", low=1
        )
        self._roster = frozenset(roster)
        self._counts: dict[str, int] = {}

    def report(self, participant: str, count: int) -> None:
        """Record one roster participant's N_l (a second report from it is refused)."""
        if participant not in self._roster:
            raise PermissionError(f"participant {participant!r} is not on the roster")
        if participant in self._counts:
            raise ValueError(f"participant {participant!r} has already reported its count")
        check_int(count, name="count", owner="CountingService.report", low=1)
        self._counts[participant] = count

    def total(self) -> int:
        """ΣN_l, refused below the minimum cohort or before the whole roster reported."""
        if len(self._roster) < self._min:
            raise PermissionError(
                f"the counting service releases ΣN_l only for at least {self._min} "
                f"participants; the roster has {len(self._roster)}."
            )
        if len(self._counts) < len(self._roster):
            raise PermissionError(
                f"only {len(self._counts)} of the roster's {len(self._roster)} participants "
                "have reported their counts."
            )
        return sum(self._counts.values())


@dataclass(frozen=True)
class SimulationReport:
    """A simulation's outcome; :meth:`to_document` gives the CLI's ``--json`` document."""

    dataset: str
    spec: JobCreate
    outcome: JobOutcome
    ari: tuple[float, ...] | None = None
    client_weighted_ari: tuple[float, ...] | None = None

    @property
    def sweep(self) -> SweepResult:
        return self.outcome.sweep

    @property
    def local_k(self) -> tuple[int, ...] | None:
        return self.outcome.local_k

    def to_document(self) -> ResultDocument:
        """The result document, the same model the service returns."""
        return result_document(
            self.outcome, self.spec, dataset=self.dataset, ari=self.ari,
            client_weighted_ari=self.client_weighted_ari,
        )


def job_spec(
    federation: Federation,
    *,
    algorithm: Algorithm,
    ks: Sequence[int],
    seed: int | None = None,
    standardise: bool = False,
    local_ks: Sequence[int] | None = None,
    m: float = 2.0,
    eps: float = 1e-3,
    max_rounds: int = 100,
    gamma: float = 1.0,
    protection: ProtectionScheme = "masking",
    max_rows: int | None = None,
    value_bound: float | None = None,
    min_center_contributors: int = 1,
    masking_graph: Literal["auto", "full"] = "auto",
    init: ArrayLike | None = None,
    params: BaseModel | None = None,
) -> JobCreate:
    """The job a simulation runs, participants named ``participant-0``, ``participant-1``, ...

    Without a ``seed`` one is drawn (:func:`protocol.wire.messages.draw_seed`) and recorded
    in the job, so the result names the seed that replays it. The feature names are the
    federation's columns (its loader's), when it has them.

    ``max_rows`` and ``value_bound`` override the bounds of the protected sums, which are
    otherwise derived from the participants' declarations (``coordinator.declarations``).
    ``params``, the algorithm's own parameters (its registered ``params`` model), is the
    job's block of them (``params_block``).

    Raises:
        ValueError: ``ks`` is neither one K nor a contiguous range, or a parameter is invalid.
    """
    k_list = sorted(int(k) for k in ks)
    if not k_list or k_list != list(range(k_list[0], k_list[-1] + 1)):
        raise ValueError("ks must be one K or a contiguous range of K values.")
    block = algorithms.get(algorithm).params_block
    if params is not None and block is None:
        raise ValueError(f"params: {algorithm!r} has no parameters of its own")
    blocks = {} if params is None or block is None else {block: params}
    return JobCreate(
        algorithm=algorithm,
        participants=[f"participant-{i}" for i in range(len(federation.parts))],
        k=k_list[0] if len(k_list) == 1 else None,
        k_range=None if len(k_list) == 1 else (k_list[0], k_list[-1]),
        seed=draw_seed() if seed is None else seed,
        standardise=standardise,
        local_k_range=None if local_ks is None else (min(local_ks), max(local_ks)),
        m=m, eps=eps, max_rounds=max_rounds, gamma=gamma, protection=protection,
        max_rows=max_rows, value_bound=value_bound,
        min_center_contributors=min_center_contributors, masking_graph=masking_graph,
        init=None if init is None else check_data(init, name="init").tolist(),
        feature_names=None if federation.feature_names is None else list(federation.feature_names),
        **blocks,
    )


def _protected(
    spec: JobCreate, participants: list[LocalParticipant]
) -> tuple[list[Any], JobSummation | None]:
    """The participants and the summation of ``spec.protection``.

    Masking: fresh identity keys per simulation. Paillier: an in-process key holder plays the
    counting service's part (key pair, contribution records, decryption of whole rounds).
    ``run_job`` sets the summation's bounds from the participants' declarations.
    """
    if spec.protection == "none":
        return list(participants), None
    names = [p.name for p in participants]
    keys = {name: IdentityKey.generate() for name in names}
    holder = PaillierKeyHolder(MemoryPaillierStore.with_rosters({SIMULATION_JOB_ID: names}))
    stages: dict[str, SecureStages]
    if spec.protection == "masking":
        stages = {
            p.name: SecureStages(
                SecureSession(
                    p, participant_id=p.name, job_id=SIMULATION_JOB_ID, identity=keys[p.name],
                    pins=PeerPins(),
                ),
                None,
            )
            for p in participants
        }
    else:

        def announcer(name: str) -> Callable[[int], None]:
            return lambda r: holder.record_contribution(SIMULATION_JOB_ID, r, name)

        stages = {
            p.name: SecureStages(
                None,
                PaillierSession(
                    p, participant_id=p.name, job_id=SIMULATION_JOB_ID,
                    announce=announcer(p.name),
                    expected_key=lambda: holder.public_key(SIMULATION_JOB_ID),
                ),
            )
            for p in participants
        }
    members = [
        SecureMember(p, stages[p.name], algorithm=spec.algorithm, job_id=SIMULATION_JOB_ID)
        for p in participants
    ]
    summation = job_summation(
        spec, SIMULATION_JOB_ID,
        identity_keys=lambda: {name: key.public_bytes() for name, key in keys.items()},
        key_holder=lambda: JobKeyHolder(SIMULATION_JOB_ID, holder.public_key, holder.decrypt),
        concurrent=False,
    )
    return members, summation


def simulate(
    federation: Federation,
    *,
    algorithm: Algorithm,
    ks: Sequence[int],
    seed: int | None = None,
    standardise: bool = False,
    local_ks: Sequence[int] | None = None,
    m: float = 2.0,
    eps: float = 1e-3,
    max_rounds: int = 100,
    gamma: float = 1.0,
    min_cohort: int = 3,
    protection: ProtectionScheme = "masking",
    max_rows: int | None = None,
    value_bound: float | None = None,
    min_center_contributors: int = 1,
    masking_graph: Literal["auto", "full"] = "auto",
    init: ArrayLike | None = None,
    params: BaseModel | None = None,
    on_progress: ProgressCallback | None = None,
) -> SimulationReport:
    """Run a K sweep of ``algorithm`` over the federation, in process.

    Args:
        federation: the participants' datasets.
        algorithm: a registered sweep algorithm (``protocol.algorithms``).
        ks: the K values to sweep: one value, or a contiguous range.
        seed: seeds every algorithmic random choice (initialisations, sampling); None:
            one is drawn and recorded in the result (:func:`job_spec`).
        standardise: z-score the features with federated moments first (Σx, Σx², ΣN_l).
        local_ks: if given, each participant also reports its local-only choice of K
            over this range (Stallmann §2.2.3), and the rule-of-thumb range is reported.
        m, eps, max_rounds, gamma: the algorithms' parameters.
        min_cohort: the counting service's minimum number of reporting participants.
        protection: how sum-type statistics travel: "masking" (default), "paillier" or
            "none" (every participant's statistics in the clear, as in the papers).
        max_rows, value_bound: overrides of the protected sums' bounds (default: derived
            from the participants' declared bounds; an override below a declaration fails).
        min_center_contributors: withhold (in the result document) a center that fewer
            participants stand behind.
        masking_graph: whom each participant masks with ("auto": SecAgg+'s sparse graph
            where the cohort is large enough; "full": every pair).
        init: (K, D) initial centers in the data's units, for one K and an algorithm that
            starts from global centers (the job's ``init``); None: the algorithm's seeding.
        params: the algorithm's own parameters, an instance of its registered ``params``
            model (the job's block of them); None: the model's defaults, if it has one.
        on_progress: told of each stage and round, as the coordinator's job runner is.
    """
    spec = job_spec(
        federation, algorithm=algorithm, ks=ks, seed=seed, standardise=standardise,
        local_ks=local_ks, m=m, eps=eps, max_rounds=max_rounds, gamma=gamma,
        protection=protection, max_rows=max_rows, value_bound=value_bound,
        min_center_contributors=min_center_contributors, masking_graph=masking_graph,
        init=init, params=params,
    )
    names = spec.participants
    counter = CountingService(names, min_participants=min_cohort)
    participants = [
        LocalParticipant(X, name=name, count_sink=counter.report)
        for name, X in zip(names, federation.parts, strict=True)
    ]
    members, summation = _protected(spec, participants)
    outcome = run_job(
        members, spec, total_count=counter.total, summation=summation, on_progress=on_progress
    )
    if federation.labels is None:
        return SimulationReport(dataset=federation.name, spec=spec, outcome=outcome)
    truth = list(federation.labels)
    found = [[p.assign(e.result.centers) for p in participants] for e in outcome.sweep.entries]
    return SimulationReport(
        dataset=federation.name, spec=spec, outcome=outcome,
        ari=tuple(metrics.adjusted_rand(np.concatenate(truth), np.concatenate(f)) for f in found),
        client_weighted_ari=tuple(metrics.client_weighted_ari(truth, f) for f in found),
    )
