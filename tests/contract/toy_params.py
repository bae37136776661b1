"""A toy algorithm with parameters of its own, written as a newcomer would: this module only.

"toy-tuned-fcm" is :mod:`tests.contract.toy_algorithm`'s damped exact FCM with the damping a
job parameter: its parameters model :class:`DampingParams`, the job's ``damping`` block
(absent: the model's default), from which the wire format, the OpenAPI document and the
command line's ``--damping`` flag are made. ``JobCreate``'s blocks are made when
``protocol.wire.messages`` is imported, so the algorithm must be registered before, as an
installed package's entry point in ``protocol.algorithms.PLUGIN_GROUP`` is (:data:`SPECS`):
this module imports only the registry and ``core`` (the procedure is named, not imported). The
model may sit beside the spec here; the built-in algorithms keep theirs in modules of their
own, so that the registry imports no pydantic.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pydantic import Field

from fedclust.core.models import Strict
from fedclust.protocol.algorithms import SWEEP_STATISTICS, SWEEP_TASKS, AlgorithmSpec

if TYPE_CHECKING:
    from fedclust.coordinator.result import FederatedResult, RunOptions


class DampingParams(Strict):
    """The parameters of a "toy-tuned-fcm" job."""

    damping: float = Field(
        default=0.5, gt=0.0, le=1.0,
        description="The fraction of the way to the FCM target centers taken each round.",
    )


SPEC = AlgorithmSpec(
    name="toy-tuned-fcm",
    title="Exact federated FCM with a damped combine step of a given damping (a test's toy)",
    family="sweep",
    tasks=SWEEP_TASKS,
    statistics=SWEEP_STATISTICS | {"fcm_sums"},
    procedure_path=f"{__name__}:procedure",
    params_block="damping",
    params_path=f"{__name__}:DampingParams",
    # "undamped": exact federated FCM's own step (Corcuera Bárcena et al., Alg. 1).
    presets={"undamped": {"damping": 1.0}},
    plain_notes=(
        "toy-tuned-fcm: each participant's local sums Σu^m and Σu^m·x per cluster reach the "
        "coordinator in the clear, every round."
    ),
    protected_notes=(
        "toy-tuned-fcm, protected: the coordinator learns only ΣU_c and ΣWS_c over each "
        "round's participants, hence the damped global centers."
    ),
    fuzzy=True,
)


#: What the registry registers when an entry point names this module.
SPECS = (SPEC,)


def procedure(participants: Sequence[Any], k: int, options: RunOptions) -> FederatedResult:
    """Damped exact FCM for one K with the job's damping (``options.params``)."""
    from tests.contract.toy_algorithm import damped_fcm

    params = options.params
    assert isinstance(params, DampingParams)  # the job's block, or the model's defaults
    return damped_fcm(participants, k, options, params.damping)
