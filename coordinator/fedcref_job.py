"""A "fedcref" job over remote participants: ``run_fedcref`` over the wire.

The driver sends its FedCRef tasks (``fedcref_init``, ``fedcref_train``, ``fedcref_models``,
``fedcref_scores``, ``fedcref_fedavg``, ``fedcref_refine`` of ``protocol.wire.messages``;
models travel as float32 vectors) to ``RemoteParticipant`` proxies, a round at once;
:func:`run_fedcref_job` passes the job's summation, which, when the job's protection is
"masking", sums each group's FedAvg contributions (n·θ and n) by pairwise masking
(``coordinator.secure_sum.MaskedSummation``): every member receives the same
``fedcref_fedavg`` statistic, which names each member's clusters and seed. A group of fewer
than 3 participants cannot be masked: each member is asked in the clear for its own clusters,
and the driver's notes and ``unprotected_groups`` say so. The models, association scores, K_i
and agreements are plain: the association needs the models (as in the paper).

The seeds follow ``run_fedcref`` from the job's seed and the order of ``spec.participants``,
so a simulation of the same participants in the same order with the same seed finds the same
groups.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from fedclust.coordinator.fedcref import FedCRefResult, run_fedcref
from fedclust.coordinator.remote import RemoteParticipant
from fedclust.coordinator.secure_sum import Summation
from fedclust.protocol.algorithms.fedcref_params import FedCRefParams
from fedclust.protocol.maths.fedcref import ClusterRef, FedCRefEvaluation, Grouping
from fedclust.protocol.wire import messages as msg
from fedclust.protocol.wire.messages import JobCreate, ResultDocument

__all__ = ["fedcref_result_document", "run_fedcref_job"]


def run_fedcref_job(
    remotes: Sequence[RemoteParticipant],
    spec: JobCreate,
    *,
    summation: Summation | None = None,
    on_iteration: Callable[[int], None] | None = None,
    evaluate: Callable[[Grouping | None], FedCRefEvaluation] | None = None,
) -> FedCRefResult:
    """Run the "fedcref" job ``spec`` over ``remotes`` (in ``spec.participants`` order;
    ValueError for a job of another algorithm).

    ``summation`` (masking) protects the group sums; None sums them in the clear.
    ``on_iteration`` is told each finished iteration's number. ``evaluate`` is the driver's
    simulator-only hook (``fedclust.deep_simulate``: in-process participants with labels).
    """
    return run_fedcref(
        remotes, spec.params(FedCRefParams), seed=spec.seed, summation=summation,
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
