"""A "fedcref" job over remote participants: ``run_fedcref`` with wire tasks.

:class:`RemoteFedCRef` turns the driver's participant calls into the FedCRef tasks of
``protocol.wire.messages`` (``fedcref_init``, ``fedcref_train``, ``fedcref_models``,
``fedcref_scores``, ``fedcref_fedavg``, ``fedcref_refine``); models travel as float32
vectors. :func:`run_fedcref_job` runs the driver with, when the job's protection is
"masking", an ``aggregate`` hook that sums each group's FedAvg contributions (n·θ and n) by
pairwise masking (``coordinator.secure_sum.MaskedSummation``): every member receives the same
``fedcref_fedavg`` statistic, which names each member's clusters and seed. A group of fewer
than 3 participants cannot be masked: it is asked in the clear, and the driver's notes and
``unprotected_groups`` say so. The models, association scores, K_i and agreements are plain:
the association needs the models (as in the paper).

The seeds follow ``run_fedcref`` from the job's seed and the order of ``spec.participants``,
so a simulation of the same participants in the same order with the same seed finds the same
groups.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from numpy.typing import NDArray

from fedclust.coordinator.fedcref import (
    MIN_PROTECTED_MEMBERS,
    FedAvgRequest,
    FedCRefResult,
    run_fedcref,
    sum_contributions,
)
from fedclust.coordinator.remote import RemoteParticipant
from fedclust.coordinator.secure_sum import Summation
from fedclust.core.validation import FloatArray
from fedclust.protocol.maths.fedcref import AutoencoderSpec, ClusterRef, FedCRefEvaluation, Grouping
from fedclust.protocol.wire import messages as msg
from fedclust.protocol.wire.messages import FedCRefParams, JobCreate, ResultDocument

__all__ = ["RemoteFedCRef", "fedcref_result_document", "run_fedcref_job"]

Contribution = dict[str, NDArray[np.float64]]


def _stack(models: Sequence[NDArray[np.float32]], n_params: int) -> msg.WireArray:
    """Models as one float32 (M, n_params) wire array (M may be 0)."""
    if not models:
        return msg.WireArray.of(np.zeros((0, n_params), dtype=np.float32))
    return msg.WireArray.of(np.stack([np.asarray(m, dtype=np.float32) for m in models]))


class RemoteFedCRef:
    """A remote participant as ``coordinator.fedcref.FedCRefParticipant``."""

    def __init__(self, remote: RemoteParticipant, params: FedCRefParams) -> None:
        self._remote = remote
        self._params = params
        self._n_params = 0

    @property
    def name(self) -> str:
        return self._remote.name

    @property
    def n_features(self) -> int:
        return self._remote.n_features

    def answer(self, spec: msg.TaskSpec) -> msg.Reply:
        """One stage of a secure sum (``coordinator.secure_sum``)."""
        return self._remote.answer(spec)

    def fedcref_init(self, spec: AutoencoderSpec, *, seed: int) -> int:
        p = self._params
        self._n_params = spec.n_params
        task = msg.FedCRefInitTask(
            hidden=spec.hidden, initial=p.initial, k=p.local_k, k_max=p.k_max,
            epochs=p.epochs, seed=seed,
        )
        return self._remote.ask(task, msg.FedCRefInitReply).k

    def fedcref_train(self, *, seed: int) -> None:
        self._remote.ask(msg.FedCRefTrainTask(seed=seed), msg.AckReply)

    def fedcref_models(self) -> list[NDArray[np.float32]]:
        reply = self._remote.ask(msg.FedCRefModelsTask(), msg.FedCRefModelsReply)
        return [row.astype(np.float32) for row in reply.models.to_numpy()]

    def fedcref_scores(
        self, models: Sequence[NDArray[np.float32]], *, alpha: float
    ) -> FloatArray:
        task = msg.FedCRefScoresTask(models=_stack(models, self._n_params), alpha=alpha)
        scores: FloatArray = self._remote.ask(task, msg.FedCRefScoresReply).scores.to_numpy()
        return scores

    def fedavg_task(self, request: FedAvgRequest) -> msg.FedCRefFedavgTask:
        """The wire statistic of one FedAvg sum (the same for every member of the group)."""
        return msg.FedCRefFedavgTask(
            model=None if request.model is None else msg.WireArray.of(
                np.asarray(request.model, dtype=np.float32)
            ),
            n_params=self._n_params,
            members={name: list(ids) for name, ids in request.clusters.items()},
            seeds=dict(request.seeds),
            epochs=request.epochs,
        )

    def fedcref_fedavg_step(
        self,
        model: NDArray[np.float32] | None,
        clusters: Sequence[int],
        *,
        epochs: int,
        seed: int,
    ) -> Contribution:
        request = FedAvgRequest(model, {self.name: tuple(clusters)}, {self.name: seed}, epochs)
        return _contribution(self._remote.ask(self.fedavg_task(request), msg.FedCRefFedavgReply))

    def fedcref_refine(self, group_models: Sequence[NDArray[np.float32]], *, seed: int) -> float:
        task = msg.FedCRefRefineTask(models=_stack(group_models, self._n_params), seed=seed)
        return self._remote.ask(task, msg.FedCRefRefineReply).agreement


def _contribution(reply: msg.FedCRefFedavgReply) -> Contribution:
    """The driver's names for the wire's summed fields."""
    return {"weighted_params": reply.weighted_params.to_numpy(), "n": reply.rows.to_numpy()}


def masked_fedavg_sums(
    summation: Summation,
) -> Callable[[Sequence[RemoteFedCRef], FedAvgRequest], Contribution]:
    """The driver's ``aggregate`` hook: a group of >= 3 participants is summed by
    ``summation`` (every member must take part); a smaller group in the clear (noted by the
    driver)."""

    def aggregate(members: Sequence[RemoteFedCRef], request: FedAvgRequest) -> Contribution:
        if len(members) < MIN_PROTECTED_MEMBERS:
            return sum_contributions(members, request)
        total, _ = summation.sum(
            members, members[0].fedavg_task(request), msg.FedCRefFedavgReply, required=True
        )
        return _contribution(total)

    return aggregate


def run_fedcref_job(
    remotes: Sequence[RemoteParticipant],
    spec: JobCreate,
    *,
    summation: Summation | None = None,
    on_iteration: Callable[[int], None] | None = None,
    evaluate: Callable[[Grouping | None], FedCRefEvaluation] | None = None,
) -> FedCRefResult:
    """Run the "fedcref" job ``spec`` over ``remotes`` (in ``spec.participants`` order).

    ``summation`` (masking) protects the group sums; None sums them in the clear.
    ``on_iteration`` is told each finished iteration's number. ``evaluate`` is the driver's
    simulator-only hook (``fedclust.deep_simulate``: in-process participants with labels).
    """
    if spec.algorithm != "fedcref":
        raise ValueError("run_fedcref_job needs a 'fedcref' job.")
    params = spec.fedcref if spec.fedcref is not None else FedCRefParams()
    members = [RemoteFedCRef(r, params) for r in remotes]
    return run_fedcref(
        members, hidden=params.hidden, alpha=params.alpha, theta=params.theta, tau=params.tau,
        fedavg_rounds=params.fedavg_rounds, fedavg_epochs=params.fedavg_epochs,
        max_iterations=params.max_iterations, refine_with=params.refine_with, seed=spec.seed,
        aggregate=None if summation is None else masked_fedavg_sums(summation),
        on_iteration=None if on_iteration is None else lambda r: on_iteration(r.iteration),
        evaluate=evaluate,
    )


def fedcref_result_document(
    result: FedCRefResult, spec: JobCreate, *, secure_notes: Sequence[str] = ()
) -> ResultDocument:
    """The result document of a "fedcref" job: the last grouping as ``participant:cluster``
    references, the isolated clusters, one record per iteration; ``unprotected_groups`` are
    the groups whose sums were formed in the clear (all of them without protection)."""
    names = result.participants

    def ref(c: ClusterRef) -> str:
        return f"{names[c[0]]}:{c[1]}"

    grouping = result.grouping
    small = set(result.iterations[-1].small_groups) if result.iterations else set()
    if spec.protection == "none":
        small = set(range(len(grouping.groups)))
    return ResultDocument(
        algorithm=spec.algorithm, participants=len(spec.participants), seed=spec.seed,
        standardised=False, protection=spec.protection, k_selected=len(grouping.groups),
        k_elbow=None, sweep=[], notes=[*result.notes, *secure_notes],
        groups=[[ref(c) for c in g] for g in grouping.groups],
        unprotected_groups=[
            [ref(c) for c in g] for i, g in enumerate(grouping.groups) if i in small
        ],
        isolated_clusters=[ref(c) for c in grouping.isolated],
        iterations=[
            msg.GroupingIteration(
                iteration=r.iteration, groups=r.n_groups, isolated_clusters=r.n_isolated,
                frozen=list(r.frozen),
            )
            for r in result.iterations
        ],
        stop_reason=result.stop_reason,
    )


def procedure(
    remotes: Sequence[RemoteParticipant],
    spec: JobCreate,
    *,
    summation: Summation | None,
    on_stage: Callable[[str], None],
    notes: Sequence[str],
) -> ResultDocument:
    """The registered procedure of "fedcref" (``protocol.algorithms.fedcref``): the job,
    each iteration reported as a stage, and its result document, with ``notes`` (the job's
    so far) and the summation's."""
    on_stage("fedcref iteration 1")
    result = run_fedcref_job(
        remotes, spec, summation=summation,
        on_iteration=lambda it: on_stage(f"fedcref iteration {it + 1}"),
    )
    summed = [] if summation is None else summation.notes
    return fedcref_result_document(result, spec, secure_notes=[*notes, *summed])
