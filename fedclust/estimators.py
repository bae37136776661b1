"""scikit-learn style estimators over a simulated federation.

:class:`FederatedFuzzyCMeans` ("ffcm"), :class:`FedFCM` ("fedfcm"), :class:`FederatedKMeans`
("fkm") and :class:`KFed` ("kfed") run one job through the in-process simulator
(:func:`fedclust.simulate.simulate`: the same participant and coordinator functions as the
service) and keep its result document.

``fit`` takes a *federation*, not one data matrix: a list of per-participant arrays or
DataFrames (whose columns must agree), or one DataFrame and ``split_column`` naming the
column that says which participant holds a row. ``predict``, ``predict_proba``,
``transform`` and ``score`` then work on one participant's own rows with the released
centers (:func:`protocol.wire.assignment.assign_trusted`, the computation ``fedclust
participant assign`` runs at an organisation).

The fitted attributes follow scikit-learn's ``KMeans``: ``cluster_centers_``, ``labels_``
(one label per input row, in the input's row order), ``n_iter_``, ``n_features_in_``,
``feature_names_in_`` and the minimised objective, ``inertia_`` for the k-means estimators
(Σ_x min_k ||x − c_k||²) or ``objective_`` for the fuzzy ones (FCM's J_m = Σ_x Σ_k u_xk^m
||x − c_k||², Bezdek 1981 eq. 11.1, u the memberships of eq. 11.3a); ``score(X)`` is minus
that objective on X. Distances, labels and objectives are those of the units the job
clustered in: z-scores of the federation's moments with ``standardise=True``.

Because ``fit`` takes a federation, scikit-learn's ``check_estimator`` does not apply as a
whole (its checks call ``fit(X)`` with one matrix); the tests run its checks through a
subclass whose ``fit(X)`` splits X among three participants.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, TypeAlias

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike, NDArray
from sklearn.base import (
    BaseEstimator,
    ClassNamePrefixFeaturesOutMixin,
    ClusterMixin,
    TransformerMixin,
    clone,
)
from sklearn.utils.validation import (
    _get_feature_names,
    check_array,
    check_is_fitted,
    check_random_state,
    validate_data,
)

from fedclust.core.validation import FloatArray, check_data, check_float, check_int
from fedclust.data.federations import Federation
from fedclust.protocol import algorithms
from fedclust.protocol.maths._fuzzy import objective, squared_distances
from fedclust.protocol.wire.assignment import (
    Assignment,
    assign_trusted,
    released_centers,
    sweep_entry,
)
from fedclust.protocol.wire.messages import Algorithm, ProtectionScheme, ResultDocument

__all__ = ["FedFCM", "FederatedFuzzyCMeans", "FederatedKMeans", "KFed", "sweep"]

FederationInput: TypeAlias = Sequence[ArrayLike | pd.DataFrame] | pd.DataFrame
#: What ``random_state`` takes, as scikit-learn's ``check_random_state`` (and a Generator).
RandomState: TypeAlias = int | np.random.RandomState | np.random.Generator | None
SWEEP_COLUMNS = ("K", "FedFuzzDB", "silhouette", "rounds", "stop_reason", "empty_clusters")
_PROTECTIONS: tuple[ProtectionScheme, ...] = ("masking", "paillier", "none")
_K_MAX = 1000
#: Seeds drawn from a RandomState or Generator: below 2^31 - 1, as scikit-learn draws them.
_SEED_BOUND = np.iinfo(np.int32).max


@dataclass(frozen=True)
class _Split:
    """A federation as the simulator takes it: each participant's float rows, its name, and
    where its rows sit in the input (``rows[i]``: their positions, in the input's order)."""

    parts: list[FloatArray]
    names: list[str]
    rows: list[NDArray[np.intp]]
    first: Any  # participant 0's input (array or DataFrame): the feature names come from it
    feature_names: list[str] | None

    @property
    def n_rows(self) -> int:
        return sum(len(r) for r in self.rows)

    def in_input_order(self, per_part: Sequence[NDArray[Any]]) -> NDArray[Any]:
        """One value (or row of values) per input row, from each participant's of its rows."""
        out = np.empty((self.n_rows, *per_part[0].shape[1:]), dtype=per_part[0].dtype)
        for rows, values in zip(self.rows, per_part, strict=True):
            out[rows] = values
        return out


def _as_parts(federation: Any, split_column: str | None, *, owner: str) -> _Split:
    """The participants' float arrays, names, row positions and shared feature names."""
    if split_column is not None:
        if not isinstance(federation, pd.DataFrame):
            raise ValueError(
                f"split_column needs one DataFrame as the federation; got "
                f"{type(federation).__name__}."
            )
        if split_column not in federation.columns:
            raise ValueError(f"split_column {split_column!r} is not a column of the DataFrame.")
        if federation[split_column].isna().any():
            raise ValueError(f"split_column {split_column!r} has missing values.")
        features = federation.drop(columns=[split_column])
        groups = federation.groupby(split_column, sort=True).indices
        names = [str(v) for v in groups]
        rows = [np.asarray(idx, dtype=np.intp) for idx in groups.values()]
        frames: list[Any] = [features.iloc[idx] for idx in rows]
    elif isinstance(federation, (pd.DataFrame, np.ndarray)) or not isinstance(
        federation, Sequence
    ):
        raise ValueError(
            f"{owner}.fit takes a federation: a list of arrays or DataFrames (one per "
            f"participant), or one DataFrame with split_column; got {type(federation).__name__}."
        )
    else:
        frames = list(federation)
        names = [f"participant-{i}" for i in range(len(frames))]
        rows = []
    if not frames:
        raise ValueError("the federation must hold at least one participant's data.")
    is_frame = [isinstance(f, pd.DataFrame) for f in frames]
    if any(is_frame):
        if not all(is_frame):
            raise ValueError("the federation mixes DataFrames and arrays; give one kind.")
        columns = [list(map(str, f.columns)) for f in frames]
        for i, cols in enumerate(columns[1:], start=1):
            if cols != columns[0]:
                raise ValueError(
                    f"the DataFrames' columns must agree: federation[{i}] has columns "
                    f"{cols}, federation[0] has {columns[0]}."
                )
    parts: list[FloatArray] = [
        check_array(f, dtype=np.float64, input_name=f"federation[{i}]", estimator=owner)
        for i, f in enumerate(frames)
    ]
    for i, part in enumerate(parts[1:], start=1):
        if part.shape[1] != parts[0].shape[1]:
            raise ValueError(
                f"federation[{i}] has {part.shape[1]} features, but federation[0] has "
                f"{parts[0].shape[1]}."
            )
    if not rows:  # a list: the participants' rows one after another
        ends = np.cumsum([len(p) for p in parts])
        rows = [
            np.arange(end - len(p), end, dtype=np.intp)
            for p, end in zip(parts, ends, strict=True)
        ]
    names_found = _get_feature_names(frames[0])  # scikit-learn's rule: all-string columns
    feature_names = None if names_found is None else [str(n) for n in names_found]
    return _Split(parts, names, rows, frames[0], feature_names)


class _FederatedClusterer(
    ClassNamePrefixFeaturesOutMixin, TransformerMixin, ClusterMixin, BaseEstimator  # type: ignore[misc]
):
    """The shared fit / predict of the federated estimators (subclasses set the algorithm
    and declare their parameters in ``__init__``).

    Attributes (after ``fit``):
        cluster_centers_: (n_clusters_, n_features_in_) released centers, in the data's
            units (a center withheld by ``min_center_contributors`` is left out).
        labels_: (n_rows,) the index of each input row's nearest center, in the input's row
            order (with ``split_column``: the DataFrame's rows as given).
        n_iter_: the rounds the selected K's run took.
        inertia_ (k-means estimators): Σ over every row of its squared distance to the
            nearest center.
        objective_ (fuzzy estimators): FCM's J_m of every row with the fitted m.
        n_clusters_: the number of released centers (the selected K with ``k_range``).
        n_features_in_, feature_names_in_: as scikit-learn sets them (the names only when
            the federation is made of DataFrames with string column names).
        participants_: the participants' names, in the order the job saw them.
        mean_, scale_: the federation's mean and scale with ``standardise=True``, else None.
        fed_fuzzy_db_: the selected K's FedFuzzDB (None where not finite).
        result_: the job's result document; sweep_: one row per K (:func:`sweep_frame`).
    """

    _algorithm: ClassVar[Algorithm]

    # parameters every subclass has (declared here for the type checker)
    n_clusters: int
    k_range: tuple[int, int] | None
    m: float
    protection: ProtectionScheme
    standardise: bool
    random_state: RandomState
    min_cohort: int

    # -- parameters -------------------------------------------------------------------------
    def _ks(self) -> list[int]:
        owner = type(self).__name__
        if self.k_range is None:
            k = check_int(self.n_clusters, name="n_clusters", owner=owner, low=2, high=_K_MAX)
            return [k]
        rng = self.k_range
        if (
            not isinstance(rng, (tuple, list))
            or len(rng) != 2
            or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in rng)
            or not 2 <= rng[0] <= rng[1] <= _K_MAX
        ):
            raise ValueError(
                f"The 'k_range' parameter of {owner} must be None or a pair (a, b) of ints "
                f"with 2 <= a <= b <= {_K_MAX}. Got {rng!r} instead."
            )
        return list(range(int(rng[0]), int(rng[1]) + 1))

    def _seed(self) -> int | None:
        """The job's seed: an int as given; one drawn from a RandomState or Generator (so a
        fresh RandomState(0) replays, and a shared one advances as in scikit-learn); None
        lets the simulator draw one and record it in ``result_.seed``."""
        owner = type(self).__name__
        rs = self.random_state
        if rs is None:
            return None
        if isinstance(rs, np.random.Generator):
            return int(rs.integers(_SEED_BOUND))
        if isinstance(rs, (int, np.integer)) and not isinstance(rs, bool):
            return check_int(rs, name="random_state", owner=owner, low=0, high=2**63 - 1)
        try:
            state = check_random_state(rs)
        except ValueError:
            raise ValueError(
                f"The 'random_state' parameter of {owner} must be None, an int, a "
                f"numpy.random.RandomState or a numpy.random.Generator. Got {rs!r} instead."
            ) from None
        return int(state.randint(_SEED_BOUND))

    def _job_algorithm(self) -> Algorithm:
        """The registered algorithm the job runs (:mod:`fedclust.protocol.algorithms`)."""
        return self._algorithm

    def _simulation_params(self) -> dict[str, Any]:
        """The keyword arguments of :func:`fedclust.simulate.simulate` this estimator sets."""
        owner = type(self).__name__
        if self.protection not in _PROTECTIONS:
            raise ValueError(
                f"The 'protection' parameter of {owner} must be a str among "
                f"{{{', '.join(repr(p) for p in _PROTECTIONS)}}}. Got {self.protection!r} instead."
            )
        if not isinstance(self.standardise, (bool, np.bool_)):
            raise ValueError(
                f"The 'standardise' parameter of {owner} must be an instance of 'bool'. "
                f"Got {self.standardise!r} instead."
            )
        return {
            "m": check_float(self.m, name="m", owner=owner, low=1.0, high=100.0, low_open=True),
            "protection": self.protection,
            "standardise": bool(self.standardise),
            "seed": self._seed(),
            "min_cohort": check_int(self.min_cohort, name="min_cohort", owner=owner, low=1),
        }

    def _given_init(self, ks: list[int], n_features: int) -> FloatArray | None:
        """The initial centers the job starts from; None: the algorithm's own seeding (the
        estimators with an ``init`` parameter override this)."""
        return None

    def _check_cohort(self, n: int, params: dict[str, Any]) -> None:
        """Refuse, before running, a federation too small for the job's privacy rules: a
        protected sum needs at least three participants (with two, each learns the other's
        statistics from the total), and the counting service releases ΣN_l only to at least
        ``min_cohort`` of them."""
        from fedclust.coordinator._rounds import MIN_PROTECTED_MEMBERS

        owner = type(self).__name__
        protection = params["protection"]
        if protection != "none" and n < MIN_PROTECTED_MEMBERS:
            raise ValueError(
                f"{owner} with protection={protection!r} needs at least "
                f"{MIN_PROTECTED_MEMBERS} participants: a protected sum over {n} would show "
                f"each participant the others' statistics. Give at least "
                f"{MIN_PROTECTED_MEMBERS} participants, or accept that every participant's "
                f"statistics reach the coordinator in the clear with protection='none' and "
                f"min_cohort={n}."
            )
        if n < params["min_cohort"]:
            raise ValueError(
                f"{owner} has {n} participant(s), fewer than min_cohort={params['min_cohort']}, "
                f"the fewest the counting service releases the total row count for. Give more "
                f"participants, or set min_cohort={n} to allow it."
            )

    # -- fitting ----------------------------------------------------------------------------
    def fit(
        self, federation: FederationInput, y: None = None, *, split_column: str | None = None
    ) -> _FederatedClusterer:
        """Run the federated job over ``federation`` in process and keep its centers.

        Args:
            federation: a list of per-participant arrays or DataFrames (columns must agree;
                their names become ``feature_names_in_``), or one DataFrame with
                ``split_column``.
            y: ignored (scikit-learn's signature).
            split_column: the column of a single DataFrame naming each row's participant;
                participants are its distinct values in sorted order, the other columns the
                features.

        With ``k_range`` every K of the range is run and the K with the lowest FedFuzzDB
        (the result document's ``k_selected``) gives ``cluster_centers_``; ``sweep_`` holds
        every K's scores.

        Raises:
            ValueError: a parameter is invalid; the federation is malformed (not finite,
                widths or column names differ); or it has fewer participants than the
                protection or ``min_cohort`` needs (the message says how to allow it).
        """
        from fedclust.simulate import simulate  # the simulator pulls in the coordinator

        owner = type(self).__name__
        ks = self._ks()
        params = self._simulation_params()
        split = _as_parts(federation, split_column, owner=owner)
        self._check_cohort(len(split.parts), params)
        n_features = int(split.parts[0].shape[1])
        init = self._given_init(ks, n_features)
        names = None if split.feature_names is None else tuple(split.feature_names)
        report = simulate(
            Federation(owner, tuple(split.parts), None, names), algorithm=self._job_algorithm(),
            ks=ks, init=init, **params,
        )
        doc = report.to_document()
        entry = sweep_entry(doc)
        centers, _ = released_centers(entry)
        outcome = report.outcome
        validate_data(self, split.first, reset=True, dtype=np.float64)
        self.result_: ResultDocument = doc
        self.cluster_centers_: FloatArray = centers
        self.n_clusters_: int = int(centers.shape[0])
        self.n_iter_: int = int(entry.rounds)
        self.fed_fuzzy_db_: float | None = (
            float(entry.fed_fuzzy_db) if np.isfinite(entry.fed_fuzzy_db) else None
        )
        self.participants_: list[str] = split.names
        self.mean_: FloatArray | None = outcome.mean
        self.scale_: FloatArray | None = outcome.scale
        self.sweep_: pd.DataFrame = sweep_frame(doc)
        self._fitted_m = float(params["m"])  # predict_proba and objective_ use the m of fit
        units = [self._in_units(part) for part in split.parts]
        self.labels_: NDArray[np.intp] = split.in_input_order(
            [self._assign_units(X).labels for X in units]
        )
        total = float(sum(self._objective_units(X) for X in units))
        if self._fuzzy:
            self.objective_: float = total
        else:
            self.inertia_: float = total
        return self

    def fit_predict(
        self, federation: FederationInput, y: None = None, *, split_column: str | None = None
    ) -> NDArray[np.intp]:
        """Fit, then return ``labels_``: one label per input row, in the input's row order
        (in a deployment each organisation labels its own rows with ``predict``; here the
        simulator holds them all)."""
        labels: NDArray[np.intp] = self.fit(federation, split_column=split_column).labels_
        return labels

    def fit_transform(
        self, federation: FederationInput, y: None = None, *, split_column: str | None = None
    ) -> FloatArray:
        """Fit, then return :meth:`transform` of every input row, in the input's row order."""
        self.fit(federation, split_column=split_column)
        split = _as_parts(federation, split_column, owner=type(self).__name__)
        C = self._in_units(self.cluster_centers_)
        distances: FloatArray = split.in_input_order(
            [np.sqrt(squared_distances(self._in_units(part), C)) for part in split.parts]
        )
        return distances

    @property
    def _n_features_out(self) -> int:
        """The columns of :meth:`transform` (``get_feature_names_out`` names them)."""
        return self.n_clusters_

    # -- one participant's rows -------------------------------------------------------------
    @property
    def _fuzzy(self) -> bool:
        return algorithms.get(self._job_algorithm()).fuzzy

    def _in_units(self, Xa: FloatArray) -> FloatArray:
        """Rows (or centers) in the units the job clustered in: z-scores if it standardised."""
        if self.mean_ is None or self.scale_ is None:
            return Xa
        out: FloatArray = (Xa - self.mean_) / self.scale_
        return out

    def _validated(self, X: ArrayLike | pd.DataFrame) -> FloatArray:
        """X checked as scikit-learn checks it after fit (finite, 2-D, ``n_features_in_``
        columns, feature names: a warning for an array after a DataFrame fit), in the
        clustering's units."""
        check_is_fitted(self, "cluster_centers_")
        Xa: FloatArray = validate_data(self, X, reset=False, dtype=np.float64)
        return self._in_units(Xa)

    def _assign_units(self, X: FloatArray) -> Assignment:
        C = self._in_units(self.cluster_centers_)
        return assign_trusted(X, C, fuzzy=self._fuzzy, m=self._fitted_m)

    def _objective_units(self, X: FloatArray) -> float:
        """J_m of X (fuzzy) or its inertia (k-means), in the clustering's units."""
        C = self._in_units(self.cluster_centers_)
        if self._fuzzy:
            return objective(X, C, self._fitted_m)
        return float(squared_distances(X, C).min(axis=1).sum())

    def predict(self, X: ArrayLike | pd.DataFrame) -> NDArray[np.intp]:
        """The index of the nearest center (in ``cluster_centers_``) for each row of X: one
        participant's own rows, in the units ``fit`` saw (standardised internally if the
        job standardised).

        Raises:
            NotFittedError: before ``fit``.
            ValueError: X is not a finite 2-D array of ``n_features_in_`` columns, or its
                DataFrame columns differ from ``feature_names_in_``.
        """
        return self._assign_units(self._validated(X)).labels

    def predict_proba(self, X: ArrayLike | pd.DataFrame) -> FloatArray:
        """Memberships (n_samples, n_clusters_) of each row of X; rows sum to 1.

        The fuzzy estimators give FCM memberships with the fitted ``m`` (Bezdek eq. 11.3a);
        the k-means estimators give the one-hot encoding of ``predict`` (a crisp partition).
        Same validation as :meth:`predict`.
        """
        return self._assign_units(self._validated(X)).memberships

    def transform(self, X: ArrayLike | pd.DataFrame) -> FloatArray:
        """Distances (n_samples, n_clusters_) from each row of X to every center, as
        ``KMeans.transform`` (in z-scores when the job standardised); ``predict`` is their
        argmin. Same validation as :meth:`predict`."""
        C = self._in_units(self.cluster_centers_)
        distances: FloatArray = np.sqrt(squared_distances(self._validated(X), C))
        return distances

    def score(self, X: ArrayLike | pd.DataFrame, y: None = None) -> float:
        """Minus the estimator's objective on X, as ``KMeans.score``: −inertia (k-means
        estimators) or −J_m with the fitted m (fuzzy ones); higher is better, and on all
        the federation's rows it equals −``inertia_`` / −``objective_``. Same validation as
        :meth:`predict`."""
        return -self._objective_units(self._validated(X))


def sweep_frame(doc: ResultDocument) -> pd.DataFrame:
    """One row per K of the document's sweep: K, FedFuzzDB, silhouette, rounds, stop_reason,
    empty_clusters."""
    return pd.DataFrame(
        [
            (e.k, e.fed_fuzzy_db, e.simplified_silhouette, e.rounds, e.stop_reason,
             e.empty_clusters)
            for e in doc.sweep
        ],
        columns=list(SWEEP_COLUMNS),
    )


def sweep(
    estimator: _FederatedClusterer,
    federation: FederationInput,
    k_range: tuple[int, int] = (2, 8),
    *,
    split_column: str | None = None,
) -> pd.DataFrame:
    """Run ``estimator``'s algorithm for every K of ``k_range`` over ``federation`` and
    return the scores per K (:func:`sweep_frame`); the estimator itself is not changed."""
    fitted = clone(estimator).set_params(k_range=tuple(k_range))
    fitted.fit(federation, split_column=split_column)
    frame: pd.DataFrame = fitted.sweep_
    return frame


class _CenterRoundsClusterer(_FederatedClusterer):
    """The parameters every round-based algorithm shares (FedFCM and federated k-means take
    exactly these; :class:`FederatedFuzzyCMeans` adds ``gamma``)."""

    def __init__(
        self,
        n_clusters: int = 3,
        *,
        k_range: tuple[int, int] | None = None,
        m: float = 2.0,
        tol: float = 1e-3,
        max_iter: int = 100,
        init: str | ArrayLike = "auto",
        protection: ProtectionScheme = "masking",
        standardise: bool = False,
        random_state: RandomState = None,
        min_cohort: int = 3,
        min_center_contributors: int = 1,
    ) -> None:
        self.n_clusters = n_clusters
        self.k_range = k_range
        self.m = m
        self.tol = tol
        self.max_iter = max_iter
        self.init = init
        self.protection = protection
        self.standardise = standardise
        self.random_state = random_state
        self.min_cohort = min_cohort
        self.min_center_contributors = min_center_contributors

    init: str | ArrayLike

    def _given_init(self, ks: list[int], n_features: int) -> FloatArray | None:
        """``init``: "auto" (None: the algorithm's seeding) or (n_clusters, n_features)
        centers in the data's units, for a single K."""
        owner = type(self).__name__
        init = self.init
        if isinstance(init, str):
            if init != "auto":
                raise ValueError(
                    f"The 'init' parameter of {owner} must be 'auto' or an array-like of "
                    f"shape (n_clusters, n_features). Got {init!r} instead."
                )
            return None
        if len(ks) != 1:
            raise ValueError(
                f"The 'init' array of {owner} gives the initial centers of one K; it does not "
                f"apply with k_range={self.k_range!r} (set k_range=None)."
            )
        centers = check_data(init, name="init")
        if centers.shape != (ks[0], n_features):
            raise ValueError(
                f"The 'init' array of {owner} must have shape (n_clusters, n_features) = "
                f"({ks[0]}, {n_features}). Got shape {centers.shape} instead."
            )
        return centers

    def _simulation_params(self) -> dict[str, Any]:
        owner = type(self).__name__
        return super()._simulation_params() | {
            "eps": check_float(self.tol, name="tol", owner=owner, low=0.0),
            "max_rounds": check_int(self.max_iter, name="max_iter", owner=owner, low=1,
                                    high=10_000),
            "min_center_contributors": check_int(
                self.min_center_contributors, name="min_center_contributors", owner=owner,
                low=1, high=1000,
            ),
        }


class FederatedFuzzyCMeans(_CenterRoundsClusterer):
    """Federated fuzzy c-means with exact sums (Corcuera Bárcena et al. 2022; "ffcm").

    Each round every participant sends Σu^m and Σu^m·x against the current centers (protected
    by ``protection``); the result equals central FCM's.

    Parameters:
        n_clusters: K (ignored when ``k_range`` is given).
        k_range: (a, b): run every K in [a, b] and keep the lowest FedFuzzDB's.
        m: fuzzifier (> 1).
        tol: stop when the centers move less than this (the job's ``eps``).
        max_iter: the most rounds (the job's ``max_rounds``).
        init: "auto" (the algorithm's seeding: uniform in the box of the federation's mean ±
            √3·std) or an array (n_clusters, n_features) of initial centers in the data's
            units, as ``KMeans(init=array)``; an array needs ``k_range=None``.
        gamma: fraction of the participants asked each round, in (0, 1] (1: all, and the
            result equals central FCM's).
        protection: "masking" (the service's default), "paillier" or "none".
        standardise: z-score the features with federated moments first.
        random_state: None, an int, a RandomState or a Generator, as scikit-learn takes it:
            seeds the algorithmic random choices (never masks); None draws a seed and
            records it in ``result_.seed``.
        min_cohort: the counting service's minimum number of participants (a protected
            job needs at least 3 whatever it is).
        min_center_contributors: withhold a center fewer participants stand behind.
    """

    _algorithm: ClassVar[Algorithm] = "ffcm"

    def __init__(
        self,
        n_clusters: int = 3,
        *,
        k_range: tuple[int, int] | None = None,
        m: float = 2.0,
        tol: float = 1e-3,
        max_iter: int = 100,
        init: str | ArrayLike = "auto",
        gamma: float = 1.0,
        protection: ProtectionScheme = "masking",
        standardise: bool = False,
        random_state: RandomState = None,
        min_cohort: int = 3,
        min_center_contributors: int = 1,
    ) -> None:
        self.n_clusters = n_clusters
        self.k_range = k_range
        self.m = m
        self.tol = tol
        self.max_iter = max_iter
        self.init = init
        self.gamma = gamma
        self.protection = protection
        self.standardise = standardise
        self.random_state = random_state
        self.min_cohort = min_cohort
        self.min_center_contributors = min_center_contributors

    def _simulation_params(self) -> dict[str, Any]:
        return super()._simulation_params() | {
            "gamma": check_float(self.gamma, name="gamma", owner=type(self).__name__, low=0.0,
                                 high=1.0, low_open=True),
        }


class FedFCM(_CenterRoundsClusterer):
    """FedFCM (Stallmann & Wilbik 2022; "fedfcm"): local FCM at every participant, its
    centers held locally, combined by a federated k-means over their protected sums.

    Parameters: as :class:`FederatedFuzzyCMeans` without ``gamma``.
    """

    _algorithm: ClassVar[Algorithm] = "fedfcm"


class FederatedKMeans(_CenterRoundsClusterer):
    """Federated k-means (Garst & Reinders; "fkm"): local Lloyd steps, centers combined by a
    k-means over the participants' protected cluster sums. With an ``init`` array every
    round, the first included, starts from the global centers (no local k-means++ seeding).

    ``predict_proba`` gives one-hot memberships (the partition is crisp); ``m`` serves only
    the FedFuzzDB score of the result. Other parameters as :class:`FederatedFuzzyCMeans`
    without ``gamma``.
    """

    _algorithm: ClassVar[Algorithm] = "fkm"


class KFed(_FederatedClusterer):
    """One-shot federated k-means after k-FED (Dennis, Li & Smith 2021, Algs. 1-2): every
    participant's local k-means centers, clustered once at the coordinator.

    ``variant`` picks the registered algorithm: "ours" (default; "kfed") is our stronger
    variant (no SVD projection, greedy k-means++, Lloyd to convergence on the server);
    "dennis" ("kfed-dennis") is k-FED as the paper writes it (SVD projection, k-means++,
    one Lloyd step on the server). :mod:`fedclust.protocol.maths.kfed` states both.

    Every participant sends its local centers in the clear by design, so ``protection``
    defaults to (and the job accepts only) "none". ``predict_proba`` gives one-hot
    memberships; ``m`` serves only the FedFuzzDB score.
    """

    _algorithm: ClassVar[Algorithm] = "kfed"
    _VARIANTS: ClassVar[dict[str, Algorithm]] = {"ours": "kfed", "dennis": "kfed-dennis"}

    def __init__(
        self,
        n_clusters: int = 3,
        *,
        variant: Literal["ours", "dennis"] = "ours",
        k_range: tuple[int, int] | None = None,
        m: float = 2.0,
        protection: ProtectionScheme = "none",
        standardise: bool = False,
        random_state: RandomState = None,
        min_cohort: int = 3,
    ) -> None:
        self.n_clusters = n_clusters
        self.variant = variant
        self.k_range = k_range
        self.m = m
        self.protection = protection
        self.standardise = standardise
        self.random_state = random_state
        self.min_cohort = min_cohort

    def _job_algorithm(self) -> Algorithm:
        if not isinstance(self.variant, str) or self.variant not in self._VARIANTS:
            raise ValueError(
                f"The 'variant' parameter of KFed must be a str among "
                f"{{{', '.join(repr(v) for v in self._VARIANTS)}}}. Got {self.variant!r} "
                f"instead."
            )
        return self._VARIANTS[self.variant]

    def _simulation_params(self) -> dict[str, Any]:
        params = super()._simulation_params()
        if params["protection"] != "none":
            raise ValueError(
                f"The 'protection' parameter of KFed must be 'none' (k-FED sends each "
                f"participant's local centers by design). Got {self.protection!r} instead."
            )
        return params
