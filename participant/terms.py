"""What a job's declared terms let a coordinator ask: the agent's check of every task.

The ``declare`` task carries the job's terms (:class:`protocol.wire.messages.JobCreate`); the
agent keeps them and :func:`require_task` refuses (``RefusedError``), before computing
anything, every later task they do not allow: another algorithm, a kind the job's algorithm
does not send (``protocol.algorithms``), another protection (a sum-type statistic only inside
the job's scheme's stages; bare sums only for groups under :data:`MIN_MASKED_GROUP`), a K
outside the declared ones. Two more rules hold each task to the participant's own
declaration (:class:`OwnBounds`: R/2 < N_l <= R, |x| <= B): a local clustering with
K > R/2 + 1 centers is refused (``protocol.wire.bounds.rows_allow_k``), and a secure-sum field
must be encoded under at least :func:`encoding_floor`. Every check is a function of the task,
the terms and the declaration, never of the rows, so a refusal reveals nothing of the data.
At the declaration, :func:`require_feature_names` holds the job's named features to the
participant's configured columns.

Design notes: ``docs/declarations.md`` (§ The participant's check of every task).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final, get_args

from fedclust.core.errors import RefusedError
from fedclust.crypto.masking import DEFAULT_MIN_COHORT
from fedclust.protocol import algorithms
from fedclust.protocol.algorithms.fed_distill_params import DistillParams
from fedclust.protocol.algorithms.fedcref_params import FedCRefParams
from fedclust.protocol.maths.declaration import Declaration
from fedclust.protocol.wire import messages as msg
from fedclust.protocol.wire.bounds import (
    field_bounds,
    model_value_bound,
    rows_allow_k,
    standardised_bound,
    task_value_bound,
)

__all__ = [
    "MIN_MASKED_GROUP", "SUM_KINDS", "OwnBounds", "encoding_floor",
    "held_bounds", "require_feature_names", "require_task",
]

#: The kinds of sum-type statistics (the statistics a secure sum can carry).
SUM_KINDS: Final[frozenset[str]] = frozenset(
    spec.model_fields["kind"].default for spec in get_args(get_args(msg.SumTaskSpec)[0])
)
#: The fewest members of a group the model-based drivers mask (the masking cohort minimum).
MIN_MASKED_GROUP: Final = DEFAULT_MIN_COHORT

_STAGES: Final[dict[str, frozenset[str]]] = {
    "masking": frozenset({"secure_setup", "secure_graph", "secure_input", "secure_unmask"}),
    "paillier": frozenset({"paillier_input"}),
    "none": frozenset(),
}
_ALL_STAGES: Final = frozenset().union(*_STAGES.values())
_HOLD_FCM = msg.HoldLocalFcmTask
_HOLD_KMEANS = (msg.HoldKmeansInitTask, msg.HoldKmeansStepTask)


@dataclass(frozen=True)
class OwnBounds:
    """A participant's own public bounds in one job, which its refusals about sizes and
    magnitudes are a function of (with the task and the terms).

    Attributes:
        declaration: what it declared (row_bound R, raw value_bound B).
        n_features: the width of its rows (the federation's schema).
        value_bound: the bound on the values it holds now: B, or after standardisation
            ``protocol.wire.bounds.standardised_bound`` of B and the mean and scale applied.
        held: public bounds of the local centers a hold task keeps (:func:`held_bounds`):
            their total weight W and the B their objective was computed under; None before.
    """

    declaration: Declaration
    n_features: int
    value_bound: float
    held: tuple[float, float] | None = None

    @classmethod
    def of(
        cls,
        declaration: Declaration,
        n_features: int,
        standardisations: Iterable[tuple[Sequence[float], Sequence[float]]] = (),
        held: tuple[float, float] | None = None,
    ) -> OwnBounds:
        """The bounds after the (mean, scale) ``standardisations`` applied, in order."""
        bound = declaration.value_bound
        for mean, scale in standardisations:
            bound = standardised_bound(bound, mean, scale)
        return cls(declaration, n_features, bound, held)


def held_bounds(spec: msg.TaskSpec, own: OwnBounds) -> tuple[float, float] | None:
    """The public bounds (W, B) of the local centers a hold task keeps, None for another
    task: ``hold_local_fcm`` keeps its K centers of weight 1 (W = K) and J_m of its centers
    (B of that task); the k-means holds keep local means weighted by their counts (W = R)."""
    if isinstance(spec, _HOLD_FCM):
        return float(spec.centers.shape[0]), task_value_bound(spec, own.value_bound)
    if isinstance(spec, _HOLD_KMEANS):
        return float(own.declaration.row_bound), own.value_bound
    return None


def encoding_floor(
    terms: msg.JobCreate, statistic: msg.SumTaskSpec, own: OwnBounds
) -> dict[str, float]:
    """The least bound each field of ``statistic`` can need at this participant:
    ``protocol.wire.bounds.field_bounds`` at N = its R and B = the task's B (for 'fedcref' the
    job's model bound, as the coordinator's), for the center statistics raised to the held
    centers' B, with W their total weight (R before a hold)."""
    if terms.algorithm == "fedcref":
        bound = model_value_bound(terms)
    else:
        bound = task_value_bound(statistic, own.value_bound)
    if isinstance(statistic, msg.StatisticTask) and (
        algorithms.statistic(statistic.name).reads == "held"
    ):
        weight, held = own.held or (float(own.declaration.row_bound), own.value_bound)
        bound = max(bound, held)
        params = {**statistic.params, "weight_bound": weight}
        statistic = statistic.model_copy(update={"params": params})
    return field_bounds(
        statistic, n_features=own.n_features, max_rows=own.declaration.row_bound,
        value_bound=bound,
    )


def require_task(
    terms: msg.JobCreate, algorithm: str, spec: msg.TaskSpec, own: OwnBounds
) -> None:
    """Refuse a task of algorithm ``algorithm`` that the job's declared ``terms`` or this
    participant's ``own`` bounds do not allow (module docstring); the reason names the rule
    and public numbers only."""
    if algorithm != terms.algorithm:
        raise RefusedError(
            f"the job declared algorithm {terms.algorithm!r}; a task of {algorithm!r} is not "
            "part of it: refused."
        )
    if spec.kind in _ALL_STAGES:
        if spec.kind not in _STAGES[terms.protection]:
            raise _refusal(
                f"a {spec.kind!r} stage is not part of a job of protection {terms.protection!r}"
            )
        if isinstance(spec, msg.SecureInputTask | msg.PaillierInputTask):
            _require_kind(terms, spec.statistic, own)
            _require_encoding(terms, spec, own)
        return
    _require_kind(terms, spec, own)
    if spec.kind in SUM_KINDS and terms.protection != "none" and not _small_group(spec):
        raise _refusal(
            f"a bare {msg.task_name(spec)!r} sum would reach the coordinator in the clear, but "
            f"the job declared protection {terms.protection!r}"
        )


def require_feature_names(
    terms: msg.JobCreate, n_features: int, columns: Sequence[str] | Sequence[int] | None
) -> None:
    """Refuse a job whose declared ``feature_names`` do not describe this participant's rows:
    their number must be its ``n_features`` (the public width it enrolled with) and, where it
    configures its columns by name (``[data] columns``), they must be those names in that
    order. A participant that names no columns (all numeric columns, or ``.npy`` indices)
    checks the number only. The refusal is one fixed text: it reveals that the names differ,
    never where or the participant's own column names (those stay in its configuration)."""
    names = terms.feature_names
    if names is None:
        return
    if len(names) != n_features:
        raise RefusedError(
            f"the job names {len(names)} feature(s) but this participant's rows have "
            f"{n_features} columns: refused."
        )
    if columns is None or not all(isinstance(c, str) for c in columns):
        return
    if list(names) != list(columns):
        raise RefusedError(
            "the job's feature_names are not this participant's [data] columns, in order: "
            "refused."
        )


def _require_encoding(
    terms: msg.JobCreate, spec: msg.SecureInputTask | msg.PaillierInputTask, own: OwnBounds
) -> None:
    """Every field's bound at least its :func:`encoding_floor`."""
    floor = encoding_floor(terms, spec.statistic, own)
    for e in spec.encoding:
        need = floor.get(e.name)
        if need is not None and e.bound < need:
            raise RefusedError(
                f"field {e.name!r} of a {msg.task_name(spec.statistic)!r} sum is encoded under "
                f"bound {e.bound!r}, below {need!r}, the least this participant's declared "
                f"{own.declaration.describe_rows()} and value bound {own.value_bound!r} can "
                "need: refused (a bound is checked against the declaration, never the rows)."
            )


def _local_k(spec: msg.TaskSpec) -> int | None:
    """The K of the local clustering a task runs on the rows, None for another task."""
    match spec:
        case (
            msg.LocalKTask(k_max=k) | msg.HoldKmeansInitTask(k=k)
            | msg.KfedCentersTask(k_local=k) | msg.KfedDennisCentersTask(k_local=k)
        ):
            return k
        case msg.LocalFcmTask(centers=centers) | msg.HoldLocalFcmTask(centers=centers):
            return centers.shape[0] if centers.shape else 0
        case msg.FedCRefInitTask(initial="kmeans", k=int(k)):
            return k
    return None


def _require_kind(terms: msg.JobCreate, spec: msg.TaskSpec, own: OwnBounds) -> None:
    """The kind and the K of one computation against the terms and the declaration."""
    if spec.kind not in algorithms.get(terms.algorithm).tasks:
        raise _refusal(f"a {terms.algorithm!r} job sends no {spec.kind!r} task")
    match spec:
        case msg.ApplyStandardisationTask() if not terms.standardise:
            raise _refusal("the job does not standardise, so it sends no "
                           "'apply_standardisation' task")
        case msg.LocalKTask(k_min=k_min, k_max=k_max):
            rng = terms.local_k_range
            if rng is None:
                raise _refusal("the job declared no local_k_range, so it sends no 'local_k' task")
            if not rng[0] <= k_min <= k_max <= rng[1]:
                raise _refusal(
                    f"local_k over [{k_min}, {k_max}] is outside the job's local_k_range "
                    f"[{rng[0]}, {rng[1]}]"
                )
        case (
            msg.HoldKmeansInitTask(k=k) | msg.KfedCentersTask(k_local=k)
            | msg.KfedDennisCentersTask(k_local=k)
        ):
            if k not in terms.ks:
                raise _refusal(f"a {spec.kind!r} task for K={k} is outside the job's {_ks(terms)}")
        case (
            msg.DistillTrainTask() | msg.DistillCountsTask() | msg.DistillSoftTask()
            | msg.DistillStepTask()
        ) if not _distill_terms(terms.params(DistillParams), spec):
            raise _refusal(
                f"a {spec.kind!r} task's public set, n_classes or classifier differs from the "
                "job's distill block"
            )
        case msg.FedCRefFedavgTask(members=group) | msg.DistillSoftTask(members=group) if not (
            set(group) <= set(terms.participants)
        ):
            raise _refusal(f"a {spec.kind!r} task names a group outside the job's participants")
        case msg.StatisticTask(name=name) if name not in algorithms.get(terms.algorithm).statistics:
            raise _refusal(f"a {terms.algorithm!r} job asks no {name!r} statistic")
        case msg.FedCRefInitTask(k=k, k_max=k_max):
            params = terms.params(FedCRefParams)
            if (k, k_max) != (params.local_k, params.k_max):
                raise _refusal("a 'fedcref_init' task's local K differs from the job's local_k "
                               "and k_max")
    k_local = _local_k(spec)
    if k_local is not None and not rows_allow_k(own.declaration, k_local):
        raise RefusedError(
            f"a {spec.kind!r} task clusters the local rows into up to {k_local} clusters, "
            f"which needs {k_local} rows; this participant declares "
            f"{own.declaration.describe_rows()}, so it refuses any K above "
            f"{own.declaration.min_rows} (a rule on the declared bucket, never the rows): "
            "refused."
        )
    centers = getattr(spec, "centers", None)
    if isinstance(centers, msg.WireArray) and centers.shape:
        axis = max(len(centers.shape) - 2, 0)  # K of (K, D) centers or (S, K, D) starts
        k = centers.shape[axis] if len(centers.shape) > axis else 0
        if not 1 <= k <= max(terms.ks):
            raise _refusal(
                f"a {msg.task_name(spec)!r} task with {k} centers is outside the job's {_ks(terms)}"
            )


def _distill_terms(params: DistillParams, spec: msg.TaskSpec) -> bool:
    """Whether a fed-distill task predicts on the job's public set and trains the job's
    classifier (its ``n_classes`` and ``classifier``), as declared in its distill block."""
    match spec:
        case msg.DistillTrainTask(n_classes=n, classifier=kind):
            return (n, kind) == (params.n_classes, params.classifier)
        case msg.DistillCountsTask(public=public, n_classes=n) | msg.DistillSoftTask(
            public=public, n_classes=n
        ):
            return (public, n) == (params.public, params.n_classes)
        case msg.DistillStepTask(public=public):
            return public == params.public
    return True


def _small_group(spec: msg.TaskSpec) -> bool:
    """A model-based group sum the drivers send in the clear whatever the protection: one
    whose group (``members``, named in the task and checked against the job's participants)
    has fewer than :data:`MIN_MASKED_GROUP`."""
    if isinstance(spec, msg.FedCRefFedavgTask | msg.DistillSoftTask):
        return len(spec.members) < MIN_MASKED_GROUP
    return False


def _ks(terms: msg.JobCreate) -> str:
    ks = terms.ks
    return f"K={ks[0]}" if len(ks) == 1 else f"K={ks[0]}..{ks[-1]}"


def _refusal(why: str) -> RefusedError:
    return RefusedError(f"{why}: the task is outside the terms the job declared; refused.")
