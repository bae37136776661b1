"""In-process simulation of the two model-based algorithms: FedCRef and fed-distill.

``fedclust simulate --algorithm fedcref|fed-distill``: :func:`simulate_fedcref` and
:func:`simulate_fed_distill` build a federation of image-holding participants, run the
service's job (``coordinator.fedcref_job`` / ``coordinator.distill_job`` over
``RemoteParticipant`` proxies, declarations first) with each participant answering through
the agent's dispatch over an in-process task channel, and report the groups found against the
truth. Data (:func:`load_dataset`): ``digits`` (scikit-learn's 8x8, /16) or ``mnist``
(``mnist/mnist_uint8.npz`` of the shared datasets folder, ``$FEDCLUST_DATASETS`` else
``../shared/datasets``, /255; FedCRef pools its training and test images, as the paper does).
Federations: :func:`distill_federation` (Yang & Tae 2023: groups of clients, each group a
random class set, a public set) and :func:`fedcref_federation` (Nardi et al.: clients with
A..B random classes). Protection "masking" (default) sums groups of >= 3 members with
``coordinator.secure_sum.MaskedSummation``; "none" sums in the clear. torch is imported
lazily; without the ``fedclust[deep]`` extra a model-based run is a clear error.

``device`` (``participant.deep.device``: auto, cpu, cuda[:N]) is where every simulated
participant trains; the result's ``device`` says what ``auto`` became. The drivers ask the
participants concurrently, one thread each, so torch's CPU threads are set to
``threads_per_participant`` (cores // participants, at least 1) for the run and restored
after. ``preset`` (``code``, the default, or ``paper``) picks the federation and the job's
parameters (``fedclust.deep_setups``: the algorithm's registered preset, with the simulated
data's and the quick set-up's values); ``params`` (any field of the algorithm's parameters
model) and an explicit argument override either. FedCRef's ``local_only`` adds its
local-only baseline (``participant.deep.fedcref_local.local_only_baseline``) from the same
initial clustering and models.

Design notes: ``docs/simulation.md`` (§ In-process simulation of FedCRef and fed-distill).
"""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel

from fedclust.coordinator.declarations import declare_job
from fedclust.coordinator.distill_job import distill_result_document, run_distill_job
from fedclust.coordinator.distillation import FedDistillResult
from fedclust.coordinator.fedcref import FedCRefResult
from fedclust.coordinator.fedcref_job import fedcref_result_document, run_fedcref_job
from fedclust.coordinator.remote import RemoteParticipant
from fedclust.coordinator.secure_sum import JobSummation, MaskedSummation
from fedclust.core.errors import RefusedError
from fedclust.core.validation import check_float, check_int
from fedclust.crypto.masking import IdentityKey
from fedclust.deep_setups import DATASETS, N_CLASSES, SETUPS, job_defaults
from fedclust.participant import dispatch
from fedclust.participant.dispatch import SecureStages
from fedclust.participant.distill_tasks import DistillTasks
from fedclust.participant.fedcref_tasks import FedCRefTasks
from fedclust.participant.local import LocalParticipant
from fedclust.participant.policy import Policy, accepting
from fedclust.participant.secure import PeerPins, SecureSession
from fedclust.participant.terms import OwnBounds, require_task
from fedclust.protocol.algorithms.fed_distill_params import DistillParams
from fedclust.protocol.algorithms.fedcref_params import FedCRefParams
from fedclust.protocol.maths.fedcref import AutoencoderSpec
from fedclust.protocol.wire import messages as msg
from fedclust.protocol.wire.messages import JobCreate

if TYPE_CHECKING:
    from fedclust.participant.deep.distill_local import DistillParticipant
    from fedclust.participant.deep.fedcref_local import FedCRefLocal

__all__ = [
    "MNIST_FILE",
    "SETUPS",
    "DeepData",
    "DeepGroup",
    "DeepIteration",
    "DeepSimulationDocument",
    "DistillFederation",
    "FedCRefFederation",
    "PreparedDistillTasks",
    "PreparedFedCRefTasks",
    "class_sets",
    "distill_federation",
    "fedcref_federation",
    "format_deep_result",
    "load_dataset",
    "require_torch",
    "simulate_fed_distill",
    "simulate_fedcref",
]

#: MNIST's file in the shared datasets folder (``data.loaders.shared_dataset_file``).
MNIST_FILE = "mnist/mnist_uint8.npz"
_JOB_ID = "simulation-deep"
Protection = Literal["masking", "none"]
FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


def require_torch() -> None:
    """Raise a clear RuntimeError when PyTorch (the ``fedclust[deep]`` extra) is missing."""
    if importlib.util.find_spec("torch") is None:
        raise RuntimeError(
            "the model-based algorithms (fedcref, fed-distill) need PyTorch: "
            "install fedclust[deep]"
        )


# -- data --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DeepData:
    """Labelled images, flattened and scaled to [0, 1]; a separate test split or none."""

    name: str
    X: FloatArray
    y: IntArray
    X_test: FloatArray | None = None
    y_test: IntArray | None = None

    @property
    def n_features(self) -> int:
        return int(self.X.shape[1])


def load_dataset(name: str, *, pooled: bool = False) -> DeepData:
    """``digits`` (scikit-learn's 8x8 digits / 16) or ``mnist`` (:data:`MNIST_FILE` of the
    shared datasets folder, / 255). ``pooled``: MNIST's training and test images as one set
    (70,000 images, no separate test split: FedCRef's paper set-up)."""
    if name == "digits":
        from sklearn.datasets import load_digits

        X, y = load_digits(return_X_y=True)
        return DeepData("digits", np.asarray(X, dtype=np.float64) / 16.0, y.astype(np.int64))
    if name == "mnist":
        from fedclust.data.loaders import shared_dataset_file

        try:
            path = shared_dataset_file(MNIST_FILE)
        except FileNotFoundError as exc:
            raise FileNotFoundError(f"MNIST not found: {exc} Or use --dataset digits.") from None
        d = np.load(path)
        X, y = d["X_train"].reshape(-1, 784) / 255.0, d["y_train"].astype(np.int64)
        X_test, y_test = d["X_test"].reshape(-1, 784) / 255.0, d["y_test"].astype(np.int64)
        if pooled:
            return DeepData("mnist", np.vstack([X, X_test]), np.concatenate([y, y_test]))
        return DeepData("mnist", X, y, X_test, y_test)
    raise ValueError(
        f"the model-based algorithms take --dataset {' or '.join(DATASETS)}; got {name!r}"
    )


def class_sets(rng: np.random.Generator, n_groups: int, n_classes: int) -> list[tuple[int, ...]]:
    """Distinct random class sets of size n_classes; disjoint when n_groups·n_classes <= 10."""
    if n_groups * n_classes <= N_CLASSES:
        perm = rng.permutation(N_CLASSES)
        return [
            tuple(sorted(int(v) for v in perm[g * n_classes : (g + 1) * n_classes]))
            for g in range(n_groups)
        ]
    if n_groups > math.comb(N_CLASSES, n_classes):
        raise ValueError(
            f"{n_groups} groups cannot have distinct sets of {n_classes} of the 10 classes."
        )
    sets: list[tuple[int, ...]] = []
    while len(sets) < n_groups:
        s = tuple(sorted(int(v) for v in rng.choice(N_CLASSES, size=n_classes, replace=False)))
        if s not in sets:
            sets.append(s)
    return sets


def _pool_shortfall(pools: dict[int, list[int]], need: dict[int, int], what: str) -> None:
    short = [c for c, n in need.items() if n > len(pools[c])]
    if short:
        raise ValueError(
            f"the dataset has too few rows of class(es) {short} for {what}; lower "
            "--samples-per-class, --public-per-class or the number of clients"
        )


@dataclass
class DistillFederation:
    """Participants, their true group, the public set, each participant's test rows, and each
    participant's labelled rows (``rows``, aligned with ``participants``: what its agent
    holds)."""

    participants: list[DistillParticipant]
    truth: list[int]
    sets: list[tuple[int, ...]]
    public: FloatArray
    X_test: FloatArray
    y_test: IntArray
    tests: dict[str, IntArray]
    rows: list[tuple[FloatArray, IntArray]]

    def evaluate(self, p: DistillParticipant) -> float:
        """Accuracy of a participant on the test rows of its group's classes."""
        idx = self.tests[p.name]
        return p.evaluate(self.X_test[idx], self.y_test[idx])

    def per_true_group(self, acc: Sequence[tuple[str, float]]) -> list[float]:
        """Mean accuracy over each true group's members."""
        a = dict(acc)
        names = [p.name for p in self.participants]
        return [
            float(np.mean([a[n] for n, t in zip(names, self.truth, strict=True) if t == g]))
            for g in range(len(self.sets))
        ]


def distill_federation(
    data: DeepData,
    *,
    groups: int,
    clients_per_group: int,
    classes_per_group: int,
    samples_per_class: int,
    public_per_class: int,
    test_per_class: int,
    kind: Literal["mlp", "cnn"],
    seed: int,
    device: str = "auto",
) -> DistillFederation:
    """The Yang & Tae set-up (module docstring); rows are disjoint between all parties;
    every participant trains on ``device``."""
    from fedclust.participant.deep.classifier import ClassifierSpec
    from fedclust.participant.deep.distill_local import DistillParticipant

    owner = "distill_federation"
    groups = check_int(groups, name="groups", owner=owner, low=1)
    clients_per_group = check_int(clients_per_group, name="clients_per_group", owner=owner, low=1)
    classes_per_group = check_int(
        classes_per_group, name="classes_per_group", owner=owner, low=1, high=N_CLASSES
    )
    per_class = check_int(samples_per_class, name="samples_per_class", owner=owner, low=1)
    public_per_class = check_int(public_per_class, name="public_per_class", owner=owner, low=1)
    rng = np.random.default_rng(seed)
    pools = {c: list(rng.permutation(np.flatnonzero(data.y == c))) for c in range(N_CLASSES)}
    _pool_shortfall(pools, dict.fromkeys(range(N_CLASSES), public_per_class), "the public set")
    public_idx = [pools[c].pop() for c in range(N_CLASSES) for _ in range(public_per_class)]
    if data.X_test is not None and data.y_test is not None:
        X_test, y_test = data.X_test, data.y_test
        test_idx = {
            c: rng.permutation(np.flatnonzero(y_test == c))[:test_per_class]
            for c in range(N_CLASSES)
        }
    else:
        X_test, y_test = data.X, data.y
        _pool_shortfall(pools, dict.fromkeys(range(N_CLASSES), test_per_class), "the test rows")
        test_idx = {
            c: np.array([pools[c].pop() for _ in range(test_per_class)], dtype=np.int64)
            for c in range(N_CLASSES)
        }
    spec = ClassifierSpec(data.n_features, N_CLASSES, kind)
    sets = class_sets(rng, groups, classes_per_group)
    need = dict.fromkeys(range(N_CLASSES), 0)
    for classes in sets:
        for c in classes:
            need[c] += clients_per_group * per_class
    _pool_shortfall(pools, need, "the clients")
    participants: list[DistillParticipant] = []
    truth: list[int] = []
    tests: dict[str, IntArray] = {}
    rows: list[tuple[FloatArray, IntArray]] = []
    for g, classes in enumerate(sets):
        te = np.concatenate([test_idx[c] for c in classes]).astype(np.int64)
        for k in range(clients_per_group):
            idx = np.array([pools[c].pop() for c in classes for _ in range(per_class)])
            rows.append((data.X[idx], data.y[idx]))
            p = DistillParticipant(*rows[-1], name=f"g{g}-c{k}", spec=spec, device=device)
            participants.append(p)
            truth.append(g)
            tests[p.name] = te
    return DistillFederation(
        participants, truth, sets, data.X[public_idx], X_test, y_test, tests, rows
    )


@dataclass
class FedCRefFederation:
    """FedCRef participants, the number of classes present (the true global K) and each
    participant's rows with their true classes (``rows``, aligned with ``participants``)."""

    participants: list[FedCRefLocal]
    true_k: int
    rows: list[tuple[FloatArray, IntArray]]


def fedcref_federation(
    data: DeepData,
    *,
    clients: int,
    classes_per_client: tuple[int, int] = (2, 5),
    samples_per_class: int,
    dirtiness: float,
    initial: Literal["dirty", "kmeans"] = "dirty",
    local_epochs: int = 20,
    seed: int,
    device: str = "auto",
) -> FedCRefFederation:
    """Clients with A..B random classes each (``classes_per_client`` inclusive) and
    ``samples_per_class`` disjoint rows per class; ``initial`` is the initial clustering
    (``"kmeans"`` chooses K_i by silhouette); ``local_epochs`` of local training (early
    stopping; the paper's 20); every participant trains on ``device``."""
    from fedclust.participant.deep.autoencoder import TrainConfig
    from fedclust.participant.deep.fedcref_local import FedCRefLocal

    owner = "fedcref_federation"
    clients = check_int(clients, name="clients", owner=owner, low=2)
    lo, hi = classes_per_client
    check_int(lo, name="classes_per_client", owner=owner, low=1, high=N_CLASSES)
    check_int(hi, name="classes_per_client", owner=owner, low=lo, high=N_CLASSES)
    per_class = check_int(samples_per_class, name="samples_per_class", owner=owner, low=1)
    dirtiness = check_float(dirtiness, name="dirtiness", owner=owner, low=0.0, high=1.0)
    config = TrainConfig(epochs=check_int(local_epochs, name="local_epochs", owner=owner, low=1))
    rng = np.random.default_rng(seed)
    by_class = {c: rng.permutation(np.flatnonzero(data.y == c)) for c in range(N_CLASSES)}
    used = dict.fromkeys(range(N_CLASSES), 0)
    present: set[int] = set()
    parts: list[FedCRefLocal] = []
    held: list[tuple[FloatArray, IntArray]] = []
    for i in range(clients):
        classes = rng.choice(N_CLASSES, size=int(rng.integers(lo, hi + 1)), replace=False)
        rows = []
        for c in (int(v) for v in classes):
            start = used[c]
            if start + per_class > by_class[c].size:
                raise ValueError(
                    f"the dataset has too few rows of class {c} for {clients} clients with "
                    f"{per_class} rows per class; lower --samples-per-class or --clients"
                )
            rows.append(by_class[c][start : start + per_class])
            used[c] = start + per_class
            present.add(c)
        idx = np.concatenate(rows)
        held.append((data.X[idx], data.y[idx]))
        parts.append(
            FedCRefLocal(
                held[-1][0], name=f"client-{i}", initial=initial, y_true=held[-1][1],
                dirtiness=dirtiness, config=config, device=device,
            )
        )
    return FedCRefFederation(parts, len(present), held)


# -- the service's job, in process ------------------------------------------------------------
class PreparedFedCRefTasks(FedCRefTasks):
    """The agent's FedCRef tasks over a simulated participant: ``fedcref_init`` starts from the
    federation's :class:`FedCRefLocal` (its initial clustering, k-means or the paper's dirty
    labels, and the true classes the simulator evaluates it against) instead of a new one."""

    def __init__(self, local: FedCRefLocal, X: FloatArray, y: IntArray | None) -> None:
        super().__init__(X, y, name=local.name)
        self._prepared = local

    def _new(
        self, initial: Literal["kmeans", "labels"], k: int | None, k_max: int, epochs: int,
        hidden: tuple[int, ...],
    ) -> tuple[Any, Any]:
        return self._prepared, AutoencoderSpec(self._prepared.n_features, hidden)


class PreparedDistillTasks(DistillTasks):
    """The agent's fed-distill tasks over a simulated participant: ``distill_train`` trains
    the federation's :class:`DistillParticipant` (the one the simulator evaluates)."""

    def __init__(self, participant: DistillParticipant, X: FloatArray, y: IntArray) -> None:
        super().__init__(X, y, name=participant.name)
        self._prepared = participant

    def _participant(self, n_classes: int, classifier: Literal["mlp", "cnn"]) -> Any:
        return self._prepared


class _InProcessAgents:
    """The simulated job's task channel (``coordinator.remote.TaskChannel``): each
    participant is an agent in this process that checks every task against the job's terms
    (``participant.terms.require_task``) and answers through the agent's own dispatch
    (``participant.dispatch.execute``: policy, model tasks, and the secure-sum stages of its
    :class:`SecureSession` under a fresh identity key)."""

    def __init__(
        self, spec: JobCreate, agents: Sequence[tuple[FloatArray, FedCRefTasks | DistillTasks]]
    ) -> None:
        self._spec = spec
        self.identities: dict[str, bytes] = {}
        self._agents: dict[str, tuple[LocalParticipant, SecureStages, Iterator[int]]] = {}
        # The simulated organisations are the user's: they accept the job's protection.
        policy = Policy(protections=accepting(spec.protection))
        for name, (X, tasks) in zip(spec.participants, agents, strict=True):
            local = LocalParticipant(X, name=name, policy=policy)
            local.model_tasks = tasks
            key = IdentityKey.generate()
            self.identities[name] = key.public_bytes()
            session = SecureSession(
                local, participant_id=name, job_id=_JOB_ID, identity=key, pins=PeerPins()
            )
            self._agents[name] = (local, SecureStages(session, None), itertools.count(1))

    def ask(self, participant: str, spec: msg.TaskSpec) -> msg.Reply:
        local, stages, numbers = self._agents[participant]
        try:  # the agent's check of every task against the job's terms
            own = OwnBounds.of(local.declaration, local.n_features)
            require_task(self._spec, self._spec.algorithm, spec, own)
        except RefusedError as exc:
            return msg.RefusalReply(reason=str(exc))
        task = msg.Task(
            job_id=_JOB_ID, task_id=next(numbers), algorithm=self._spec.algorithm, spec=spec
        )
        return dispatch.execute(local, task, stages)


R = TypeVar("R")


def _run_job(
    spec: JobCreate,
    agents: _InProcessAgents,
    n_features: int,
    run: Callable[[list[RemoteParticipant], JobSummation | None], R],
) -> tuple[R, list[str]]:
    """The coordinator's side of a model-based job (as ``coordinator.runner`` runs it): the
    job's masked summation over the agents' identity keys (none for protection "none"), the
    participants' declarations and the bounds they give the summation, then ``run`` (the
    job's driver). Returns the driver's result and the summation's notes."""
    remotes = [
        RemoteParticipant(name, channel=agents, n_features=n_features)
        for name in spec.participants
    ]
    summation = None if spec.protection == "none" else MaskedSummation(
        _JOB_ID, agents.identities, concurrent=False, graph=spec.masking_graph
    )
    bounds = declare_job(remotes, spec, n_features=n_features)
    if summation is not None:
        summation.set_bounds(max_rows=bounds.max_rows, value_bound=bounds.value_bound)
    with _torch_threads(len(remotes)):
        result = run(remotes, summation)
    return result, [] if summation is None else summation.notes


@contextlib.contextmanager
def _torch_threads(participants: int) -> Iterator[None]:
    """torch's CPU threads at ``threads_per_participant(participants)`` while the drivers
    ask every participant at once (one thread each); restored after. Measured on 2 shared
    cores (digits, defaults): 1 thread each 3.4 s against 4.7 s with torch's 2 (fed-distill,
    12 participants), 2.4 s against 3.0 s (FedCRef, 8), the same results."""
    import torch

    from fedclust.participant.deep.device import threads_per_participant

    before = torch.get_num_threads()
    torch.set_num_threads(threads_per_participant(participants))
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _check_protection(protection: str) -> None:
    if protection not in ("masking", "none"):
        raise ValueError(
            f"the model-based algorithms take --protection masking or none; got {protection!r}"
        )


# -- result document ---------------------------------------------------------------------------
class DeepGroup(BaseModel):
    """One group found: its members (participant names, or ``name:cluster`` for FedCRef),
    the true group / class of each member, its accuracy and whether its sums were masked."""

    members: list[str]
    truth: list[int]
    accuracy: float | None = None
    protected: bool


class DeepIteration(BaseModel):
    """One FedCRef iteration."""

    iteration: int
    groups: int
    isolated_clusters: int
    wrong_associations: int | None
    mean_accuracy: float | None
    frozen: int


class DeepSimulationDocument(BaseModel):
    """The ``--json`` document of a model-based simulation (stable field names).

    ``true_groups``: fed-distill's true client groups; FedCRef's classes present (true K).
    ``ari``: fed-distill, the found client groups against the true ones; FedCRef, over all
    local clusters of the last association, the group of each (an isolated cluster is its own
    group) against its majority true class. ``groups[].truth`` is correspondingly each
    member's true group or majority class. Accuracies: fed-distill test accuracy (mean over
    clients) after distillation, and after local training only; FedCRef mean local clustering
    ACC (Hungarian) of the initial and the final assignments, and of the local-only baseline
    (``local_only_accuracy``; None unless asked for). ``preset``: "code" or "paper";
    ``device``: where the participants trained ("cpu", "cuda", "cuda:N"; what "auto" became).
    """

    algorithm: str
    dataset: str
    seed: int
    protection: str
    preset: str
    device: str
    participants: int
    params: dict[str, Any]
    true_groups: int
    groups_found: int
    ari: float
    groups: list[DeepGroup]
    # fed-distill
    mode: str | None = None
    accuracy_per_true_group: list[float] | None = None
    local_accuracy_per_true_group: list[float] | None = None
    overall_accuracy: float | None = None
    local_overall_accuracy: float | None = None
    # fedcref
    isolated_clusters: int | None = None
    wrong_associations: int | None = None
    initial_accuracy: float | None = None
    final_accuracy: float | None = None
    local_only_accuracy: float | None = None
    iterations: list[DeepIteration] | None = None
    stop_reason: str | None = None
    seconds: float
    notes: list[str]


def _settings(
    algorithm: str, preset: str, params: Mapping[str, Any] | None, given: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The federation (:data:`SETUPS`) and the job's parameters
    (``deep_setups.job_defaults``) of ``preset``, overridden by the fields ``params`` and then
    by the arguments ``given`` that are not None (a field or a federation's key)."""
    if preset not in SETUPS[algorithm]:
        raise ValueError(
            f"--preset must be {' or '.join(SETUPS[algorithm])}; got {preset!r}"
        )
    setup = dict(SETUPS[algorithm][preset])
    chosen = {**(params or {}), **{k: v for k, v in given.items() if v is not None}}
    setup.update({k: v for k, v in chosen.items() if k in setup})
    job = job_defaults(algorithm, preset, str(setup["dataset"]))
    job.update({k: v for k, v in chosen.items() if k not in setup})
    return setup, job


def simulate_fed_distill(
    dataset: str | None = None,
    *,
    preset: str = "code",
    groups: int | None = None,
    clients_per_group: int | None = None,
    classes_per_group: int | None = None,
    samples_per_class: int | None = None,
    public_per_class: int | None = None,
    test_per_class: int | None = None,
    distance_threshold: float | None = None,
    temperature: float | None = None,
    distill_epochs: int | None = None,
    local_epochs: int | None = None,
    learning_rate: float | None = None,
    batch_size: int | None = None,
    mode: Literal["clustered", "global", "local"] | None = None,
    params: Mapping[str, Any] | None = None,
    protection: Protection = "masking",
    seed: int = 0,
    device: str = "auto",
) -> DeepSimulationDocument:
    """Clustered federated distillation over a simulated federation (see module docstring).

    ``params``: fields of ``DistillParams`` by name (``public`` is the federation's); the
    named arguments are fields too (``distill_epochs`` its ``epochs``) and override it. A
    field not given takes ``deep_setups.job_defaults``' value (under "code", ``epochs`` 30 on
    digits with the MLP classifier, 50, the authors' code's, on MNIST with the CNN), else
    ``DistillParams``' default; ``n_classes`` is the data's 10.
    """
    require_torch()
    from fedclust.participant.deep.device import resolve_device
    from fedclust.protocol.maths.distillation import grouping_ari

    _check_protection(protection)
    t0 = time.perf_counter()
    used = str(resolve_device(device, where="--device"))
    setup, job = _settings("fed-distill", preset, params, {
        "dataset": dataset, "groups": groups, "clients_per_group": clients_per_group,
        "classes_per_group": classes_per_group, "samples_per_class": samples_per_class,
        "public_per_class": public_per_class, "test_per_class": test_per_class,
        "distance_threshold": distance_threshold, "temperature": temperature,
        "epochs": distill_epochs, "local_epochs": local_epochs,
        "learning_rate": learning_rate, "batch_size": batch_size, "mode": mode,
    })
    dataset = str(setup.pop("dataset"))
    data = load_dataset(dataset)
    if job["n_classes"] != N_CLASSES:
        raise ValueError(f"--n-classes: the simulated {dataset} images have {N_CLASSES} "
                         f"classes; got {job['n_classes']}")
    fed = distill_federation(data, kind=job["classifier"], seed=seed, device=device, **setup)
    names = [p.name for p in fed.participants]
    job_params = DistillParams(public=msg.WireArray.of(fed.public), **job)
    mode = job_params.mode
    spec = JobCreate(
        algorithm="fed-distill", participants=names, seed=seed, protection=protection,
        **{"distill": job_params},  # JobCreate's blocks are made from the registry
    )
    agents = _InProcessAgents(
        spec, [(X, PreparedDistillTasks(p, X, y)) for p, (X, y) in zip(
            fed.participants, fed.rows, strict=True)],
    )
    by_name = {p.name: p for p in fed.participants}

    def run(
        remotes: list[RemoteParticipant], summation: JobSummation | None
    ) -> FedDistillResult:
        return run_distill_job(
            remotes, spec, summation=summation,
            evaluate=lambda r: fed.evaluate(by_name[r.name]),
        )

    res, secure_notes = _run_job(spec, agents, data.n_features, run)
    service = distill_result_document(res, spec, secure_notes=secure_notes)
    found = res.group_labels(names)
    truth_of = dict(zip(names, fed.truth, strict=True))
    unprotected = service.unprotected_groups or []
    out_groups = [
        DeepGroup(
            members=list(g), truth=[truth_of[n] for n in g],
            accuracy=res.group_accuracy[i] if res.group_accuracy else None,
            protected=protection == "masking" and mode != "local" and list(g) not in unprotected,
        )
        for i, g in enumerate(res.groups)
    ]
    # The service's notes: the driver's (each group too small to mask) and the summation's.
    notes = list(service.notes)
    if protection == "none" and mode != "local":
        notes.append("--protection none: the group sums were formed in the clear.")
    local = fed.per_true_group(res.accuracy_before)
    return DeepSimulationDocument(
        algorithm="fed-distill", dataset=dataset, seed=seed, protection=protection,
        participants=len(names),
        preset=preset, device=used,
        params={
            **setup, "distance_threshold": job_params.distance_threshold,
            "temperature": job_params.temperature, "distill_epochs": job_params.epochs,
            "local_epochs": job_params.local_epochs, "learning_rate": job_params.learning_rate,
            "batch_size": job_params.batch_size, "class_sets": fed.sets,
        },
        true_groups=len(fed.sets), groups_found=len(res.groups),
        ari=grouping_ari(np.array(fed.truth), np.array(found)), groups=out_groups, mode=mode,
        accuracy_per_true_group=fed.per_true_group(res.accuracy),
        local_accuracy_per_true_group=local,
        overall_accuracy=res.overall_accuracy,
        local_overall_accuracy=float(np.mean([a for _, a in res.accuracy_before])),
        seconds=time.perf_counter() - t0, notes=notes,
    )


def simulate_fedcref(
    dataset: str | None = None,
    *,
    preset: str = "code",
    clients: int | None = None,
    classes_per_client: tuple[int, int] | None = None,
    samples_per_class: int | None = None,
    dirtiness: float = 0.0,
    initial: Literal["dirty", "kmeans"] | None = None,
    theta: float | None = None,
    alpha: float | None = None,
    tau: float | None = None,
    fedavg_rounds: int | None = None,
    max_iterations: int | None = None,
    refine_with: Literal["groups", "all"] | None = None,
    local_epochs: int | None = None,
    params: Mapping[str, Any] | None = None,
    param_bound: float = 100.0,
    protection: Protection = "masking",
    seed: int = 0,
    device: str = "auto",
    local_only: bool = False,
) -> DeepSimulationDocument:
    """FedCRef over a simulated federation (see module docstring).

    ``params``: fields of ``FedCRefParams`` by name; the named arguments are fields too
    (``local_epochs`` its ``epochs``; ``initial`` "dirty" its "labels": each participant's
    own labels, a fraction ``dirtiness`` of them swapped) and override it. A field not given
    takes ``deep_setups.job_defaults``' value: the preset's (under "code" the authors' code's
    values, but the quick set-up's theta 0.55 on digits, 60 local epochs and 3 iterations:
    ``deep_setups.QUICK``), initial "labels", else ``FedCRefParams``' default. "paper": the
    paper's MNIST set-up (:data:`SETUPS`, ``protocol.algorithms.fedcref``).

    Masked fields (``coordinator.secure_sum.field_encodings``): ``weighted_params`` = n·θ
    with |θ| <= ``param_bound`` (the job's ``value_bound``) per value and n <= the job's
    max_rows (the largest declared row bound), and ``rows`` = n.

    ``local_only``: after the federated run, every participant is put back to its initial
    clustering and models (kept when the driver first evaluates them, right after
    ``fedcref_init``) and runs the local-only baseline with the job's tau and
    max_iterations (``local_only_baseline``); its mean ACC is ``local_only_accuracy``.
    """
    require_torch()
    from fedclust.participant.deep.device import resolve_device
    from fedclust.participant.deep.fedcref_local import label_evaluator, local_only_baseline
    from fedclust.protocol.maths.distillation import grouping_ari
    from fedclust.protocol.maths.fedcref import ClusterRef, Grouping

    _check_protection(protection)
    t0 = time.perf_counter()
    used = str(resolve_device(device, where="--device"))
    setup, job = _settings("fedcref", preset, params, {
        "dataset": dataset, "clients": clients, "classes_per_client": classes_per_client,
        "samples_per_class": samples_per_class, "theta": theta, "alpha": alpha, "tau": tau,
        "fedavg_rounds": fedavg_rounds, "max_iterations": max_iterations,
        "refine_with": refine_with, "epochs": local_epochs,
        "initial": None if initial is None else "kmeans" if initial == "kmeans" else "labels",
    })
    dataset = str(setup.pop("dataset"))
    bound = check_float(param_bound, name="param_bound", owner="simulate_fedcref", low=0.0,
                        low_open=True)
    data = load_dataset(dataset, pooled=bool(setup.pop("pooled")))
    job_params = FedCRefParams(**job)
    start: Literal["dirty", "kmeans"] = "kmeans" if job_params.initial == "kmeans" else "dirty"
    fed = fedcref_federation(
        data, dirtiness=dirtiness, initial=start, local_epochs=job_params.epochs, seed=seed,
        device=device, **setup,
    )
    parts = fed.participants
    names = [p.name for p in parts]
    spec = JobCreate(
        algorithm="fedcref", participants=names, seed=seed, protection=protection,
        value_bound=bound, **{"fedcref": job_params},  # JobCreate's blocks: from the registry
    )
    agents = _InProcessAgents(
        spec,
        [(X, PreparedFedCRefTasks(p, X, y)) for p, (X, y) in zip(parts, fed.rows, strict=True)],
    )
    base = label_evaluator(parts)
    majority: dict[ClusterRef, int] = {}
    # Each participant's (labels, models, stale) after fedcref_init, for the local-only run.
    starts: list[tuple[Any, list[Any], bool]] = []

    def evaluate(grouping: Grouping | None) -> Any:
        if local_only and grouping is None and not starts:  # the first call: after init
            starts.extend((p.labels, p.fedcref_models(), p.needs_training) for p in parts)
        if grouping is not None:  # the true class of each cluster, at association time
            majority.clear()
            for i, p in enumerate(parts):
                _, maj = p.fedcref_evaluation()
                classes = p.true_classes()
                majority.update({(i, q): int(classes[m]) for q, m in enumerate(maj)})
        return base(grouping)

    def run(remotes: list[RemoteParticipant], summation: JobSummation | None) -> FedCRefResult:
        return run_fedcref_job(remotes, spec, summation=summation, evaluate=evaluate)

    res, secure_notes = _run_job(spec, agents, data.n_features, run)
    service = fedcref_result_document(res, spec, secure_notes=secure_notes)
    last = res.iterations[-1]
    grouping = last.grouping
    unprotected = service.unprotected_groups or []

    def ref(c: ClusterRef) -> str:
        return f"{names[c[0]]}:{c[1]}"

    out_groups = [
        DeepGroup(
            members=[ref(c) for c in g], truth=[majority[c] for c in g],
            protected=[ref(c) for c in g] not in unprotected,
        )
        for g in grouping.groups
    ]
    found: list[int] = []
    true: list[int] = []
    for c, label in grouping.group_of().items():
        found.append(label)
        true.append(majority[c])
    for j, c in enumerate(grouping.isolated):
        found.append(len(grouping.groups) + j)
        true.append(majority[c])
    # The service's notes: the driver's (groups too small to mask) and the summation's.
    notes = list(service.notes)
    if protection == "none":
        notes.append("--protection none: the FedAvg sums were formed in the clear.")
    if not grouping.groups:
        notes.append(
            f"no clusters were associated at theta={job_params.theta}: eq. 2 scores fall as "
            "clusters grow, so small clusters (tens of rows) need a larger theta (~0.55)."
        )
    local_acc = None
    if local_only:
        architecture = AutoencoderSpec(data.n_features, job_params.hidden)
        for p, (labels, models, stale) in zip(parts, starts, strict=True):
            p.restore(architecture, labels, models, stale=stale)
        local_acc = local_only_baseline(
            parts, tau=job_params.tau, max_iterations=job_params.max_iterations, seed=seed
        ).mean_accuracy
    return DeepSimulationDocument(
        algorithm="fedcref", dataset=dataset, seed=seed, protection=protection,
        preset=preset, device=used, participants=len(names),
        params={
            **setup, "classes_per_client": list(setup["classes_per_client"]),
            "dirtiness": dirtiness, "initial": start, "theta": job_params.theta,
            "alpha": job_params.alpha, "tau": job_params.tau,
            "fedavg_rounds": job_params.fedavg_rounds,
            "max_iterations": job_params.max_iterations, "refine_with": job_params.refine_with,
            "local_epochs": job_params.epochs, "param_bound": bound,
        },
        true_groups=fed.true_k, groups_found=last.n_groups,
        ari=grouping_ari(np.array(true), np.array(found)) if true else 0.0,
        groups=out_groups, isolated_clusters=last.n_isolated,
        wrong_associations=last.wrong_associations,
        initial_accuracy=res.initial_accuracy, final_accuracy=last.mean_accuracy,
        local_only_accuracy=local_acc,
        iterations=[
            DeepIteration(
                iteration=r.iteration, groups=r.n_groups, isolated_clusters=r.n_isolated,
                wrong_associations=r.wrong_associations, mean_accuracy=r.mean_accuracy,
                frozen=len(r.frozen),
            )
            for r in res.iterations
        ],
        stop_reason=res.stop_reason, seconds=time.perf_counter() - t0, notes=notes,
    )


def _acc(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def format_deep_result(doc: DeepSimulationDocument, *, title: str = "fedclust simulate") -> str:
    """The text report: groups found vs truth, ARI, accuracies, notes."""
    from fedclust.tables import render_table

    what = "true groups" if doc.algorithm == "fed-distill" else "classes present (true K)"
    mode = f", mode {doc.mode}" if doc.mode else ""
    lines = [
        f"{title}: {doc.algorithm} on {doc.dataset} ({doc.participants} participants, "
        f"seed {doc.seed}, protection {doc.protection}{mode}, preset {doc.preset}, "
        f"device {doc.device})",
        "",
        f"groups found: {doc.groups_found}   {what}: {doc.true_groups}   ARI: {doc.ari:.3f}",
    ]
    if doc.algorithm == "fedcref":
        lines.append(
            f"wrong associations: {doc.wrong_associations}   isolated clusters: "
            f"{doc.isolated_clusters}   mean ACC: initial {_acc(doc.initial_accuracy)} -> "
            f"final {_acc(doc.final_accuracy)}   ({len(doc.iterations or [])} iterations, "
            f"stop: {doc.stop_reason})"
        )
        if doc.local_only_accuracy is not None:
            lines.append(f"local-only baseline mean ACC: {_acc(doc.local_only_accuracy)}")
    lines.append("")
    for g, group in enumerate(doc.groups):
        acc = f"  accuracy {group.accuracy:.3f}" if group.accuracy is not None else ""
        label = "true group" if doc.algorithm == "fed-distill" else "true class"
        masked = "local" if doc.mode == "local" else "masked" if group.protected else "clear"
        lines.append(f"  group {g} [{masked}]{acc}")
        lines.append(
            "    " + ", ".join(f"{m} ({label} {t})" for m, t in zip(
                group.members, group.truth, strict=True))
        )
    if doc.iterations:
        iterations = [
            [str(r.iteration), str(r.groups), str(r.isolated_clusters),
             str(r.wrong_associations), _acc(r.mean_accuracy), str(r.frozen)]
            for r in doc.iterations
        ]
        headers = ["it", "groups", "isolated", "wrong", "ACC", "frozen"]
        lines += ["", render_table(headers, iterations, numeric=range(6), indent=2)]
    if doc.accuracy_per_true_group is not None:
        sets = doc.params.get("class_sets", [])
        local = doc.local_accuracy_per_true_group or []
        per_group = [
            [str(g), ",".join(str(c) for c in sets[g]) if g < len(sets) else "", f"{a:.3f}",
             _acc(local[g]) if g < len(local) else "-"]
            for g, a in enumerate(doc.accuracy_per_true_group)
        ]
        headers = ["true group", "classes", "accuracy", "local-only"]
        lines += ["", render_table(headers, per_group, numeric=(0, 2, 3), indent=2)]
        lines.append(
            f"  overall accuracy {_acc(doc.overall_accuracy)} (local-only "
            f"{_acc(doc.local_overall_accuracy)})"
        )
    lines.append("")
    lines.append(f"{doc.seconds:.1f} s")
    lines.extend(f"note: {n}" for n in doc.notes)
    return "\n".join(lines)
