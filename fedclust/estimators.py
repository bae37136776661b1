"""scikit-learn style estimators over a simulated federation.

:class:`FederatedFuzzyCMeans` ("ffcm"), :class:`FedFCM` ("fedfcm"), :class:`FederatedKMeans`
("fkm") and :class:`KFed` ("kfed") run one job through the in-process simulator
(:func:`fedclust.simulate.simulate`: the same participant and coordinator functions as the
service) and keep its result document.

``fit`` takes a *federation*, not one data matrix: a list of per-participant arrays or
DataFrames (whose columns must agree), or one DataFrame and ``split_column`` naming the
column that says which participant holds a row. ``predict`` and ``predict_proba`` then label
one participant's own rows with the released centers (:func:`protocol.wire.assignment.assign`,
the computation ``fedclust participant assign`` runs at an organisation).

Because ``fit`` takes a federation, scikit-learn's ``check_estimator`` does not apply as a
whole (its checks call ``fit(X)`` with one matrix); the estimators keep the conventions it
checks that do apply: parameters stored unchanged by ``__init__``, ``get_params`` /
``set_params`` / ``clone`` round trips, fitted attributes ending in ``_``, ``NotFittedError``
before ``fit``, and input validation naming the expected width.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, TypeAlias

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike, NDArray
from sklearn.base import BaseEstimator, ClusterMixin, clone
from sklearn.utils.validation import check_is_fitted

from fedclust.core.validation import FloatArray, check_data, check_float, check_int
from fedclust.data.federations import Federation
from fedclust.protocol.wire.assignment import Assignment, assign, released_centers, sweep_entry
from fedclust.protocol.wire.messages import Algorithm, ProtectionScheme, ResultDocument

__all__ = ["FedFCM", "FederatedFuzzyCMeans", "FederatedKMeans", "KFed", "sweep"]

FederationInput: TypeAlias = Sequence[ArrayLike | pd.DataFrame] | pd.DataFrame
SWEEP_COLUMNS = ("K", "FedFuzzDB", "silhouette", "rounds", "stop_reason", "empty_clusters")
_PROTECTIONS: tuple[ProtectionScheme, ...] = ("masking", "paillier", "none")
_K_MAX = 1000


def _as_parts(
    federation: Any, split_column: str | None, *, owner: str
) -> tuple[list[FloatArray], list[str], list[str] | None]:
    """The participants' float arrays, their names and the shared feature names (or None)."""
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
        frames: list[Any] = [features.iloc[idx] for idx in groups.values()]
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
    if not frames:
        raise ValueError("the federation must hold at least one participant's data.")
    is_frame = [isinstance(f, pd.DataFrame) for f in frames]
    feature_names = None
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
        feature_names = columns[0]
    parts = [check_data(f, name=f"federation[{i}]") for i, f in enumerate(frames)]
    for i, part in enumerate(parts[1:], start=1):
        if part.shape[1] != parts[0].shape[1]:
            raise ValueError(
                f"federation[{i}] has {part.shape[1]} features, but federation[0] has "
                f"{parts[0].shape[1]}."
            )
    return parts, names, feature_names


class _FederatedClusterer(ClusterMixin, BaseEstimator):  # type: ignore[misc]
    """The shared fit / predict of the federated estimators (subclasses set the algorithm
    and declare their parameters in ``__init__``)."""

    _algorithm: ClassVar[Algorithm]

    # parameters every subclass has (declared here for the type checker)
    n_clusters: int
    k_range: tuple[int, int] | None
    m: float
    protection: ProtectionScheme
    standardise: bool
    random_state: int | None
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
        seed = self.random_state
        if seed is not None:
            seed = check_int(seed, name="random_state", owner=owner, low=0, high=2**63 - 1)
        return {
            "m": check_float(self.m, name="m", owner=owner, low=1.0, high=100.0, low_open=True),
            "protection": self.protection,
            "standardise": bool(self.standardise),
            "seed": seed,
            "min_cohort": check_int(self.min_cohort, name="min_cohort", owner=owner, low=1),
        }

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
            ValueError: a parameter is invalid, or the federation is malformed (not finite,
                widths or column names differ).
            PermissionError: fewer participants than ``min_cohort`` (the counting service
                releases ΣN_l only for that many).
        """
        from fedclust.simulate import simulate  # the simulator pulls in the coordinator

        owner = type(self).__name__
        ks = self._ks()
        params = self._simulation_params()
        parts, names, feature_names = _as_parts(federation, split_column, owner=owner)
        report = simulate(
            Federation(owner, tuple(parts), None), algorithm=self._algorithm, ks=ks, **params
        )
        doc = report.to_document()
        if feature_names is not None:
            doc = doc.model_copy(update={"feature_names": feature_names})
        entry = sweep_entry(doc)
        centers, _ = released_centers(entry)
        outcome = report.outcome
        self.result_: ResultDocument = doc
        self.cluster_centers_: FloatArray = centers
        self.n_clusters_: int = int(centers.shape[0])
        self.fed_fuzzy_db_: float | None = (
            float(entry.fed_fuzzy_db) if np.isfinite(entry.fed_fuzzy_db) else None
        )
        self.n_features_in_: int = int(parts[0].shape[1])
        if feature_names is not None:
            self.feature_names_in_: NDArray[np.object_] = np.asarray(feature_names, dtype=object)
        elif hasattr(self, "feature_names_in_"):
            del self.feature_names_in_
        self.participants_: list[str] = names
        self.mean_: FloatArray | None = outcome.mean
        self.scale_: FloatArray | None = outcome.scale
        self.sweep_: pd.DataFrame = sweep_frame(doc)
        self._fitted_m = float(params["m"])  # predict_proba uses the m of the fit
        return self

    def fit_predict(
        self, federation: FederationInput, y: None = None, *, split_column: str | None = None
    ) -> list[NDArray[np.intp]]:
        """Fit, then label every participant's rows: one label vector per participant, in
        the order of ``participants_`` (in a deployment each organisation runs ``predict``
        on its own rows; here the simulator holds them all)."""
        self.fit(federation, split_column=split_column)
        parts, _, _ = _as_parts(federation, split_column, owner=type(self).__name__)
        return [self._assign(part).labels for part in parts]

    # -- labelling one participant's rows ---------------------------------------------------
    def _validated(self, X: ArrayLike | pd.DataFrame) -> FloatArray:
        check_is_fitted(self, "cluster_centers_")
        owner = type(self).__name__
        names = getattr(self, "feature_names_in_", None)
        if isinstance(X, pd.DataFrame) and names is not None:
            got = list(map(str, X.columns))
            if got != list(names):
                raise ValueError(
                    f"X has feature names {got}, but {owner} was fitted with {list(names)}."
                )
        Xa = check_data(X)
        if Xa.shape[1] != self.n_features_in_:
            raise ValueError(
                f"X has {Xa.shape[1]} features, but {owner} is expecting "
                f"{self.n_features_in_} features as input."
            )
        return Xa

    def _assign(self, X: ArrayLike | pd.DataFrame) -> Assignment:
        Xa = self._validated(X)
        return assign(
            Xa, self.cluster_centers_, algorithm=self._algorithm, m=self._fitted_m,
            mean=self.mean_, scale=self.scale_,
        )

    def predict(self, X: ArrayLike | pd.DataFrame) -> NDArray[np.intp]:
        """The index of the nearest center (in ``cluster_centers_``) for each row of X: one
        participant's own rows, in the units ``fit`` saw (standardised internally if the
        job standardised).

        Raises:
            NotFittedError: before ``fit``.
            ValueError: X is not a finite 2-D array of ``n_features_in_`` columns, or its
                DataFrame columns differ from ``feature_names_in_``.
        """
        return self._assign(X).labels

    def predict_proba(self, X: ArrayLike | pd.DataFrame) -> FloatArray:
        """Memberships (n_samples, n_clusters_) of each row of X; rows sum to 1.

        The fuzzy estimators give FCM memberships with the fitted ``m`` (Bezdek eq. 11.3a);
        the k-means estimators give the one-hot encoding of ``predict`` (a crisp partition).
        Same validation as :meth:`predict`.
        """
        return self._assign(X).memberships


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
        protection: ProtectionScheme = "masking",
        standardise: bool = False,
        random_state: int | None = None,
        min_cohort: int = 3,
        min_center_contributors: int = 1,
    ) -> None:
        self.n_clusters = n_clusters
        self.k_range = k_range
        self.m = m
        self.tol = tol
        self.max_iter = max_iter
        self.protection = protection
        self.standardise = standardise
        self.random_state = random_state
        self.min_cohort = min_cohort
        self.min_center_contributors = min_center_contributors

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
        gamma: fraction of the participants asked each round, in (0, 1] (1: all, and the
            result equals central FCM's).
        protection: "masking" (the service's default), "paillier" or "none".
        standardise: z-score the features with federated moments first.
        random_state: seed of the algorithmic random choices (never of masks).
        min_cohort: the counting service's minimum number of participants.
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
        gamma: float = 1.0,
        protection: ProtectionScheme = "masking",
        standardise: bool = False,
        random_state: int | None = None,
        min_cohort: int = 3,
        min_center_contributors: int = 1,
    ) -> None:
        self.n_clusters = n_clusters
        self.k_range = k_range
        self.m = m
        self.tol = tol
        self.max_iter = max_iter
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
    k-means over the participants' protected cluster sums.

    ``predict_proba`` gives one-hot memberships (the partition is crisp); ``m`` serves only
    the FedFuzzDB score of the result. Other parameters as :class:`FederatedFuzzyCMeans`
    without ``gamma``.
    """

    _algorithm: ClassVar[Algorithm] = "fkm"


class KFed(_FederatedClusterer):
    """k-FED (Dennis, Li & Smith 2021; "kfed"): one shot of local k-means centers, clustered
    at the coordinator.

    Every participant sends its local centers in the clear by design, so ``protection``
    defaults to (and the job accepts only) "none". ``predict_proba`` gives one-hot
    memberships; ``m`` serves only the FedFuzzDB score.
    """

    _algorithm: ClassVar[Algorithm] = "kfed"

    def __init__(
        self,
        n_clusters: int = 3,
        *,
        k_range: tuple[int, int] | None = None,
        m: float = 2.0,
        protection: ProtectionScheme = "none",
        standardise: bool = False,
        random_state: int | None = None,
        min_cohort: int = 3,
    ) -> None:
        self.n_clusters = n_clusters
        self.k_range = k_range
        self.m = m
        self.protection = protection
        self.standardise = standardise
        self.random_state = random_state
        self.min_cohort = min_cohort

    def _simulation_params(self) -> dict[str, Any]:
        params = super()._simulation_params()
        if params["protection"] != "none":
            raise ValueError(
                f"The 'protection' parameter of KFed must be 'none' (k-FED sends each "
                f"participant's local centers by design). Got {self.protection!r} instead."
            )
        return params
