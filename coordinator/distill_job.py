"""A "fed-distill" job over remote participants: ``run_fed_distill`` over the wire.

The driver sends its distillation tasks (``distill_train``, ``distill_counts``,
``distill_soft``, ``distill_step`` of ``protocol.wire.messages``) to ``RemoteParticipant``
proxies, a round at once; :func:`run_distill_job` passes the job's summation, which, when the
job's protection is "masking", sums each group's soft predictions by pairwise masking
(``coordinator.secure_sum.MaskedSummation``). A group of fewer than 3 members cannot be
masked: it is asked in the clear, and the driver's notes and ``unprotected_groups`` say so.
The label-count vectors are always plain: the grouping needs each participant's vector, as
in the paper (Yang & Tae 2023, §3).

The seeds follow ``run_fed_distill`` from the job's seed and the order of
``spec.participants``, so a simulation of the same participants in the same order with the
same seed finds the same groups.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from fedclust.coordinator.distillation import FedDistillResult, run_fed_distill
from fedclust.coordinator.remote import RemoteParticipant
from fedclust.coordinator.secure_sum import Summation
from fedclust.protocol.algorithms.fed_distill_params import DistillParams
from fedclust.protocol.wire.messages import JobCreate, ResultDocument

__all__ = ["distill_result_document", "run_distill_job"]


def run_distill_job(
    remotes: Sequence[RemoteParticipant],
    spec: JobCreate,
    *,
    summation: Summation | None = None,
    on_stage: Callable[[str], None] | None = None,
    evaluate: Callable[[RemoteParticipant], float] | None = None,
) -> FedDistillResult:
    """Run the "fed-distill" job ``spec`` over ``remotes`` (in ``spec.participants`` order;
    ValueError for a job of another algorithm).

    ``summation`` (masking) protects the group sums; None sums them in the clear.
    ``evaluate`` is the driver's simulator-only hook (``fedclust.deep_simulate``: in-process
    participants with test rows).
    """
    params = spec.params(DistillParams)
    if on_stage is not None:
        on_stage("distilling")
    return run_fed_distill(
        remotes, params, seed=spec.seed, summation=summation, evaluate=evaluate
    )


def distill_result_document(
    result: FedDistillResult, spec: JobCreate, *, secure_notes: Sequence[str] = ()
) -> ResultDocument:
    """The result document of a "fed-distill" job: no sweep; the grouping in ``groups``."""
    return ResultDocument(
        algorithm=spec.algorithm, participants=len(spec.participants), seed=spec.seed,
        standardised=False, protection=spec.protection, k_selected=len(result.groups),
        k_elbow=None, sweep=[], notes=[*result.notes, *secure_notes],
        groups=[list(g) for g in result.groups],
        unprotected_groups=[list(g) for g in result.unprotected_groups],
    )


def procedure(
    remotes: Sequence[RemoteParticipant],
    spec: JobCreate,
    *,
    summation: Summation | None,
    on_stage: Callable[[str], None],
    notes: Sequence[str],
) -> ResultDocument:
    """The registered procedure of "fed-distill" (``protocol.algorithms.fed_distill``): the
    job and its result document, with ``notes`` (the job's so far) and the summation's."""
    result = run_distill_job(remotes, spec, summation=summation, on_stage=on_stage)
    summed = [] if summation is None else summation.notes
    return distill_result_document(result, spec, secure_notes=[*notes, *summed])
