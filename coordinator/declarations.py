"""Stage 0 of every job: the participants' declared public bounds, and the checks on them.

Every participant is sent the job's terms (:class:`protocol.wire.messages.JobCreate`) and
answers ``declare`` with its :class:`protocol.maths.declaration.Declaration`, in the clear;
from then on the coordinator relies on those public bounds only. :func:`declare_job` gives
the :class:`JobBounds` of the fixed-point encodings (``coordinator.secure_sum``): N = the job's
``max_rows`` or the largest declared ``row_bound``; B = the job's ``value_bound`` or the largest
declared one, after standardisation B_z = max_d (B_raw + |mean_d|)/scale_d; for 'fedcref'
the job's ``value_bound`` or :data:`MODEL_PARAMETER_BOUND`. It fails the job, with one line
naming the participant, parameter and declared value, for an override below a declaration,
an 'ffcm' job whose declared bucket cannot guarantee N > K(F+1)/F to a participant enforcing
that rule, or a local clustering whose K exceeds the bucket's lower edge (``rows_allow_k``).

Design notes: ``docs/declarations.md`` (§ The coordinator's side).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from fedclust.coordinator._rounds import gather_present
from fedclust.core.errors import RefusedError
from fedclust.core.validation import FloatArray
from fedclust.protocol import algorithms
from fedclust.protocol.maths.declaration import Declaration
from fedclust.protocol.maths.exact_fcm import declared_rule_refusal, largest_allowed_k
from fedclust.protocol.wire import messages as msg
from fedclust.protocol.wire.bounds import (
    MODEL_PARAMETER_BOUND,
    local_clustering_ks,
    model_value_bound,
    rows_allow_k,
    standardised_bound,
)
from fedclust.protocol.wire.messages import JobCreate

__all__ = ["MODEL_PARAMETER_BOUND", "DeclaringParticipant", "JobBounds", "declare_job"]

class DeclaringParticipant(Protocol):
    """What stage 0 needs from a participant (local, or ``RemoteParticipant``)."""

    @property
    def name(self) -> str: ...

    def answer(self, spec: msg.TaskSpec) -> msg.Reply:
        """The reply to a task, here the :class:`~protocol.wire.messages.DeclareTask`."""
        ...


@dataclass(frozen=True)
class JobBounds:
    """The N and B of a job's encodings (module docstring) and the declarations behind them.

    ``value_bound`` bounds the values of the first stages: raw data (moments), or for
    'fedcref' model parameters, or without standardisation everything.
    """

    spec: JobCreate
    declarations: Mapping[str, Declaration]
    max_rows: int
    value_bound: float

    def standardised(self, mean: FloatArray, scale: FloatArray) -> float:
        """B for the standardised values: the job's ``value_bound`` if set, else B_z.

        Raises:
            ValueError: the job's ``value_bound`` is below B_z.
        """
        raw = max(d.value_bound for d in self.declarations.values())
        implied = standardised_bound(raw, mean, scale)
        given = self.spec.value_bound
        if given is None:
            return implied
        if given < implied:
            raise ValueError(
                f"the job's value_bound={given!r} is below {implied!r}, the bound on the "
                "standardised values that the participants' declared value bounds and the "
                "federation's mean and scale imply: raise value_bound (--value-bound) to at "
                "least that, or leave it unset to derive it."
            )
        return given


def declare_job(
    participants: Sequence[DeclaringParticipant], spec: JobCreate, *, n_features: int
) -> JobBounds:
    """Ask every participant's declaration, check the job against them, derive N and B.

    A participant that does not answer drops out of the job (its ``dropped`` reason set by
    the remote proxy); the bounds come from the others' declarations.

    Raises:
        UnavailableError: no participant answered.
        RefusedError: a participant refuses to declare (its roster rule, its policy), or
            would refuse every round of 'ffcm' by its declared size rule.
        ValueError: an override of the job is below what a declaration needs.
    """
    algorithm = algorithms.get(spec.algorithm)
    task = msg.DeclareTask(terms=spec)
    answers, names = gather_present(participants, lambda *_: task, msg.DeclarationReply)
    declarations = {n: a.to_result() for n, a in zip(names, answers, strict=True)}
    for name, d in declarations.items():
        if spec.max_rows is not None and spec.max_rows < d.row_bound:
            raise ValueError(
                f"participant {name!r} declares row_bound={d.row_bound}, above the job's "
                f"max_rows={spec.max_rows}: raise max_rows (--max-rows) to at least "
                f"{d.row_bound}, or leave it unset to derive it from the declarations."
            )
        raw_values = algorithm.family == "sweep" and not spec.standardise
        if raw_values and spec.value_bound is not None and spec.value_bound < d.value_bound:
            raise ValueError(
                f"participant {name!r} declares value_bound={d.value_bound!r}, above the "
                f"job's value_bound={spec.value_bound!r}: raise value_bound (--value-bound) "
                f"to at least {d.value_bound!r}, or leave it unset to derive it from the "
                "declarations."
            )
        if algorithm.fcm_rule and d.enforces_fcm_rule:
            _require_fcm_rule(name, d, max(spec.ks), n_features)
        _require_rows_for_k(name, d, spec)
    return JobBounds(
        spec=spec,
        declarations=declarations,
        max_rows=(
            spec.max_rows if spec.max_rows is not None
            else max(d.row_bound for d in declarations.values())
        ),
        value_bound=_first_value_bound(spec, declarations),
    )


def _first_value_bound(spec: JobCreate, declarations: Mapping[str, Declaration]) -> float:
    if spec.algorithm == "fedcref":
        return model_value_bound(spec)
    if spec.value_bound is not None and not spec.standardise:
        return spec.value_bound
    return max(d.value_bound for d in declarations.values())


def _require_rows_for_k(name: str, d: Declaration, spec: JobCreate) -> None:
    """A local clustering with K centers needs K rows: refuse a K that the declared bucket
    does not guarantee (``protocol.wire.bounds``), rather than let the participant refuse it."""
    for what, k, flag in local_clustering_ks(spec):
        if not rows_allow_k(d, k):
            raise ValueError(
                f"participant {name!r} declares {d.describe_rows()}: the job's {what} up to "
                f"{k} needs at least {k} rows at every participant, which that bucket does "
                f"not guarantee; lower it ({flag}) to at most {d.min_rows}, or leave the "
                "participant out."
            )


def _require_fcm_rule(name: str, d: Declaration, k: int, n_features: int) -> None:
    if declared_rule_refusal(d.row_bound, k, n_features) is None:
        return
    largest = largest_allowed_k(d.min_rows, n_features)
    advice = (
        f"lower k to at most {largest}, or leave the participant out"
        if largest >= 2
        else "it takes part in no exact-FCM job; leave it out of the roster"
    )
    raise RefusedError(
        f"participant {name!r} declares {d.describe_rows()} and enforces the exact-FCM size "
        f"rule (Corcuera Bárcena et al. 2021, §4): the job's k={k} needs more than "
        f"K(F+1)/F={k * (n_features + 1) / n_features:.4g} rows of F={n_features} features, "
        f"which that bucket does not guarantee; {advice}."
    )
