"""The registry of algorithms: the one list of what a job, a policy or a config file can name.

An algorithm is one :class:`AlgorithmSpec`, declared in one module of this package, that
states what is specific to it: its name and paper, its family (a K sweep scored by FedFuzzDB,
or a model-based job), the task kinds its job sends (the participants' check of a job's
terms), what its protocol shows the coordinator in the clear and when protected (the
disclosure ledger), and where its coordinator-side procedure lives. Everything else reads
the registry: the wire format's ``algorithm`` fields and their OpenAPI enum, the participant's
policy and config, the command line, the ledger and the drivers.

A procedure is named, not imported (``"module:function"``), so this package stays below the
coordinator; :meth:`AlgorithmSpec.procedure` imports it when a job runs. A sweep
algorithm's procedure is ``f(participants, k, options) -> FederatedResult`` (one K, one run;
``coordinator.result.RunOptions``); a model-based one's is ``f(participants, spec, *,
summation, on_stage, notes) -> ResultDocument``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Literal

__all__ = [
    "SWEEP_TASKS", "AlgorithmSpec", "Family", "get", "names", "register", "unregister",
]

Family = Literal["sweep", "model"]

#: The tasks every sweep job may send besides its algorithm's own: the declaration, the
#: count, standardisation, the local-only choice of K, FedFuzzDB and the silhouette.
SWEEP_TASKS: Final = frozenset(
    {"declare", "report_count", "moment_sums", "apply_standardisation", "local_k",
     "fuzzy_db_sums", "silhouette_sums"}
)


@dataclass(frozen=True)
class AlgorithmSpec:
    """One registered algorithm.

    Attributes:
        name: what jobs, policies and config files call it.
        title: one line naming the method and its paper.
        family: "sweep" (clusters for each K of a range, scored by FedFuzzDB) or "model".
        tasks: the task kinds its job sends (secure-sum stages aside); a participant refuses
            any other (``participant.terms``). A sweep algorithm's include :data:`SWEEP_TASKS`.
        procedure_path: ``"module:function"`` of its coordinator-side procedure.
        plain_notes: what its unprotected protocol shows the coordinator of one participant.
        protected_notes: what it shows when its sums are protected; None when it sends each
            participant's local centers by design, so protection "none" only.
        fuzzy: its centers are fuzzy c-means centers (the fuzzy initial box; assignment by
            memberships with the job's m).
        local_clustering: each participant clusters its own rows into K local clusters
            (K must not exceed what its declared rows guarantee).
        fcm_rule: the participants' exact-sum FCM rule applies (Corcuera Bárcena et al. §4.2).
        counts_contributors: its centers count the participants behind them
            (``min_center_contributors``).
    """

    name: str
    title: str
    family: Family
    tasks: frozenset[str]
    procedure_path: str
    plain_notes: str
    protected_notes: str | None
    fuzzy: bool = False
    local_clustering: bool = False
    fcm_rule: bool = False
    counts_contributors: bool = False
    _loaded: dict[str, Callable[..., Any]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        if not self.name or not all(c.isalnum() or c in "-_." for c in self.name):
            raise ValueError(f"an algorithm name is letters, digits, '-', '_' and '.'; got "
                             f"{self.name!r}")
        if self.family not in ("sweep", "model"):
            raise ValueError(f"family must be 'sweep' or 'model'; got {self.family!r}")
        if self.family == "sweep" and not self.tasks >= SWEEP_TASKS:
            raise ValueError(f"sweep algorithm {self.name!r} must send SWEEP_TASKS")
        if ":" not in self.procedure_path:
            raise ValueError(f"procedure_path must be 'module:function'; got "
                             f"{self.procedure_path!r}")
        if not self.plain_notes:
            raise ValueError(f"algorithm {self.name!r} needs plain_notes for the ledger")

    @property
    def plain_only(self) -> bool:
        """Whether it sends each participant's local centers by design (protection "none")."""
        return self.protected_notes is None

    def procedure(self) -> Callable[..., Any]:
        """Its coordinator-side procedure, imported on first use."""
        if "f" not in self._loaded:
            module, _, attr = self.procedure_path.partition(":")
            self._loaded["f"] = getattr(importlib.import_module(module), attr)
        return self._loaded["f"]


_REGISTRY: dict[str, AlgorithmSpec] = {}


def register(spec: AlgorithmSpec) -> AlgorithmSpec:
    """Add ``spec``; a name already registered is a ValueError."""
    if spec.name in _REGISTRY:
        raise ValueError(f"an algorithm named {spec.name!r} is already registered")
    _REGISTRY[spec.name] = spec
    return spec


def unregister(name: str) -> None:
    """Remove a registered algorithm (a test's own)."""
    get(name)
    del _REGISTRY[name]


def names(family: Family | None = None) -> tuple[str, ...]:
    """The registered names (of one family), in registration order."""
    return tuple(n for n, s in _REGISTRY.items() if family is None or s.family == family)


def get(name: str, family: Family | None = None) -> AlgorithmSpec:
    """The spec of ``name``; an unknown name (or one of another family) is a ValueError
    naming the choices."""
    spec = _REGISTRY.get(name)
    if spec is None or (family is not None and spec.family != family):
        choices = ", ".join(repr(n) for n in names(family))
        raise ValueError(f"unknown algorithm {name!r}; choose one of {choices}")
    return spec


def _register_builtins() -> None:
    from fedclust.protocol.algorithms import fed_distill, fedcref, fedfcm, ffcm, fkm, kfed

    for module in (ffcm, fedfcm, fkm, kfed, fed_distill, fedcref):
        for spec in module.SPECS:
            register(spec)


_register_builtins()
