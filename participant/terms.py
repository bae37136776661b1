"""What a job's declared terms let a coordinator ask: the agent's check of every task.

The ``declare`` task carries the job's terms (the analyst's :class:`protocol.messages.JobCreate`,
validated by the API's own validators when the task is read); the agent keeps them with the
job's state and refuses any later task of the job they do not allow, before computing
anything. The check is a function of the task and the terms only, never of the rows, so a
refusal answers no question about the data (a coordinator cannot probe N_l with crafted
``local_k`` or ``fcm_sums`` tasks):

- the task's algorithm is the job's;
- its kind is one the job's algorithm sends (:data:`ALGORITHM_KINDS`): local centers
  (``local_fcm``, ``kfed_centers``) only for the algorithms that send them by design
  (fedfcm-avg, kfed); ``apply_standardisation`` only if the job standardises (its
  ``moment_sums`` also give the fuzzy algorithms' initial box and the N of those left after
  a dropout, so they are part of every K sweep); ``local_k`` only if it declared a
  ``local_k_range``;
- its protection is the job's: under "masking" a sum-type statistic (``SumTaskSpec``) travels
  only inside a masking stage, under "paillier" only inside a Paillier input, and the other
  scheme's stages are refused; under "none" the secure stages are refused. Under "masking"
  the model-based drivers send the sums of groups too small to mask (fewer than
  :data:`MIN_MASKED_GROUP` members) in the clear, as the job's result states: a bare
  ``fedcref_fedavg`` is answered only for such a group (its ``members``); a bare
  ``distill_soft`` names no group, so it cannot be checked and is answered (soft predictions
  on the public set, and the constant 1);
- its K within the declared ones: a task's centers at most the largest declared K (a sweep
  validates fewer centers when clusters are empty), a ``k`` of seeding or k-FED among the
  declared K, ``local_k``'s range inside ``local_k_range``, FedCRef's local K as declared.
"""

from __future__ import annotations

from typing import Final, get_args

from fedclust.crypto.masking import DEFAULT_MIN_COHORT
from fedclust.protocol import messages as msg
from fedclust.protocol.errors import RefusedError

__all__ = ["ALGORITHM_KINDS", "MIN_MASKED_GROUP", "SUM_KINDS", "require_task"]

#: The kinds of sum-type statistics (the statistics a secure sum can carry).
SUM_KINDS: Final[frozenset[str]] = frozenset(
    spec.model_fields["kind"].default for spec in get_args(get_args(msg.SumTaskSpec)[0])
)
#: The fewest members of a group the model-based drivers mask (the masking cohort minimum).
MIN_MASKED_GROUP: Final = DEFAULT_MIN_COHORT

_SWEEP: Final = frozenset(
    {"declare", "report_count", "moment_sums", "apply_standardisation", "local_k",
     "fuzzy_db_sums", "silhouette_sums"}
)
_CENTER_KMEANS: Final = frozenset({"center_sums", "center_scatter"})
#: The task kinds (secure stages aside) each algorithm's job sends.
ALGORITHM_KINDS: Final[dict[str, frozenset[str]]] = {
    "ffcm": _SWEEP | {"fcm_sums"},
    "fedfcm": _SWEEP | _CENTER_KMEANS | {"hold_local_fcm"},
    "fedfcm-avg": _SWEEP | {"local_fcm"},
    "fkm": _SWEEP | _CENTER_KMEANS | {"hold_kmeans_init", "hold_kmeans_step"},
    "kfed": _SWEEP | {"kfed_centers"},
    "fed-distill": frozenset(
        {"declare", "distill_train", "distill_counts", "distill_soft", "distill_step"}
    ),
    "fedcref": frozenset(
        {"declare", "fedcref_init", "fedcref_train", "fedcref_models", "fedcref_scores",
         "fedcref_fedavg", "fedcref_refine"}
    ),
}
_STAGES: Final[dict[str, frozenset[str]]] = {
    "masking": frozenset({"secure_setup", "secure_graph", "secure_input", "secure_unmask"}),
    "paillier": frozenset({"paillier_input"}),
    "none": frozenset(),
}
_ALL_STAGES: Final = frozenset().union(*_STAGES.values())


def require_task(terms: msg.JobCreate, algorithm: str, spec: msg.TaskSpec) -> None:
    """Refuse a task of algorithm ``algorithm`` that the job's declared ``terms`` do not
    allow (module docstring); the reason names the rule and public terms only."""
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
            _require_kind(terms, spec.statistic)
        return
    _require_kind(terms, spec)
    if spec.kind in SUM_KINDS and terms.protection != "none" and not _small_group(spec):
        raise _refusal(
            f"a bare {spec.kind!r} sum would reach the coordinator in the clear, but the job "
            f"declared protection {terms.protection!r}"
        )


def _require_kind(terms: msg.JobCreate, spec: msg.TaskSpec) -> None:
    """The kind and the K of one computation against the terms."""
    if spec.kind not in ALGORITHM_KINDS[terms.algorithm]:
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
        case msg.HoldKmeansInitTask(k=k) | msg.KfedCentersTask(k_local=k):
            if k not in terms.ks:
                raise _refusal(f"a {spec.kind!r} task for K={k} is outside the job's {_ks(terms)}")
        case msg.FedCRefInitTask(k=k, k_max=k_max):
            params = terms.fedcref if terms.fedcref is not None else msg.FedCRefParams()
            if (k, k_max) != (params.local_k, params.k_max):
                raise _refusal("a 'fedcref_init' task's local K differs from the job's local_k "
                               "and k_max")
    centers = getattr(spec, "centers", None)
    if isinstance(centers, msg.WireArray) and centers.shape:
        axis = 1 if isinstance(spec, msg.CenterSumsTask | msg.CenterScatterTask) else 0
        k = centers.shape[axis] if len(centers.shape) > axis else 0
        if not 1 <= k <= max(terms.ks):
            raise _refusal(
                f"a {spec.kind!r} task with {k} centers is outside the job's {_ks(terms)}"
            )


def _small_group(spec: msg.TaskSpec) -> bool:
    """A model-based group sum the drivers send in the clear whatever the protection."""
    if isinstance(spec, msg.FedCRefFedavgTask):
        return len(spec.members) < MIN_MASKED_GROUP
    return isinstance(spec, msg.DistillSoftTask)


def _ks(terms: msg.JobCreate) -> str:
    ks = terms.ks
    return f"K={ks[0]}" if len(ks) == 1 else f"K={ks[0]}..{ks[-1]}"


def _refusal(why: str) -> RefusedError:
    return RefusedError(f"{why}: the task is outside the terms the job declared; refused.")
