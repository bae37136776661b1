"""Wire messages of fedclust, protocol version 1: the single source of the REST format.

Every model is strict (unknown fields are refused) and frozen. Arrays travel as
:class:`WireArray`: raw little-endian bytes in base64 with dtype and shape, exact to the bit
(no decimal strings); a float array must be finite.

Flow of one job (coordinator ⇄ participant agents, participants → counting service):

- the coordinator queues a :class:`Task` per participant; its ``spec`` is one of the
  ``*Task`` models (discriminated by ``kind``);
- the participant answers with a :class:`Contribution` whose ``reply`` is the matching
  ``*Reply`` model, or a :class:`RefusalReply` stating why its policy forbids the task;
- a :class:`ReportCountTask` is answered by sending a :class:`CountReport` to the counting
  service and an :class:`AckReply` to the coordinator: no reply model has a field for N_l;
- every job begins with a :class:`DeclareTask`, answered by a :class:`DeclarationReply`: the
  participant's declared public bounds (``protocol.maths.declaration``), in the clear.

Error responses never echo submitted values.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, Final, Literal, TypeVar

import numpy as np
from numpy.typing import NDArray
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    create_model,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema

from fedclust.core.errors import ProtocolError, RefusedError
from fedclust.core.models import MAX_ARRAY_ELEMENTS as MAX_ARRAY_ELEMENTS
from fedclust.core.models import Identifier as Identifier
from fedclust.core.models import WireArray as WireArray
from fedclust.core.validation import SHA256_HEX_PATTERN
from fedclust.protocol import algorithms
from fedclust.protocol.algorithms.fedcref_params import Hidden
from fedclust.protocol.maths.declaration import Declaration
from fedclust.protocol.maths.fedfcm import LocalCenters

#: 2: the declare task carries the job's terms; a summed field declares its 64-bit words.
#: 3: the terms carry ``feature_names`` and ``init``; fed-distill's training tasks their
#: epochs, learning rate and batch size; the ``kfed_dennis_centers`` task.
#: 4: built-in sum-type statistics travel as the generic ``statistic`` task with declared
#: ``params`` (a :class:`StatisticTask` and :class:`StatisticReply`), not one class each;
#: ``distill_soft`` names the group it is summed in (``members``).
#: 5: the moment sums are the ``moment_sums`` statistic about one public point (no shift
#: echoed back).
#: Jobs stored by a coordinator of an earlier version do not resume under this one.
PROTOCOL_VERSION: Final = 5
#: The most values a job's ``init`` (its K initial centers) holds.
MAX_INIT_VALUES: Final = 1_000_000
#: Largest request body a service reads (the largest array, base64, fits with room to spare).
MAX_BODY_BYTES: Final = 128 * 1024 * 1024


@dataclass(frozen=True)
class Registered:
    """A name of one of the registries (``protocol.algorithms``: its algorithms of one family
    or any, or its statistics): checked when read, and listed as the ``enum`` of its JSON
    schema when the schema is made, so the OpenAPI document names every one registered then."""

    names: Callable[[], tuple[str, ...]]
    what: str = "algorithm"

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_after_validator_function(self._check, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        out = handler(schema)
        if self.names():  # an empty enum would admit nothing: left out
            out["enum"] = list(self.names())
        return out

    def _check(self, name: str) -> str:
        if name not in self.names():  # errors never echo the value
            choices = ", ".join(repr(n) for n in self.names())
            raise ValueError(f"unknown {self.what}; choose one of {choices}")
        return name


#: A sweep algorithm's name (a K sweep scored by FedFuzzDB).
Algorithm = Annotated[str, Registered(lambda: algorithms.names("sweep"))]
#: Every algorithm a job, a task or a participant's policy can name.
AnyAlgorithm = Annotated[str, Registered(algorithms.names)]
ProtectionScheme = Literal["none", "masking", "paillier"]
#: The largest integer any wire field takes: every integer fits a signed 64-bit column and
#: a float64 exactly, so no hostile value overflows numpy or the database (422 instead).
MAX_WIRE_INT: Final = 2**53
#: Counters (task ids, rounds, counts, sizes) on the wire.
WireInt = Annotated[int, Field(ge=0, le=MAX_WIRE_INT)]
#: A seed: any non-negative signed 64-bit integer.
Seed64 = Annotated[int, Field(ge=0, le=2**63 - 1)]
#: A feature (column) name a job declares: printable text, no control characters.
FeatureName = Annotated[str, Field(min_length=1, max_length=256, pattern=r"^[^\x00-\x1f\x7f]+$")]


def draw_seed() -> int:
    """A fresh seed for a run given none: 32 bits from the operating system's random
    source. The run records it, so passing it back as the seed replays the run."""
    return secrets.randbelow(2**32)


class _Strict(BaseModel):
    """Strict, frozen, and every float finite (NaN and ±Infinity answer 422): the rules of
    ``core.models.Strict`` (the parameters models' and :class:`WireArray`'s base), spelt out
    here for the type checker's pydantic plugin, which reads a literal ``ConfigDict``."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class _Document(BaseModel):
    """An output document of the coordinator: strict, but a float may be infinite (the
    first round's center shift)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


# -- tasks: coordinator → participant -------------------------------------------------------
class ApplyStandardisationTask(_Strict):
    """Replace the local rows by (x − mean) / scale for the rest of the job."""

    kind: Literal["apply_standardisation"] = "apply_standardisation"
    mean: WireArray
    scale: WireArray


class ReportCountTask(_Strict):
    """Send N_l to the counting service (never to the coordinator)."""

    kind: Literal["report_count"] = "report_count"


class DeclareTask(_Strict):
    """The first task of every job: declare the participant's public bounds
    (``protocol.maths.declaration``) for the job of ``terms``, the :class:`JobCreate` the analyst
    created, checked by the agent with the API's own validators. The agent checks the terms
    against its policy (the protection, the roster rule over ``terms.participants``) and
    every later task of the job against them (``participant.terms``)."""

    kind: Literal["declare"] = "declare"
    terms: JobCreate

    @property
    def roster(self) -> list[str]:
        """The job's participants."""
        return self.terms.participants


class LocalFcmTask(_Strict):
    """Local FCM from ``centers`` to local convergence (Stallmann & Wilbik §2.2.1)."""

    kind: Literal["local_fcm"] = "local_fcm"
    centers: WireArray
    m: float = Field(gt=1.0)
    tol: float = Field(ge=0.0)
    max_iter: int = Field(ge=1, le=100_000)


class KfedCentersTask(_Strict):
    """Local k-means centers for k-FED (Dennis et al.), "kfed"'s local step."""

    kind: Literal["kfed_centers"] = "kfed_centers"
    k_local: int = Field(ge=1, le=10_000)
    seed: Seed64 | None = None


class KfedDennisCentersTask(_Strict):
    """Local k-means centers for k-FED as Dennis et al. write it ("kfed-dennis"'s local step:
    SVD projection, k-means++ seeding, the 1:3 split, Lloyd); answered with a
    :class:`KfedCentersReply`."""

    kind: Literal["kfed_dennis_centers"] = "kfed_dennis_centers"
    k_local: int = Field(ge=1, le=10_000)
    seed: Seed64 | None = None


class LocalKTask(_Strict):
    """The participant's own choice of K over [k_min, k_max] (Stallmann §2.2.3)."""

    kind: Literal["local_k"] = "local_k"
    k_min: int = Field(ge=2, le=100)
    k_max: int = Field(ge=2, le=100)
    m: float = Field(gt=1.0)
    seed: Seed64 | None = None



# -- the centers-based algorithms: local centers held, k-means over their sums ---------------
# (protocol.maths.center_kmeans; the same tasks whatever the protection)
class HoldLocalFcmTask(_Strict):
    """Local FCM from ``centers`` (§2.2.1), its centers and J_m kept at the participant."""

    kind: Literal["hold_local_fcm"] = "hold_local_fcm"
    centers: WireArray
    m: float = Field(gt=1.0)
    tol: float = Field(ge=0.0)
    max_iter: int = Field(ge=1, le=100_000)


class HoldKmeansInitTask(_Strict):
    """Garst & Reinders' round 1: local k-means++ seeding and one Lloyd step, its means and
    counts (clusters of >= p rows) kept locally."""

    kind: Literal["hold_kmeans_init"] = "hold_kmeans_init"
    k: int = Field(ge=1, le=10_000)
    seed: int = Field(ge=0, le=2**63 - 1)


class HoldKmeansStepTask(_Strict):
    """Garst & Reinders' local step from ``centers``, its means and counts kept locally."""

    kind: Literal["hold_kmeans_step"] = "hold_kmeans_step"
    centers: WireArray


class StatisticTask(_Strict):
    """A registered sum-type statistic (``protocol.algorithms.StatisticSpec``) of the rows
    for ``centers``: the one task of every sum-type statistic, whose reply's fields and
    shapes, and whose ``params``, the statistic declares (an unknown, missing or
    out-of-range parameter is refused: 422 at the API, a refusal at the participant)."""

    kind: Literal["statistic"] = "statistic"
    name: Annotated[Identifier, Registered(algorithms.statistic_names, "statistic")]
    centers: WireArray
    params: dict[Identifier, float] = Field(default_factory=dict, max_length=16)

    @model_validator(mode="after")
    def _declared(self) -> StatisticTask:
        spec = algorithms.statistic(self.name)
        spec.check_params(self.params)
        spec.check_centers(tuple(self.centers.shape))
        return self

    @classmethod
    def of(cls, name: str, centers: WireArray | NDArray[Any], **params: float) -> StatisticTask:
        """The task of statistic ``name`` for ``centers`` with the given ``params``."""
        wire = centers if isinstance(centers, WireArray) else WireArray.of(centers)
        return cls(name=name, centers=wire, params=params)


# -- clustered federated distillation (Yang & Tae 2023; coordinator.distillation) ------------
class DistillTrainTask(_Strict):
    """Initialise the job's classifier from ``seed`` and train it on the local labelled rows."""

    kind: Literal["distill_train"] = "distill_train"
    seed: int = Field(ge=0, le=2**31 - 1)
    n_classes: int = Field(ge=2, le=10_000)
    classifier: Literal["mlp", "cnn"] = "mlp"
    max_epochs: int = Field(default=30, ge=1, le=10_000)
    learning_rate: float = Field(default=1e-3, gt=0.0, le=10.0)
    batch_size: int = Field(default=32, ge=1, le=100_000)


class DistillCountsTask(_Strict):
    """The count vector of the local classifier's predicted labels on ``public``
    (disclosed in the clear: the grouping needs every participant's vector)."""

    kind: Literal["distill_counts"] = "distill_counts"
    public: WireArray
    n_classes: int = Field(ge=2, le=10_000)


class DistillSoftTask(_Strict):
    """The softmax probabilities on ``public`` (n_public, n_classes) and members = [1]:
    a sum-type statistic, summed within the group ``members`` (masked when it has >= 3; a
    participant answers a bare one only for a group under 3 that names it)."""

    kind: Literal["distill_soft"] = "distill_soft"
    public: WireArray
    n_classes: int = Field(ge=2, le=10_000)
    members: list[Identifier] = Field(min_length=1, max_length=1000)

    @model_validator(mode="after")
    def _distinct(self) -> DistillSoftTask:
        if len(set(self.members)) != len(self.members):
            raise ValueError("members must be distinct")
        return self


class DistillStepTask(_Strict):
    """Distil the local classifier towards the group's ``teacher`` probabilities on
    ``public`` (KL divergence at ``temperature``, ``epochs`` epochs)."""

    kind: Literal["distill_step"] = "distill_step"
    public: WireArray
    teacher: WireArray
    temperature: float = Field(gt=0.0, le=1000.0)
    epochs: int = Field(ge=0, le=10_000)
    seed: int = Field(ge=0, le=2**31 - 1)
    learning_rate: float = Field(default=1e-3, gt=0.0, le=10.0)
    batch_size: int = Field(default=64, ge=1, le=100_000)


# -- FedCRef (Nardi, Valerio & Passarella; coordinator.fedcref) ----------------------------------
Seed = Annotated[int, Field(ge=0, le=2**31 - 1)]


class FedCRefInitTask(_Strict):
    """Make the initial local clustering and train one autoencoder per local cluster (the
    encoder widths ``hidden``, decoder mirrored); answer K_i.

    ``initial`` "kmeans": k-means on an autoencoder code, K_i = ``k`` or chosen by the
    silhouette over 2..``k_max``; "labels": the participant's own ``label_column``.
    """

    kind: Literal["fedcref_init"] = "fedcref_init"
    hidden: Hidden
    initial: Literal["kmeans", "labels"]
    k: int | None = Field(default=None, ge=1, le=1000)
    k_max: int = Field(ge=2, le=1000)
    epochs: int = Field(ge=0, le=10_000)
    seed: Seed


class FedCRefTrainTask(_Strict):
    """Retrain the local models whose assignment changed since they were last trained."""

    kind: Literal["fedcref_train"] = "fedcref_train"
    seed: Seed


class FedCRefModelsTask(_Strict):
    """Share the local models (one flat float32 vector per local cluster)."""

    kind: Literal["fedcref_models"] = "fedcref_models"


class FedCRefScoresTask(_Strict):
    """Score every local cluster against each of ``models`` (M, n_params), eq. 2 at the
    ``alpha``-th percentile; answer (K_i, M) scores."""

    kind: Literal["fedcref_scores"] = "fedcref_scores"
    models: WireArray
    alpha: float = Field(ge=0.0, le=100.0)


class FedCRefFedavgTask(_Strict):
    """One FedAvg contribution to a group: n·θ and n over the participant's clusters
    ``members[own id]`` (θ: ``model`` trained ``epochs`` epochs from ``seeds[own id]``, or
    with ``model`` absent the size-weighted local models). A sum-type statistic: the group's
    members all receive the same task, masked when the group has >= 3 participants."""

    kind: Literal["fedcref_fedavg"] = "fedcref_fedavg"
    model: WireArray | None = None
    n_params: int = Field(ge=1, le=MAX_ARRAY_ELEMENTS)
    members: dict[Identifier, list[Annotated[int, Field(ge=0, le=100_000)]]] = Field(
        min_length=1, max_length=1000
    )
    seeds: dict[Identifier, Seed] = Field(min_length=1, max_length=1000)
    epochs: int = Field(ge=0, le=10_000)

    @model_validator(mode="after")
    def _consistent(self) -> FedCRefFedavgTask:
        if set(self.seeds) != set(self.members) or not all(self.members.values()):
            raise ValueError("seeds must name the members, each member at least one cluster")
        if self.model is not None and (
            self.model.dtype != "float32" or tuple(self.model.shape) != (self.n_params,)
        ):
            raise ValueError("model must be float32 of shape (n_params,)")
        return self


class FedCRefRefineTask(_Strict):
    """Refine the local assignment (Algorithm 2) with the local models and the ``models`` of
    the participant's groups (G, n_params); answer the agreement with the previous one."""

    kind: Literal["fedcref_refine"] = "fedcref_refine"
    models: WireArray
    seed: Seed


# -- secure aggregation: pairwise masking (crypto.masking, Bonawitz et al. 2017) ---------------
Base64 = Annotated[str, Field(max_length=2048, pattern=r"^[A-Za-z0-9+/]*={0,2}$")]

#: The statistics a secure sum can carry: every task whose reply is a sum over rows.
SumTaskSpec = Annotated[
    StatisticTask
    | DistillSoftTask
    | FedCRefFedavgTask,
    Field(discriminator="kind"),
]


class FieldEncoding(_Strict):
    """The declared fixed-point encoding of one summed field (crypto.fixedpoint.Statistic):
    resolution 2^-scale_bits, |value| <= bound, a ring of ``words`` 64-bit words (a masked
    field of w > 1 words travels as uint64 limbs on a last axis of w)."""

    name: str = Field(min_length=1, max_length=64)
    scale_bits: int = Field(ge=0, le=60)
    bound: float = Field(gt=0.0)
    words: int = Field(default=1, ge=1, le=16)


#: The largest cohort a secure sum takes (SecAgg+ keeps each participant's work O(log n)).
MAX_COHORT = 10_000
Cohort = Annotated[list[Identifier], Field(max_length=MAX_COHORT)]


class SignedKeys(_Strict):
    """A participant's job keys and graph nonce, Ed25519-signed (``crypto.masking.KeyAdvert``)."""

    sender: Identifier
    enc_public: Base64
    mask_public: Base64
    nonce: Base64
    signature: Base64


class SealedShare(_Strict):
    """The sender's share of its round seed for one recipient (AES-GCM)."""

    sender: Identifier
    recipient: Identifier
    ciphertext: Base64


class SecureSetupTask(_Strict):
    """Key setup number ``setup`` of the job's secure sums (one per group of participants
    that sums together, usually one per job): make keys for the masking graph of degree
    ``degree`` (None: complete) and Shamir ``threshold`` over ``roster``.

    ``identities`` are the roster's registered Ed25519 public keys (base64); a participant
    compares them with the keys it pinned before and refuses a change.
    """

    kind: Literal["secure_setup"] = "secure_setup"
    setup: int = Field(default=1, ge=1, le=MAX_WIRE_INT)
    roster: Cohort = Field(min_length=1)
    degree: int | None = Field(default=None, ge=2, le=MAX_COHORT)
    threshold: int = Field(ge=1, le=MAX_COHORT)
    identities: dict[Identifier, Base64]


class SecureGraphTask(_Strict):
    """The roster's signed adverts: verify them, derive the masking graph, agree keys with
    the neighbours; answer the graph's digest."""

    kind: Literal["secure_graph"] = "secure_graph"
    setup: int = Field(default=1, ge=1, le=MAX_WIRE_INT)
    adverts: list[SignedKeys] = Field(max_length=MAX_COHORT)


class SecureInputTask(_Strict):
    """Secure sum ``round`` among ``cohort``: compute ``statistic`` on the local rows,
    encode it, answer it masked with sealed seed shares for the neighbours."""

    kind: Literal["secure_input"] = "secure_input"
    setup: int = Field(default=1, ge=1, le=MAX_WIRE_INT)
    round: int = Field(ge=1, le=MAX_WIRE_INT)
    cohort: Cohort = Field(min_length=1)
    statistic: SumTaskSpec
    encoding: list[FieldEncoding] = Field(min_length=1, max_length=16)


class SecureUnmaskTask(_Strict):
    """Who was received (their seed shares wanted) and who dropped (round keys wanted), with
    the sealed seed shares the surviving neighbours sent this participant."""

    kind: Literal["secure_unmask"] = "secure_unmask"
    setup: int = Field(default=1, ge=1, le=MAX_WIRE_INT)
    round: int = Field(ge=1, le=MAX_WIRE_INT)
    survivors: Cohort
    dropped: Cohort
    shares: list[SealedShare] = Field(max_length=MAX_COHORT)


# -- secure aggregation: Paillier (crypto.paillier), key held by the counting service -----------
class PaillierKey(_Strict):
    """A job's Paillier public key: the modulus n (base64, big-endian) and its fingerprint."""

    n: Base64
    key_sha256: str = Field(pattern=SHA256_HEX_PATTERN)


class EncryptedField(_Strict):
    """One summed field's packed ciphertexts (``crypto.paillier.EncryptedVector.to_dict``)."""

    spec: dict[str, str | WireInt | float]
    shape: list[Annotated[int, Field(ge=0, le=MAX_ARRAY_ELEMENTS)]] = Field(max_length=4)
    n_contributions: int = Field(ge=1, le=MAX_WIRE_INT)
    key_sha256: str = Field(pattern=SHA256_HEX_PATTERN)
    ciphertexts: list[Base64] = Field(max_length=1_000_000)

    @model_validator(mode="after")
    def _bounded(self) -> EncryptedField:
        n = math.prod(self.shape)
        if n > MAX_ARRAY_ELEMENTS:
            raise ValueError(f"shape has {n} elements; at most {MAX_ARRAY_ELEMENTS} are accepted")
        return self


class PaillierInputTask(_Strict):
    """Compute ``statistic``, encode every summed field and encrypt it under ``public_key``;
    first tell the counting service that this participant contributes to ``round``."""

    kind: Literal["paillier_input"] = "paillier_input"
    round: int = Field(ge=1, le=MAX_WIRE_INT)
    statistic: SumTaskSpec
    encoding: list[FieldEncoding] = Field(min_length=1, max_length=16)
    public_key: PaillierKey
    max_parties: int = Field(ge=3, le=1_000_000)

TaskSpec = Annotated[
    ApplyStandardisationTask
    | ReportCountTask
    | DeclareTask
    | LocalFcmTask
    | KfedCentersTask
    | KfedDennisCentersTask
    | LocalKTask
    | HoldLocalFcmTask
    | HoldKmeansInitTask
    | HoldKmeansStepTask
    | StatisticTask
    | SecureSetupTask
    | SecureGraphTask
    | SecureInputTask
    | SecureUnmaskTask
    | PaillierInputTask
    | DistillTrainTask
    | DistillCountsTask
    | DistillSoftTask
    | DistillStepTask
    | FedCRefInitTask
    | FedCRefTrainTask
    | FedCRefModelsTask
    | FedCRefScoresTask
    | FedCRefFedavgTask
    | FedCRefRefineTask,
    Field(discriminator="kind"),
]


class Task(_Strict):
    """One unit of work for one participant; ``task_id`` counts that participant's tasks."""

    protocol_version: Literal[5] = PROTOCOL_VERSION
    job_id: Identifier
    task_id: WireInt
    algorithm: AnyAlgorithm
    spec: TaskSpec


# -- replies: participant → coordinator -------------------------------------------------------
class AckReply(_Strict):
    """Done; nothing to report (apply_standardisation, report_count)."""

    kind: Literal["ack"] = "ack"


BoundSource = Literal["configured", "derived"]


class DeclarationReply(_Strict):
    """A participant's declared public bounds (``protocol.maths.declaration``): its row count lies
    in (row_bound/2, row_bound] and |x| <= value_bound for every raw value. A ``derived``
    bound was computed from its rows (a disclosure), a ``configured`` one is its policy's."""

    kind: Literal["declaration"] = "declaration"
    row_bound: int = Field(ge=1, le=2**40)
    value_bound: float = Field(gt=0.0, le=1e300)
    row_bound_source: BoundSource
    value_bound_source: BoundSource
    enforces_fcm_rule: bool

    @model_validator(mode="after")
    def _power_of_two(self) -> DeclarationReply:
        if self.row_bound & (self.row_bound - 1):
            raise ValueError("row_bound must be a power of two")
        return self

    @classmethod
    def of(cls, d: Declaration) -> DeclarationReply:
        return cls(
            row_bound=d.row_bound, value_bound=d.value_bound,
            row_bound_source="derived" if d.row_bound_derived else "configured",
            value_bound_source="derived" if d.value_bound_derived else "configured",
            enforces_fcm_rule=d.enforces_fcm_rule,
        )

    def to_result(self) -> Declaration:
        return Declaration(
            row_bound=self.row_bound, value_bound=self.value_bound,
            row_bound_derived=self.row_bound_source == "derived",
            value_bound_derived=self.value_bound_source == "derived",
            enforces_fcm_rule=self.enforces_fcm_rule,
        )


class LocalFcmReply(_Strict):
    kind: Literal["local_fcm"] = "local_fcm"
    centers: WireArray
    weights: WireArray
    global_objective: float
    n_iter: int = Field(ge=0, le=MAX_WIRE_INT)

    @classmethod
    def of(cls, r: LocalCenters) -> LocalFcmReply:
        return cls(centers=WireArray.of(r.centers), weights=WireArray.of(r.weights),
                   global_objective=r.global_objective, n_iter=r.n_iter)

    def to_result(self) -> LocalCenters:
        return LocalCenters(centers=self.centers.to_numpy(), weights=self.weights.to_numpy(),
                            global_objective=self.global_objective, n_iter=self.n_iter)


class KfedCentersReply(_Strict):
    kind: Literal["kfed_centers"] = "kfed_centers"
    centers: WireArray


class LocalKReply(_Strict):
    kind: Literal["local_k"] = "local_k"
    k: int = Field(ge=1, le=100_000)


class DistillCountsReply(_Strict):
    """How many public rows the local classifier labels with each class, (n_classes,)."""

    kind: Literal["distill_counts"] = "distill_counts"
    label_counts: WireArray


class DistillSoftReply(_Strict):
    """Softmax probabilities on the public set (n_public, n_classes) and ``members`` = [1]
    (or, from a secure sum, their sums over a group: the group's size)."""

    kind: Literal["distill_soft"] = "distill_soft"
    soft_sum: WireArray
    members: WireArray


class FedCRefInitReply(_Strict):
    """K_i, the number of local clusters of the initial clustering."""

    kind: Literal["fedcref_init"] = "fedcref_init"
    k: int = Field(ge=1, le=100_000)


class FedCRefModelsReply(_Strict):
    """The local models, float32 (K_i, n_params)."""

    kind: Literal["fedcref_models"] = "fedcref_models"
    models: WireArray


class FedCRefScoresReply(_Strict):
    """Eq. 2 scores (K_i, M) of the local clusters against the task's models."""

    kind: Literal["fedcref_scores"] = "fedcref_scores"
    scores: WireArray


class FedCRefFedavgReply(_Strict):
    """n·θ (n_params,) and n (1,) (or, from a secure sum, their sums over the group)."""

    kind: Literal["fedcref_fedavg"] = "fedcref_fedavg"
    weighted_params: WireArray
    rows: WireArray


class FedCRefRefineReply(_Strict):
    """The agreement (Hungarian ACC) of the refined assignment with the previous one."""

    kind: Literal["fedcref_refine"] = "fedcref_refine"
    agreement: float = Field(ge=0.0, le=1.0)


class RefusalReply(_Strict):
    """The participant will not compute this task; ``reason`` is shown to the analyst.

    ``fatal``: the participant cannot go on with the job at all (a value above a bound its
    own declaration implies): the coordinator fails the job instead of counting a dropout.
    """

    kind: Literal["refusal"] = "refusal"
    reason: str = Field(min_length=1, max_length=2000)
    fatal: bool = False

    def error(self, participant: str) -> Exception:
        """The exception a coordinator raises for it: RefusedError, or for a fatal refusal
        ProtocolError (the job cannot go on)."""
        if self.fatal:
            return ProtocolError(f"participant {participant!r}: {self.reason}")
        return RefusedError(self.reason)


class StatisticReply(_Strict):
    """The fields of a registered statistic (:class:`StatisticTask`), each an array of the
    shape the statistic declares (:func:`check_reply`)."""

    kind: Literal["statistic"] = "statistic"
    fields: dict[Identifier, WireArray] = Field(max_length=64)


class KeyAdvertReply(_Strict):
    kind: Literal["key_advert"] = "key_advert"
    advert: SignedKeys


class GraphReply(_Strict):
    """The digest of the masking graph the participant derived (every party's must agree)."""

    kind: Literal["masking_graph"] = "masking_graph"
    graph_sha256: str = Field(pattern=SHA256_HEX_PATTERN)


class MaskedInputReply(_Strict):
    """One masked uint64 vector per encoded field, the sealed seed shares for the
    neighbours, and the commitment to the round's self-mask seed."""

    kind: Literal["masked_input"] = "masked_input"
    vectors: dict[str, WireArray] = Field(min_length=1, max_length=16)
    shares: list[SealedShare] = Field(max_length=MAX_COHORT)
    seed_commitment: Base64


class UnmaskSharesReply(_Strict):
    """Seed shares (base64) of the survivors, and per dropped neighbour the round's pair-mask
    key (base64)."""

    kind: Literal["unmask_shares"] = "unmask_shares"
    self_mask_shares: dict[Identifier, Base64]
    pair_keys: dict[Identifier, Base64]


class PaillierInputReply(_Strict):
    """A participant's encrypted fields; only the counting service can decrypt their sum."""

    kind: Literal["paillier_input"] = "paillier_input"
    vectors: dict[str, EncryptedField] = Field(min_length=1, max_length=16)

Reply = Annotated[
    AckReply
    | DeclarationReply
    | LocalFcmReply
    | KfedCentersReply
    | LocalKReply
    | StatisticReply
    | KeyAdvertReply
    | GraphReply
    | MaskedInputReply
    | UnmaskSharesReply
    | PaillierInputReply
    | DistillCountsReply
    | DistillSoftReply
    | FedCRefInitReply
    | FedCRefModelsReply
    | FedCRefScoresReply
    | FedCRefFedavgReply
    | FedCRefRefineReply
    | RefusalReply,
    Field(discriminator="kind"),
]

#: The reply kind each task kind expects (a refusal is always allowed).
REPLY_KIND: Final[dict[str, str]] = {
    "apply_standardisation": "ack",
    "report_count": "ack",
    "declare": "declaration",
    "local_fcm": "local_fcm",
    "kfed_centers": "kfed_centers",
    "kfed_dennis_centers": "kfed_centers",
    "local_k": "local_k",
    "hold_local_fcm": "ack",
    "hold_kmeans_init": "ack",
    "hold_kmeans_step": "ack",
    "statistic": "statistic",
    "secure_setup": "key_advert",
    "secure_graph": "masking_graph",
    "secure_input": "masked_input",
    "secure_unmask": "unmask_shares",
    "paillier_input": "paillier_input",
    "distill_train": "ack",
    "distill_counts": "distill_counts",
    "distill_soft": "distill_soft",
    "distill_step": "ack",
    "fedcref_init": "fedcref_init",
    "fedcref_train": "ack",
    "fedcref_models": "fedcref_models",
    "fedcref_scores": "fedcref_scores",
    "fedcref_fedavg": "fedcref_fedavg",
    "fedcref_refine": "fedcref_refine",
}


class Contribution(_Strict):
    """A participant's answer to one task."""

    protocol_version: Literal[5] = PROTOCOL_VERSION
    job_id: Identifier
    task_id: WireInt
    reply: Reply


# -- counting service ---------------------------------------------------------------------------
class CountReport(_Strict):
    """A participant's N_l for one job, sent to the counting service only, with the roster
    it admitted for the job (its declare task's): the service refuses the count (409) while
    its own roster of the job is not within it (none given: nothing is within it), and never
    releases a total over a roster outside it, so a coordinator cannot count it among
    members it did not admit."""

    protocol_version: Literal[5] = PROTOCOL_VERSION
    job_id: Identifier
    count: int = Field(ge=1, le=MAX_WIRE_INT)
    roster: list[Identifier] = Field(default_factory=list, max_length=10_000)


class CountRoster(_Strict):
    """The coordinator tells the counting service which participants take part in a job."""

    protocol_version: Literal[5] = PROTOCOL_VERSION
    job_id: Identifier
    participants: list[Identifier] = Field(min_length=1, max_length=10_000)


class CountTotal(_Strict):
    """ΣN_l of a job, released once enough participants have reported."""

    job_id: Identifier
    total: int = Field(ge=1, le=2**63 - 1)
    reporters: int = Field(ge=1, le=MAX_WIRE_INT)



class PaillierContribution(_Strict):
    """A participant tells the counting service it contributes to Paillier sum ``round``,
    with the roster it admitted for the job: refused (409) while the service's roster of the
    job is not within it (none given: nothing is), and the round is decrypted only over
    contributors within every contributor's admitted roster."""

    protocol_version: Literal[5] = PROTOCOL_VERSION
    job_id: Identifier
    round: int = Field(ge=1, le=MAX_WIRE_INT)
    roster: list[Identifier] = Field(default_factory=list, max_length=10_000)


class CohortNotice(_Strict):
    """A participant tells the counting service it contributes to a masked sum over
    ``cohort`` (once per distinct cohort of a job): the coordinator unmasks that cohort's
    sum, so the service's differencing guard (``protocol.maths.release_guard``) counts it as
    released, and refuses it (409) when, with the cohorts released before, it would make a
    statistic of fewer than the minimum cohort derivable."""

    protocol_version: Literal[5] = PROTOCOL_VERSION
    job_id: Identifier
    cohort: list[Identifier] = Field(min_length=1, max_length=10_000)


class UnmaskView(_Strict):
    """A participant registers the view of masked sum ``round`` (key setup ``setup``) it is
    asked to unmask: who survived, who dropped out. The counting service keeps the first
    view of each round and answers 204 to that very view only (409 to any other), so a
    coordinator cannot show two groups two splits of one round and collect, from the one,
    a participant's pair keys and, from the other, the shares of its self-mask. The
    survivors also pass the differencing guard as a released cohort, as a
    :class:`CohortNotice` does."""

    protocol_version: Literal[5] = PROTOCOL_VERSION
    job_id: Identifier
    setup: int = Field(ge=1, le=MAX_WIRE_INT)
    round: int = Field(ge=1, le=MAX_WIRE_INT)
    survivors: Cohort = Field(min_length=1)
    dropped: Cohort


class PaillierDecryptRequest(_Strict):
    """The coordinator asks the key holder to decrypt the aggregate of sum ``round``.

    ``contributors`` must be exactly the participants that announced a contribution to the
    round, at least the minimum cohort; every field's ``n_contributions`` must match them.
    """

    protocol_version: Literal[5] = PROTOCOL_VERSION
    job_id: Identifier
    round: int = Field(ge=1, le=MAX_WIRE_INT)
    contributors: list[Identifier] = Field(min_length=1, max_length=10_000)
    vectors: dict[str, EncryptedField] = Field(min_length=1, max_length=16)


class PaillierDecryption(_Strict):
    """The decrypted, decoded sums of one Paillier round (one array per field)."""

    job_id: Identifier
    round: int = Field(ge=1, le=MAX_WIRE_INT)
    sums: dict[str, WireArray]

# -- jobs: analyst ⇄ coordinator ----------------------------------------------------------------
P = TypeVar("P", bound=BaseModel)


class _JobTerms(_Strict):
    """The terms of a job every algorithm shares (:class:`JobCreate` adds the parameters
    blocks, read with :meth:`params`)."""

    algorithm: AnyAlgorithm
    participants: list[Identifier] = Field(min_length=1, max_length=1000)
    k: int | None = Field(default=None, ge=2, le=1000)
    k_range: tuple[int, int] | None = None
    seed: int | None = Field(default=None, ge=0, le=2**63 - 1)
    standardise: bool = False
    local_k_range: tuple[int, int] | None = None
    m: float = Field(default=2.0, gt=1.0, le=100.0)
    eps: float = Field(default=1e-3, ge=0.0)
    max_rounds: int = Field(default=100, ge=1, le=10_000)
    gamma: float = Field(default=1.0, gt=0.0, le=1.0)
    protection: ProtectionScheme = Field(
        default="masking",
        description=(
            "How every sum-type statistic travels: 'masking' (pairwise masking, the default), "
            "'paillier' (encrypted to the counting service's key), or 'none' (each "
            "participant's statistics in the clear, as in the papers)."
        ),
    )
    masking_graph: Literal["auto", "full"] = Field(
        default="auto",
        description=(
            "The graph of masking partners: 'auto' (SecAgg+, Bell et al. 2020: each "
            "participant masks with O(log n) neighbours where the cohort is large enough, "
            "else with everyone) or 'full' (every pair, Bonawitz et al. 2017)."
        ),
    )
    max_rows: int | None = Field(
        default=None, ge=1, le=10**12,
        description=(
            "Override of the bound on any participant's row count (fixed-point encoding of "
            "protected sums). Unset: the largest row_bound the participants declare. Below a "
            "participant's declared row_bound the job fails at once."
        ),
    )
    value_bound: float | None = Field(
        default=None, gt=0.0, le=1e12,
        description=(
            "Override of the bound on |x| for every value the algorithms see (after "
            "standardisation if asked; for 'fedcref' on |model parameter|). Unset: the largest "
            "value_bound the participants declare, or after standardisation the bound their "
            "declarations and the federation's mean and scale imply. Below that bound the job "
            "fails."
        ),
    )
    min_center_contributors: int = Field(
        default=1, ge=1, le=1000,
        description=(
            "A center is released only if at least this many participants stand behind it "
            "(their local centers nearest to it; for ffcm every participant); one formed from "
            "a single participant's local center reveals that center. 1 (the papers' "
            "behaviour) releases every center. Algorithms 'ffcm', 'fedfcm' and 'fkm' only."
        ),
    )
    feature_names: list[FeatureName] | None = Field(
        default=None, min_length=1, max_length=100_000,
        description=(
            "The names of the features (columns), in order: declared job metadata, sent to "
            "every participant, which refuses the job unless they are its configured columns; "
            "the result, exports and plots use them. Absent: the columns are x0 .. x{D-1}."
        ),
    )

    init: list[Annotated[list[float], Field(min_length=1, max_length=100_000)]] | None = Field(
        default=None, min_length=2, max_length=1000,
        description=(
            "The K initial centers (K rows of D values, in the data's original units; "
            "z-scored with the federation's moments when the job standardises) instead of "
            "the algorithm's own seeding: public job terms, sent to every participant. Only "
            "with a single k (K rows) and an algorithm that starts from global centers (its "
            f"registry entry's takes_init); at most {MAX_INIT_VALUES:,} values. Absent: the "
            "algorithm's own seeding."
        ),
    )

    @property
    def algorithm_params(self) -> BaseModel | None:
        """The job's algorithm's parameters: its block, or its model's defaults where the
        block may be left out; None: the algorithm has no parameters model."""
        spec = algorithms.get(self.algorithm)
        if spec.params_block is None or spec.params is None:
            return None
        given: BaseModel | None = getattr(self, spec.params_block)
        return spec.params() if given is None else given

    def params(self, model: type[P]) -> P:
        """The job's parameters, known to be a ``model`` (its algorithm's registered
        ``params``): :attr:`algorithm_params`, typed. ValueError for a job of another
        algorithm."""
        params = self.algorithm_params
        if not isinstance(params, model):
            raise ValueError(f"a {self.algorithm!r} job has no {model.__name__}")
        return params

    @property
    def ks(self) -> list[int]:
        """The K values to sweep (none for the model-based algorithms)."""
        if self.k is None and self.k_range is None:
            return []
        if self.k is not None:
            return [self.k]
        assert self.k_range is not None
        return list(range(self.k_range[0], self.k_range[1] + 1))


def _params_blocks() -> dict[str, Any]:
    """The parameters blocks of a job, one per registered algorithm with a parameters model
    (``AlgorithmSpec.params``): the field its ``params_block`` names, the model or absent."""
    blocks: dict[str, Any] = {}
    for spec in map(algorithms.get, algorithms.names()):
        if spec.params_block is None or spec.params is None:
            continue
        if spec.params_block in blocks or hasattr(_JobTerms, spec.params_block):
            raise ValueError(f"algorithm {spec.name!r}: params_block {spec.params_block!r} "
                             "is taken by another algorithm's block or a job's field")
        description = (
            f"Required for algorithm {spec.name!r}; absent otherwise." if spec.params_required
            else f"Algorithm {spec.name!r} only (absent: the defaults); absent otherwise."
        )
        blocks[spec.params_block] = (spec.params | None, Field(default=None,
                                                               description=description))
    return blocks


#: The parameters blocks of the algorithms registered when this module is imported.
_BLOCKS: Final = _params_blocks()

if TYPE_CHECKING:  # the type checker sees no block: code reads them with JobCreate.params
    _JobTermsAndBlocks = _JobTerms
else:
    _JobTermsAndBlocks = create_model(
        "_JobTermsAndBlocks", __base__=_JobTerms, __module__=__name__, **_BLOCKS
    )

class JobCreate(_JobTermsAndBlocks):
    """What an analyst asks for: one algorithm, a K or a K range (the sweeps), a ``distill``
    block ("fed-distill") or a ``fedcref`` block ("fedcref", defaults when absent), and its
    parameters."""

    @model_validator(mode="after")
    def _ks(self) -> JobCreate:
        spec = algorithms.get(self.algorithm)
        self._check_blocks(spec)
        if len(set(self.participants)) != len(self.participants):
            raise ValueError("participants must be distinct")
        if self.feature_names is not None and len(set(self.feature_names)) != len(
            self.feature_names
        ):
            raise ValueError("feature_names must be distinct")
        if self.feature_names is not None:
            from fedclust.protocol.wire.result_tables import CENTER_KEYS

            if taken := sorted(set(self.feature_names) & CENTER_KEYS.keys()):
                raise ValueError(
                    f"feature_names may not include {', '.join(map(repr, taken))}: "
                    f"{', '.join(map(repr, CENTER_KEYS))} are the key columns of the "
                    "result's centers table; rename those columns"
                )
        if spec.family == "model":
            model_based = self.algorithm
            if self.k is not None or self.k_range is not None or self.local_k_range is not None:
                raise ValueError(f"{model_based!r} takes no k, k_range or local_k_range")
            if self.standardise:
                raise ValueError(f"{model_based!r} does not standardise (scale the data yourself)")
            if self.protection == "paillier":
                raise ValueError(
                    f"{model_based!r} takes protection 'masking' or 'none' (Paillier is too "
                    "slow for model-sized sums)"
                )
            if model_based == "fedcref" and len(self.participants) < 2:
                raise ValueError("'fedcref' needs at least two participants")
            if self.min_center_contributors != 1:
                raise ValueError(f"{model_based!r} takes no min_center_contributors")
            return self
        if (self.k is None) == (self.k_range is None):
            raise ValueError("give exactly one of k and k_range")
        for name, rng in (("k_range", self.k_range), ("local_k_range", self.local_k_range)):
            if rng is not None and not 2 <= rng[0] <= rng[1] <= 1000:
                raise ValueError(f"{name} must be [a, b] with 2 <= a <= b <= 1000")
        if self.protection != "none" and spec.plain_only:
            raise ValueError(
                f"{self.algorithm!r} sends each participant's local centers by design; "
                "use protection 'none'"
            )
        if self.min_center_contributors != 1 and not spec.counts_contributors:
            counting = ", ".join(
                repr(n) for n in algorithms.names("sweep")
                if algorithms.get(n).counts_contributors
            )
            raise ValueError(
                f"{self.algorithm!r} does not count the participants behind a center; "
                f"min_center_contributors applies to {counting}"
            )
        return self

    @model_validator(mode="after")
    def _init(self) -> JobCreate:
        """``init``: K rows of one width D, for an algorithm that takes initial centers."""
        if self.init is None:
            return self
        spec = algorithms.get(self.algorithm)
        if not spec.takes_init:
            taking = ", ".join(
                repr(n) for n in algorithms.names() if algorithms.get(n).takes_init
            )
            raise ValueError(
                f"{self.algorithm!r} takes no init (it does not start from global centers); "
                f"init applies to {taking}"
            )
        if self.k is None:
            raise ValueError("init gives the initial centers of one K: give k, not k_range")
        widths = {len(row) for row in self.init}
        if len(self.init) != self.k or len(widths) != 1:
            raise ValueError(
                f"init must be k={self.k} rows of one width D (the data's features); got "
                f"{len(self.init)} rows of widths {sorted(widths)}"
            )
        if len(self.init) * widths.pop() > MAX_INIT_VALUES:
            raise ValueError(f"init holds more than {MAX_INIT_VALUES:,} values")
        if self.feature_names is not None and len(self.init[0]) != len(self.feature_names):
            raise ValueError(
                f"init rows have {len(self.init[0])} values; feature_names names "
                f"{len(self.feature_names)} features"
            )
        return self

    def _check_blocks(self, spec: algorithms.AlgorithmSpec) -> None:
        """Only the algorithm's own parameters block; a required one given."""
        own = spec.params_block
        if own is not None and own not in _BLOCKS:
            raise ValueError(
                f"{spec.name!r}'s parameters block {own!r} is not a field of JobCreate: its "
                "blocks are made when protocol.wire.messages is imported; register the "
                f"algorithm before (an installed package: in the {algorithms.PLUGIN_GROUP!r} "
                "entry-point group)"
            )
        if own is not None and spec.params_required and getattr(self, own) is None:
            raise ValueError(f"{spec.name!r} needs a {own} block")
        for block in _BLOCKS:
            if block != own and getattr(self, block) is not None:
                raise ValueError(f"{spec.name!r} takes no {block} block")


JobState = Literal["pending", "running", "succeeded", "failed", "cancelled"]


class JobProgress(_Document):
    """Where a running job is: stage, K, round, last center shift, who has answered."""

    stage: str
    k: int | None = None
    round: int | None = None
    shift: float | None = None
    answered: list[str] = []
    waiting_for: list[str] = []


class AlgorithmPublic(_Strict):
    """``GET /algorithms``: one registered algorithm (``protocol.algorithms``), as a client
    needs it to compose a :class:`JobCreate`."""

    name: str
    title: str
    family: Literal["sweep", "model"] = Field(
        description="'sweep': clusters for each K of k or k_range, scored by FedFuzzDB; "
        "'model': a model-based job, which takes no K."
    )
    plain_only: bool = Field(
        description="It sends each participant's local centers by design: protection 'none' only."
    )
    counts_contributors: bool = Field(
        description="Its centers count the participants behind them (min_center_contributors)."
    )


class JobPublic(_Strict):
    """A job as the API shows it."""

    id: Identifier
    state: JobState
    spec: JobCreate
    created_at: datetime
    updated_at: datetime
    progress: JobProgress | None = None
    error: str | None = None
    owner: str | None = Field(
        default=None,
        description="The analyst who created the job (None: created before owners were kept).",
    )


class TaskHistory(_Strict):
    """One task of a job as the coordinator stored it: to whom, of what kind, when the task
    was stored (a round's tasks together, before any goes out) and whether it was answered.
    When each participant answered is not shown: its answer time follows its local
    computation, which depends on its data (its number of rows, say)."""

    participant: Identifier
    task_id: int = Field(ge=0, description="The task's number among the participant's tasks.")
    kind: str
    stored_at: datetime
    answered: bool = Field(description="Whether the participant's answer was stored.")
    timed_out: str | None = Field(
        default=None, description="Why the task went unanswered, once it timed out."
    )


class JobHistory(_Strict):
    """A job and every task it has handed out so far, in the order they were stored
    (``fedclust job logs``)."""

    job: JobPublic
    tasks: list[TaskHistory]


class GroupingIteration(_Strict):
    """One FedCRef iteration in the result document."""

    iteration: int
    groups: int
    isolated_clusters: int
    frozen: list[str]


class SweepEntryDocument(_Document):
    """One K of a sweep in the result document.

    ``centers[j]`` is None when center j is withheld: fewer participants stand behind it
    (``center_contributors[j]``) than the job's ``min_center_contributors`` (the notes say
    so). ``empty_clusters`` counts the clusters of K that no point supports (then ``centers``
    has fewer than K rows).
    """

    k: int
    fed_fuzzy_db: float
    centers: list[list[float] | None]
    rounds: int
    stop_reason: str
    simplified_silhouette: float
    ari: float | None = None
    client_weighted_ari: float | None = Field(
        default=None,
        description="Mean of each participant's own ARI weighted by its rows (Garst & "
        "Reinders 2023); only where labels are known (the simulator).",
    )
    center_contributors: list[int] | None = None
    empty_clusters: int = 0


class ResultDocument(_Strict):
    """The result of a sweep: what ``simulate --json``, ``demo --json`` and the API return.

    A model-based job has no sweep (``sweep`` empty, ``k_selected`` the number of groups
    found); its grouping is in ``groups`` and the groups too small to mask in
    ``unprotected_groups``: participant names for "fed-distill", ``participant:cluster``
    references for "fedcref" (as ``groups[].members`` in ``simulate --json``), whose local
    clusters in no group are ``isolated_clusters``, with ``iterations`` and ``stop_reason``.
    """

    algorithm: AnyAlgorithm
    dataset: str | None = None
    participants: int
    seed: int | None
    standardised: bool
    protection: ProtectionScheme = "none"
    k_selected: int
    k_elbow: int | None
    sweep: list[SweepEntryDocument]
    notes: list[str] = []
    local_k: list[int] | None = None
    k_range_rule_of_thumb: tuple[int, int] | None = None
    groups: list[list[str]] | None = None
    unprotected_groups: list[list[str]] | None = None
    isolated_clusters: list[str] | None = None
    iterations: list[GroupingIteration] | None = None
    stop_reason: str | None = None
    feature_names: list[str] | None = Field(
        default=None,
        description="Names of the center columns (the data's header), in order; None if unknown.",
    )


# -- enrolment: participant → coordinator ---------------------------------------------------------
class Enrolment(_Strict):
    """A participant agent announces itself: its schema width and what its policy allows."""

    protocol_version: Literal[5] = PROTOCOL_VERSION
    n_features: int = Field(ge=1, le=100_000)
    allowed_algorithms: list[AnyAlgorithm] = Field(min_length=1)
    agent_version: str = Field(default="", max_length=64)
    identity_key: str | None = Field(
        default=None, min_length=44, max_length=44, pattern=r"^[A-Za-z0-9+/]{43}=$",
        description=(
            "The organisation's Ed25519 public key (32 bytes, base64) that signs its keys in "
            "masked secure sums; jobs with masking need it."
        ),
    )


class ParticipantPublic(_Strict):
    """A participant as the API shows it (no credentials)."""

    id: Identifier
    enrolled: bool
    n_features: int | None = None
    allowed_algorithms: list[AnyAlgorithm] = []
    enrolled_at: datetime | None = None
    identity_key: str | None = None
    last_contact: datetime | None = Field(
        default=None,
        description="The participant's last authenticated request (a poll or an answer); "
        "stored at most every 30 s, so it survives a restart of the coordinator",
    )


# -- reply acceptance ------------------------------------------------------------------------------
def task_name(spec: TaskSpec) -> str:
    """What a task computes: the statistic a :class:`StatisticTask` names, else its kind."""
    return spec.name if isinstance(spec, StatisticTask) else spec.kind


def _task_centers(spec: TaskSpec) -> tuple[int, ...] | None:
    centers = getattr(spec, "centers", None)
    return None if centers is None else tuple(centers.shape)


# -- the summed fields of sum-type statistics --------------------------------------------------
def sum_fields(spec: SumTaskSpec, n_features: int) -> dict[str, tuple[int, ...]]:
    """Name and shape of every summed field of the reply to ``spec`` (all float64)."""
    D = n_features
    match spec:
        case StatisticTask():
            return algorithms.statistic(spec.name).shapes(D, tuple(spec.centers.shape))
        case DistillSoftTask():
            return {"soft_sum": (spec.public.shape[0], spec.n_classes), "members": (1,)}
        case FedCRefFedavgTask():
            return {"weighted_params": (spec.n_params,), "rows": (1,)}
    raise AssertionError(f"unhandled statistic {spec.kind!r}")  # the union is exhaustive


def summands(reply: Reply) -> dict[str, NDArray[np.float64]]:
    """The summed fields of a sum-type reply as float64 arrays (see :func:`sum_fields`)."""
    match reply:
        case StatisticReply():
            return {name: value.to_numpy() for name, value in reply.fields.items()}
        case DistillSoftReply():
            return {"soft_sum": reply.soft_sum.to_numpy(), "members": reply.members.to_numpy()}
        case FedCRefFedavgReply():
            return {
                "weighted_params": reply.weighted_params.to_numpy(),
                "rows": reply.rows.to_numpy(),
            }
    raise ValueError(f"a {reply.kind!r} reply is not a sum over rows")


def reply_of_sums(spec: SumTaskSpec, sums: dict[str, NDArray[np.float64]]) -> Reply:
    """The reply to ``spec`` whose summed fields are ``sums`` (an aggregate over parties)."""
    w = {name: WireArray.of(value) for name, value in sums.items()}
    match spec:
        case StatisticTask():
            return StatisticReply(fields=w)
        case DistillSoftTask():
            return DistillSoftReply(soft_sum=w["soft_sum"], members=w["members"])
        case FedCRefFedavgTask():
            return FedCRefFedavgReply(weighted_params=w["weighted_params"], rows=w["rows"])
    raise AssertionError(f"unhandled statistic {spec.kind!r}")  # the union is exhaustive


def _check_masked(spec: TaskSpec, reply: MaskedInputReply, n_features: int) -> None:
    """A masked answer carries exactly the encoded fields, uint64, in the statistic's shapes
    (with a last axis of w limbs for a field of w > 1 words)."""
    assert isinstance(spec, SecureInputTask)
    fields = sum_fields(spec.statistic, n_features)
    words = {e.name: e.words for e in spec.encoding}
    if set(reply.vectors) != set(words) or set(words) != set(fields):
        raise ValueError(
            f"a masked {task_name(spec.statistic)!r} reply must carry the fields {sorted(fields)}; "
            f"got {sorted(reply.vectors)}"
        )
    for name, vector in reply.vectors.items():
        shape = fields[name] + ((words[name],) if words[name] > 1 else ())
        if vector.dtype != "uint64" or tuple(vector.shape) != shape:
            raise ValueError(
                f"masked field {name!r} must be uint64 of shape {shape}; got "
                f"{vector.dtype} of shape {tuple(vector.shape)}"
            )

def check_reply(spec: TaskSpec, reply: Reply, n_features: int) -> None:
    """Refuse a reply whose kind or array shapes do not answer ``spec``.

    The coordinator runs this before accepting a contribution, so a malformed one is
    rejected (HTTP 422) and never reaches a job's state. Values are never echoed.

    Raises:
        ValueError: naming the field and the expected and received shapes.
    """
    if isinstance(reply, RefusalReply):
        return
    expected = REPLY_KIND[spec.kind]
    if reply.kind != expected:
        raise ValueError(f"a {spec.kind!r} task needs a {expected!r} reply; got {reply.kind!r}")
    D = n_features
    shape = _task_centers(spec)
    K = shape[0] if shape else 0  # only read for replies to tasks that carry centers
    want: dict[str, tuple[int, ...]]
    match reply:
        case LocalFcmReply():
            want = {"centers": (K, D), "weights": (K,)}
        case KfedCentersReply():
            n = reply.centers.shape[0] if reply.centers.shape else -1
            want = {"centers": (n, D)}
        case StatisticReply():
            assert isinstance(spec, StatisticTask)
            declared = sum_fields(spec, D)
            if set(reply.fields) != set(declared):
                raise ValueError(
                    f"a {spec.name!r} statistic has the fields {sorted(declared)}; got "
                    f"{sorted(reply.fields)}"
                )
            for name, value in reply.fields.items():
                if tuple(value.shape) != declared[name] or value.dtype != "float64":
                    raise ValueError(
                        f"reply field {name!r} must be float64 of shape {declared[name]}; got "
                        f"{value.dtype} of shape {tuple(value.shape)}"
                    )
            want = {}
        case MaskedInputReply():
            _check_masked(spec, reply, D)
            want = {}
        case DistillCountsReply():
            assert isinstance(spec, DistillCountsTask)
            want = {"label_counts": (spec.n_classes,)}
        case DistillSoftReply():
            assert isinstance(spec, DistillSoftTask)
            want = sum_fields(spec, D)
        case FedCRefFedavgReply():
            assert isinstance(spec, FedCRefFedavgTask)
            want = sum_fields(spec, D)
        case FedCRefScoresReply():
            assert isinstance(spec, FedCRefScoresTask)
            k = reply.scores.shape[0] if reply.scores.shape else -1
            want = {"scores": (k, spec.models.shape[0] if spec.models.shape else -1)}
        case FedCRefModelsReply():
            if reply.models.dtype != "float32" or len(reply.models.shape) != 2:
                raise ValueError("reply field 'models' must be float32 (K_i, n_params)")
            want = {}
        case _:
            want = {}
    for field, shape_wanted in want.items():
        got = tuple(getattr(reply, field).shape)
        if got != shape_wanted:
            raise ValueError(
                f"reply field {field!r} must have shape {shape_wanted}; got shape {got}"
            )


# -- service receipts ------------------------------------------------------------------------------
class ContributionReceipt(_Strict):
    """The coordinator accepted a contribution (HTTP 202)."""

    job_id: Identifier
    task_id: WireInt
    status: Literal["accepted"] = "accepted"


class HealthStatus(_Strict):
    """``GET /health`` of every service."""

    status: Literal["ok"] = "ok"


class ErrorDetail(_Strict):
    """Body of every 4xx answer: a message, or for 422 a list of {loc, msg, type} items."""

    detail: str | list[dict[str, Any]]


# -- disclosures: what a party revealed ---------------------------------------------------------
Protection = Literal["plain", "masked", "paillier", "sealed", "declared"]
#: The fields of a DeclarationReply that are declared public bounds
#: (``protocol.maths.declaration``).
DECLARED_FIELDS: Final = frozenset({"row_bound", "value_bound"})


def field_protection(name: str, reply_kind: str) -> Protection:
    """How the wire field ``name`` of a ``reply_kind`` message travels.

    Masked vectors look uniform to the coordinator; Paillier ciphertexts are readable only by
    the counting service's key; sealed seed shares (sent with the masked input) are AES-GCM
    encrypted to one neighbour; a
    declaration's bounds are declared public bounds. Everything else (public keys, the Shamir
    shares and round keys of the unmask stage, plain statistics) is plain.
    """
    if reply_kind == "declaration" and name.rsplit(".", 1)[-1] in DECLARED_FIELDS:
        return "declared"
    if reply_kind == "masked_input" and ".vectors." in f".{name}":
        return "masked"
    if reply_kind == "paillier_input" and name.endswith(".ciphertexts"):
        return "paillier"
    if reply_kind == "masked_input" and name.endswith(".ciphertext"):
        return "sealed"
    return "plain"


def wire_fields(doc: Any, prefix: str = "") -> list[tuple[str, tuple[int, ...] | None]]:
    """The leaf fields of a decoded JSON body as (dotted name, shape) pairs.

    An encoded :class:`WireArray` (an object with exactly ``dtype``, ``shape`` and ``data``)
    is one field with its shape; a list of scalars is one field of shape ``(len,)``; any
    other scalar has shape None. Values are never returned.
    """
    out: list[tuple[str, tuple[int, ...] | None]] = []
    if isinstance(doc, dict):
        if set(doc) == {"dtype", "shape", "data"} and isinstance(doc["shape"], list):
            return [(prefix, tuple(int(s) for s in doc["shape"]))]
        for key in sorted(doc):
            out.extend(wire_fields(doc[key], f"{prefix}.{key}" if prefix else str(key)))
        return out
    if isinstance(doc, list):
        if all(not isinstance(v, dict | list) for v in doc):
            return [(prefix, (len(doc),))]
        for i, item in enumerate(doc):
            out.extend(wire_fields(item, f"{prefix}[{i}]"))
        return out
    return [(prefix, None)]


class DisclosedField(_Strict):
    """One field of the messages of a :class:`Disclosure`: its name, the distinct shapes
    seen (None for a scalar) and how it travelled."""

    name: str
    shapes: list[tuple[int, ...]] | None
    protection: Protection = "plain"


class Disclosure(_Strict):
    """What the coordinator learned from one participant through one kind of task."""

    participant: Identifier
    task_kind: str
    reply_kind: str
    fields: list[DisclosedField]
    messages: int = Field(ge=0, le=MAX_WIRE_INT)


class DisclosureLedger(_Strict):
    """``GET /jobs/{id}/disclosures``: every kind of statistic the coordinator received in a
    job, per participant, with plain-language notes on what it reveals."""

    job_id: Identifier
    algorithm: AnyAlgorithm
    state: JobState
    disclosures: list[Disclosure]
    notes: list[str] = []
