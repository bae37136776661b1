"""A "fed-distill" job over remote participants: ``run_fed_distill`` with wire tasks.

:class:`RemoteDistiller` turns the driver's participant calls into the distillation tasks of
``protocol.wire.messages`` (``distill_train``, ``distill_counts``, ``distill_soft``,
``distill_step``); :func:`run_distill_job` runs the driver with, when the job's protection is
"masking", an ``aggregate`` hook that sums each group's soft predictions by pairwise masking
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

import numpy as np

from fedclust.coordinator.distillation import (
    MIN_PROTECTED_MEMBERS,
    FedDistillResult,
    run_fed_distill,
    sum_contributions,
)
from fedclust.coordinator.remote import RemoteParticipant
from fedclust.coordinator.secure_sum import Summation
from fedclust.core.validation import FloatArray
from fedclust.protocol.maths import distillation as dist
from fedclust.protocol.wire import messages as msg
from fedclust.protocol.wire.messages import DistillParams, JobCreate, ResultDocument

__all__ = ["RemoteDistiller", "distill_result_document", "run_distill_job"]

Contribution = dict[str, FloatArray]
#: The batch sizes of the authors' code (local training, distillation), used when the job's
#: ``batch_size`` is absent.
LOCAL_BATCH, DISTILL_BATCH = 32, 64


class RemoteDistiller:
    """A remote participant as ``coordinator.distillation.DistillParticipantLike``."""

    def __init__(self, remote: RemoteParticipant, params: DistillParams) -> None:
        self._remote = remote
        self._params = params
        self._public = params.public

    @property
    def name(self) -> str:
        return self._remote.name

    @property
    def n_features(self) -> int:
        return self._remote.n_features

    def answer(self, spec: msg.TaskSpec) -> msg.Reply:
        """One stage of a secure sum (``coordinator.secure_sum``)."""
        return self._remote.answer(spec)

    def train_local(self, *, seed: int) -> None:
        p = self._params
        spec = msg.DistillTrainTask(
            seed=seed, n_classes=p.n_classes, classifier=p.classifier,
            max_epochs=p.local_epochs, learning_rate=p.learning_rate,
            batch_size=p.batch_size if p.batch_size is not None else LOCAL_BATCH,
        )
        self._remote.ask(spec, msg.AckReply)

    def predict_counts(self, public_X: FloatArray) -> Contribution:
        spec = msg.DistillCountsTask(public=self._public, n_classes=self._params.n_classes)
        reply = self._remote.ask(spec, msg.DistillCountsReply)
        return {dist.LABEL_COUNTS: reply.label_counts.to_numpy().astype(np.float64)}

    def soft_task(self) -> msg.DistillSoftTask:
        """The soft-prediction statistic of this job (plain or inside a secure sum)."""
        return msg.DistillSoftTask(public=self._public, n_classes=self._params.n_classes)

    def predict_soft(self, public_X: FloatArray) -> Contribution:
        return _contribution(self._remote.ask(self.soft_task(), msg.DistillSoftReply))

    def distill(
        self, teacher: FloatArray, public_X: FloatArray, *, temperature: float, epochs: int,
        seed: int,
    ) -> None:
        p = self._params
        spec = msg.DistillStepTask(
            public=self._public, teacher=msg.WireArray.of(teacher), temperature=temperature,
            epochs=epochs, seed=seed, learning_rate=p.learning_rate,
            batch_size=p.batch_size if p.batch_size is not None else DISTILL_BATCH,
        )
        self._remote.ask(spec, msg.AckReply)


def _contribution(reply: msg.DistillSoftReply) -> Contribution:
    """The driver's names for the wire's summed fields."""
    return {dist.SOFT_SUM: reply.soft_sum.to_numpy(), dist.COUNT: reply.members.to_numpy()}


def masked_soft_sums(
    summation: Summation,
) -> Callable[[Sequence[RemoteDistiller], Callable[[RemoteDistiller], Contribution]],
              Contribution]:
    """The driver's ``aggregate`` hook: a group of >= 3 members is summed by ``summation``
    (every member must take part); a smaller group is summed in the clear (noted by the
    driver)."""

    def aggregate(
        members: Sequence[RemoteDistiller], ask: Callable[[RemoteDistiller], Contribution]
    ) -> Contribution:
        if len(members) < MIN_PROTECTED_MEMBERS:
            return sum_contributions(members, ask)
        total, _ = summation.sum(
            members, members[0].soft_task(), msg.DistillSoftReply, required=True
        )
        return _contribution(total)

    return aggregate


def run_distill_job(
    remotes: Sequence[RemoteParticipant],
    spec: JobCreate,
    *,
    summation: Summation | None = None,
    on_stage: Callable[[str], None] | None = None,
    evaluate: Callable[[RemoteDistiller], float] | None = None,
) -> FedDistillResult:
    """Run the "fed-distill" job ``spec`` over ``remotes`` (in ``spec.participants`` order).

    ``summation`` (masking) protects the group sums; None sums them in the clear.
    ``evaluate`` is the driver's simulator-only hook (``fedclust.deep_simulate``: in-process
    participants with test rows).
    """
    params = spec.distill
    if params is None or spec.algorithm != "fed-distill":
        raise ValueError("run_distill_job needs a 'fed-distill' job with a distill block.")
    if on_stage is not None:
        on_stage("distilling")
    members = [RemoteDistiller(r, params) for r in remotes]
    return run_fed_distill(
        members, params.public.to_numpy(), distance_threshold=params.distance_threshold,
        temperature=params.temperature, epochs=params.epochs, mode=params.mode,
        seed=spec.seed,
        aggregate=None if summation is None else masked_soft_sums(summation),
        evaluate=evaluate,
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
