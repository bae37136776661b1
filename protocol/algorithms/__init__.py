"""The registry of algorithms: the one list of what a job, a policy or a config file can name.

An algorithm is one :class:`AlgorithmSpec`, declared in one module of this package, that
states what is specific to it: its name and paper, its family (a K sweep scored by FedFuzzDB,
or a model-based job), the task kinds its job sends (the participants' check of a job's
terms), what its protocol shows the coordinator in the clear and when protected (the
disclosure ledger), where its coordinator-side procedure lives, and its parameters model (a
job's block of them, from which ``JobCreate``'s field, the OpenAPI document and the command
line's flags are made). A sum-type statistic is a :class:`StatisticSpec` (its fields' shapes
and bounds, its declared parameters, what a participant computes; the built-in ones in
``statistics``), asked with the one generic ``statistic`` task. Everything else reads the
registry: the wire format's ``algorithm`` and ``statistic`` names and their OpenAPI enums, the
participant's policy, config and terms check, the command line, the ledger and the drivers.

A procedure is named, not imported (``"module:function"``), so this package stays below the
coordinator; :meth:`AlgorithmSpec.procedure` imports it when a job runs. A parameters model
is named too (``"module:Class"``, in a module beside its algorithm's, e.g.
``fedcref_params``), so that importing the registry imports no pydantic (the command line's
first line comes before it); :attr:`AlgorithmSpec.params` imports it. A sweep
algorithm's procedure is ``f(participants, k, options) -> FederatedResult`` (one K, one run;
``coordinator.result.RunOptions``); a model-based one's is ``f(participants, spec, *,
summation, on_stage, notes) -> ResultDocument``.

An installed package adds algorithms and statistics by naming a module of them in the
:data:`PLUGIN_GROUP` entry-point group: registered on the registry's first import, after the
built-ins and before the wire format is made from it.
"""

from __future__ import annotations

import functools
import importlib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Generic, Literal, TypeVar

if TYPE_CHECKING:
    from pydantic import BaseModel

__all__ = [
    "PLUGIN_GROUP", "SWEEP_STATISTICS", "SWEEP_TASKS", "AlgorithmSpec", "Family", "Param",
    "StatisticSpec", "get", "names", "register", "register_statistic", "statistic",
    "statistic_names", "unregister", "unregister_statistic",
]

Family = Literal["sweep", "model"]

#: The entry-point group of installed algorithms: each entry names a module that lists its
#: statistics (``STATISTICS``) and algorithms (``SPECS``), as the built-in modules do.
PLUGIN_GROUP: Final = "fedclust.algorithms"

#: The tasks every sweep job may send besides its algorithm's own: the declaration, the
#: count, applying standardisation, the local-only choice of K and the statistics of
#: :data:`SWEEP_STATISTICS`.
SWEEP_TASKS: Final = frozenset(
    {"declare", "report_count", "apply_standardisation", "local_k", "statistic"}
)
#: The statistics every sweep job may ask: the moment sums (standardisation, the initial
#: box, ΣN of those present after a dropout) and, of each K's centers, FedFuzzDB's sums and
#: the simplified silhouette.
SWEEP_STATISTICS: Final = frozenset({"moment_sums", "fuzzy_db_sums", "silhouette_sums"})


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
        statistics: the registered statistics (:class:`StatisticSpec`) it asks in
            ``statistic`` tasks; a participant refuses any other. A sweep algorithm's include
            :data:`SWEEP_STATISTICS`.
        params_block: the field of a job (``JobCreate``) holding its parameters (``params``);
            None: the job's common parameters only.
        params_path: ``"module:Class"`` of its parameters model (pydantic, strict:
            ``core.models.Strict``; :attr:`params`), from which the job's ``params_block``
            field, its OpenAPI schema and the command line's flags are made; given with
            ``params_block``.
        params_required: a job must give the block; else it may leave it out for the
            model's defaults (every field must then have one).
        presets: named sets of values of its parameters model's fields (``--preset``; e.g.
            "paper" beside "code", the model's defaults); each documented where declared.
        takes_init: its runs start from global centers, which a job's ``init`` can give
            (the analyst's K initial centers instead of the driver's own seeding).
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
    statistics: frozenset[str] = frozenset()
    params_block: str | None = None
    params_path: str | None = None
    params_required: bool = False
    takes_init: bool = False
    presets: Mapping[str, Mapping[str, Any]] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if not self.name or not all(c.isalnum() or c in "-_." for c in self.name):
            raise ValueError(f"an algorithm name is letters, digits, '-', '_' and '.'; got "
                             f"{self.name!r}")
        if self.family not in ("sweep", "model"):
            raise ValueError(f"family must be 'sweep' or 'model'; got {self.family!r}")
        if self.family == "sweep" and not self.tasks >= SWEEP_TASKS:
            raise ValueError(f"sweep algorithm {self.name!r} must send SWEEP_TASKS")
        if self.family == "sweep" and not self.statistics >= SWEEP_STATISTICS:
            raise ValueError(f"sweep algorithm {self.name!r} must ask SWEEP_STATISTICS")
        if ":" not in self.procedure_path:
            raise ValueError(f"procedure_path must be 'module:function'; got "
                             f"{self.procedure_path!r}")
        if not self.plain_notes:
            raise ValueError(f"algorithm {self.name!r} needs plain_notes for the ledger")
        if self.statistics and "statistic" not in self.tasks:
            raise ValueError(f"algorithm {self.name!r} asks statistics: list 'statistic' in tasks")
        self._check_params()

    def _check_params(self) -> None:
        """A block names a model and a model a block (the model itself is checked when
        imported: :func:`_params_model`)."""
        if (self.params_block is None) != (self.params_path is None):
            raise ValueError(f"algorithm {self.name!r}: give params_block and params_path "
                             "together")
        if self.params_path is None:
            if self.presets or self.params_required:
                raise ValueError(f"algorithm {self.name!r} has presets or params_required "
                                 "but no params_path")
            return
        if ":" not in self.params_path:
            raise ValueError(f"params_path must be 'module:Class'; got {self.params_path!r}")
        if not self.params_block or not self.params_block.isidentifier() or (
            self.params_block.startswith("_")
        ):
            raise ValueError(f"algorithm {self.name!r}: params_block must be an identifier not "
                             f"starting with '_'; got {self.params_block!r}")

    @property
    def params(self) -> type[BaseModel] | None:
        """Its parameters model, imported on first use and checked (:func:`_params_model`);
        None: it has none."""
        return None if self.params_path is None else _params_model(self)

    @property
    def plain_only(self) -> bool:
        """Whether it sends each participant's local centers by design (protection "none")."""
        return self.protected_notes is None

    def procedure(self) -> Callable[..., Any]:
        """Its coordinator-side procedure, imported on first use."""
        return _load(self.procedure_path)

    def preset(self, name: str) -> dict[str, Any]:
        """The parameter values of preset ``name``; ValueError naming the presets it has."""
        if name not in self.presets:
            have = ", ".join(sorted(self.presets)) or "none"
            raise ValueError(f"--preset {name!r} is not one of {self.name}'s presets ({have}).")
        return dict(self.presets[name])


Shapes = Callable[[int, tuple[int, ...]], dict[str, tuple[int, ...]]]
Bounds = Callable[[int, tuple[int, ...], int, float, Mapping[str, float]], dict[str, float]]


@dataclass(frozen=True)
class Param:
    """A declared parameter of a statistic: a finite number above a lower limit.

    Attributes:
        gt: it must exceed this (None: any finite number).
        required: a task must give it; else it may leave it out (the statistic's default).
    """

    gt: float | None = None
    required: bool = True

    def admits(self, value: float) -> bool:
        """Whether ``value`` is finite and above the limit."""
        return math.isfinite(value) and (self.gt is None or value > self.gt)

    def describe(self) -> str:
        """The limit in words (for a refusal; never the value given)."""
        return "a finite number" + ("" if self.gt is None else f" > {self.gt!r}")


@dataclass(frozen=True)
class StatisticSpec:
    """A sum-type statistic of a participant for given centers, asked with the generic
    ``statistic`` task (``protocol.wire.messages.StatisticTask``): adding one adds no wire
    class.

    Attributes:
        name: what the task names.
        shapes: ``(D, centers' shape) -> {field: shape}``, every field summed over participants.
        bounds: ``(D, centers' shape, N, B, params) -> {field: bound}``, the most |sum| one
            participant with at most N rows, every value within [-B, B], can give for each
            field (the fixed-point encoding of a protected sum, ``protocol.wire.bounds``).
        compute_path: ``"module:function"`` of what a participant computes,
            ``f(source, centers, **params) -> {field: array}``, imported on first use; the
            source is what ``reads`` names.
        reads: "rows": the participant's rows, a ``protocol.maths.rows.RowSource`` (fold its
            blocks, ``protocol.maths.rows.fold``: the sum then streams, on a Dask cluster's
            workers too); "held": the local centers the last hold task kept and their
            objective, ``(protocol.maths.center_kmeans.LocalPoints, J)`` (refused before one).
        params: its declared parameters by name; a task's ``params`` must give each required
            one and no other, each within its limits (:meth:`check_params`).
        refusal_path: ``"module:function"`` of a privacy rule on public facts,
            ``f(declaration, centers' shape, D) -> reason | None``
            (``protocol.maths.declaration.Declaration``): a participant refuses the task when
            it gives a reason; None: no such rule.
        points: the shape of its centers but the last axis (D), when it takes a fixed number
            (``moment_sums``: (1,), one public point); None: any (:meth:`check_centers`).
    """

    name: str
    shapes: Shapes
    bounds: Bounds
    compute_path: str
    params: Mapping[str, Param] = field(default_factory=dict)
    refusal_path: str | None = None
    reads: Literal["rows", "held"] = "rows"
    points: tuple[int, ...] | None = None

    def compute(self) -> Callable[..., Any]:
        """What a participant computes, imported on first use."""
        return _load(self.compute_path)

    def refusal(self) -> Callable[..., str | None] | None:
        """Its privacy rule (``refusal_path``), imported on first use; None: it has none."""
        return None if self.refusal_path is None else _load(self.refusal_path)

    def check_centers(self, shape: tuple[int, ...]) -> None:
        """ValueError for centers of a shape it does not take (:attr:`points`)."""
        if self.points is not None and tuple(shape[:-1]) != self.points:
            raise ValueError(f"statistic {self.name!r} takes centers of shape "
                             f"{(*self.points, 'D')}; got {tuple(shape)}")

    def check_params(self, given: Mapping[str, float]) -> None:
        """ValueError for a parameter it does not declare, a required one missing or one
        outside its limits (the message names the parameter, never its value)."""
        if unknown := sorted(set(given) - set(self.params)):
            raise ValueError(f"statistic {self.name!r} takes no parameter {', '.join(unknown)}")
        for name, param in self.params.items():
            if name not in given:
                if param.required:
                    raise ValueError(f"statistic {self.name!r} needs parameter {name!r}")
            elif not param.admits(given[name]):
                raise ValueError(f"parameter {name!r} of statistic {self.name!r} must be "
                                 f"{param.describe()}")


@functools.cache
def _load(path: str) -> Callable[..., Any]:
    """The function or class ``"module:name"`` names, imported once."""
    module, _, attr = path.partition(":")
    function: Callable[..., Any] = getattr(importlib.import_module(module), attr)
    return function


def _params_model(spec: AlgorithmSpec) -> type[BaseModel]:
    """The model ``spec.params_path`` names, checked: an optional block's model has every
    default; a preset sets only the model's fields."""
    from pydantic import BaseModel, ValidationError

    assert spec.params_path is not None
    model = _load(spec.params_path)
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise ValueError(f"algorithm {spec.name!r}: params_path {spec.params_path!r} is not a "
                         "pydantic model")
    if not spec.params_required:
        try:
            model()
        except ValidationError as exc:
            raise ValueError(f"algorithm {spec.name!r}: an optional params block's model needs "
                             "a default for every field (or params_required)") from exc
    for preset, values in spec.presets.items():
        if unknown := sorted(set(values) - set(model.model_fields)):
            raise ValueError(f"algorithm {spec.name!r}: preset {preset!r} sets "
                             f"{', '.join(unknown)}, not fields of {model.__name__}")
    return model


S = TypeVar("S", AlgorithmSpec, StatisticSpec)


class _Registry(Generic[S]):
    """Specs by name, in registration order."""

    def __init__(self, what: str) -> None:
        self._what = what
        self._specs: dict[str, S] = {}

    def add(self, spec: S) -> S:
        if spec.name in self._specs:
            raise ValueError(f"{self._what} {spec.name!r} is already registered")
        self._specs[spec.name] = spec
        return spec

    def remove(self, name: str) -> None:
        self.get(name)
        del self._specs[name]

    def specs(self) -> tuple[S, ...]:
        return tuple(self._specs.values())

    def get(self, name: str, where: Callable[[S], bool] = lambda _: True) -> S:
        spec = self._specs.get(name)
        if spec is None or not where(spec):
            choices = ", ".join(repr(s.name) for s in self.specs() if where(s))
            raise ValueError(f"unknown {self._what} {name!r}; choose one of {choices}")
        return spec


_ALGORITHMS: _Registry[AlgorithmSpec] = _Registry("algorithm")
_STATISTICS: _Registry[StatisticSpec] = _Registry("statistic")


def register(spec: AlgorithmSpec) -> AlgorithmSpec:
    """Add ``spec``; a name already registered is a ValueError."""
    return _ALGORITHMS.add(spec)


def unregister(name: str) -> None:
    """Remove a registered algorithm (a test's own)."""
    _ALGORITHMS.remove(name)


def names(family: Family | None = None) -> tuple[str, ...]:
    """The registered algorithms' names (of one family), in registration order."""
    return tuple(s.name for s in _ALGORITHMS.specs() if family in (None, s.family))


def get(name: str, family: Family | None = None) -> AlgorithmSpec:
    """The spec of ``name``; an unknown name (or one of another family) is a ValueError
    naming the choices."""
    return _ALGORITHMS.get(name, lambda s: family in (None, s.family))


def register_statistic(spec: StatisticSpec) -> StatisticSpec:
    """Add ``spec``; a name already registered is a ValueError."""
    return _STATISTICS.add(spec)


def unregister_statistic(name: str) -> None:
    """Remove a registered statistic (a test's own)."""
    _STATISTICS.remove(name)


def statistic_names() -> tuple[str, ...]:
    """The registered statistics' names, in registration order."""
    return tuple(s.name for s in _STATISTICS.specs())


def statistic(name: str) -> StatisticSpec:
    """The spec of a registered statistic; an unknown name is a ValueError."""
    return _STATISTICS.get(name)


def _register_module(module: Any) -> None:
    """Register the statistics (``STATISTICS``) and algorithms (``SPECS``) a module lists."""
    for stat in getattr(module, "STATISTICS", ()):
        register_statistic(stat)
    for spec in getattr(module, "SPECS", ()):
        register(spec)


def _register_builtins() -> None:
    from fedclust.protocol.algorithms import (
        fed_distill,
        fedcref,
        fedfcm,
        ffcm,
        fkm,
        kfed,
        statistics,
    )

    for module in (statistics, ffcm, fedfcm, fkm, kfed, fed_distill, fedcref):
        _register_module(module)


def _register_plugins() -> None:
    """Register every module an installed package names in the :data:`PLUGIN_GROUP`
    entry-point group, as the built-ins are; one that fails stops the import, naming it."""
    from importlib.metadata import entry_points

    for entry in entry_points(group=PLUGIN_GROUP):
        try:
            module = entry.load()
            if not (hasattr(module, "SPECS") or hasattr(module, "STATISTICS")):
                raise ValueError("it lists no SPECS and no STATISTICS")
            _register_module(module)
        except Exception as exc:
            raise ImportError(
                f"the {PLUGIN_GROUP!r} entry point {entry.name!r} = {entry.value!r} could not "
                f"be registered: {exc}"
            ) from exc


_register_builtins()
_register_plugins()
