"""The scikit-learn style estimators: parameters, fit == the simulator, scikit-learn's fitted
attributes and checks, input validation, initial centers."""

from __future__ import annotations

import subprocess
import sys
import warnings
from typing import Any

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.utils import _safe_indexing
from sklearn.utils.estimator_checks import parametrize_with_checks

from fedclust.data.federations import Federation
from fedclust.estimators import (
    SWEEP_COLUMNS,
    FederatedFuzzyCMeans,
    FederatedKMeans,
    FedFCM,
    KFed,
    sweep,
)
from fedclust.participant.local import LocalParticipant
from fedclust.protocol.maths.fcm import fcm_memberships
from fedclust.simulate import simulate

ESTIMATORS: dict[str, tuple[type[Any], dict[str, Any]]] = {
    "ffcm": (FederatedFuzzyCMeans, {"protection": "none"}),
    "fedfcm": (FedFCM, {"protection": "none"}),
    "fkm": (FederatedKMeans, {"protection": "none"}),
    "kfed": (KFed, {}),
    "kfed-dennis": (KFed, {"variant": "dennis"}),
}
CLASSES = [FederatedFuzzyCMeans, FedFCM, FederatedKMeans, KFed]


def _parts(seed: int = 0, n: int = 20) -> list[np.ndarray]:
    """Three participants, each with rows of two blobs around (0, 0) and (5, 5)."""
    rng = np.random.default_rng(seed)
    return [
        np.vstack([rng.normal(size=(n, 2)), rng.normal(size=(n, 2)) + 5.0]) for _ in range(3)
    ]


def _simulated_centers(parts: list[np.ndarray], algorithm: str, **kw: object) -> np.ndarray:
    report = simulate(
        Federation("estimator-test", tuple(parts), None), algorithm=algorithm,
        ks=[2], **kw,  # type: ignore[arg-type]
    )
    (entry,) = report.to_document().sweep
    return np.array(entry.centers, dtype=np.float64)


# -- parameters ------------------------------------------------------------------------------
@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_get_params_set_params_clone_round_trip(cls: type) -> None:
    k_range = [2, 4]  # stored as given, not converted
    est = cls(3, k_range=k_range, m=1.5, random_state=7)
    params = est.get_params()
    assert params["k_range"] is k_range and params["m"] == 1.5 and params["random_state"] == 7
    copy = clone(est)
    assert copy is not est and copy.get_params() == params
    copy.set_params(n_clusters=5, m=3.0)
    assert copy.get_params()["n_clusters"] == 5 and copy.get_params()["m"] == 3.0
    assert est.get_params() == params  # the original is untouched
    assert repr(cls(n_clusters=4)) == f"{cls.__name__}(n_clusters=4)"


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_default_protection_is_the_services(cls: type) -> None:
    """JobCreate's default ("masking"), except k-FED, which runs only in the clear."""
    assert cls().protection == ("none" if cls is KFed else "masking")


def _split(X: Any) -> list[Any]:
    """X's rows split into three participants in order (``labels_`` stay in X's order)."""
    n = X.shape[0] if hasattr(X, "shape") else len(X)
    return [_safe_indexing(X, rows) for rows in np.array_split(np.arange(n), 3)]


class _OneMatrix:
    """An estimator whose ``fit(X)`` takes one matrix, as scikit-learn's checks call it."""

    def fit(self, X: Any, y: None = None, *, split_column: str | None = None) -> Any:
        return super().fit(_split(X))  # type: ignore[misc]

    def fit_predict(self, X: Any, y: None = None, *, split_column: str | None = None) -> Any:
        return self.fit(X).labels_

    def fit_transform(self, X: Any, y: None = None, *, split_column: str | None = None) -> Any:
        return self.fit(X).transform(X)


class FFCMOneMatrix(_OneMatrix, FederatedFuzzyCMeans):
    pass


class FedFCMOneMatrix(_OneMatrix, FedFCM):
    pass


class FKMOneMatrix(_OneMatrix, FederatedKMeans):
    pass


class KFedOneMatrix(_OneMatrix, KFed):
    pass


#: The checks that cannot pass for a federated estimator, and why.
_NOT_FEDERATED = {
    "check_dont_overwrite_parameters": "sets n_clusters=1; FedFuzzDB needs K >= 2",
    "check_methods_subset_invariance": "sets n_clusters=1; FedFuzzDB needs K >= 2",
    "check_fit2d_1sample": "sets n_clusters=1; FedFuzzDB needs K >= 2",
    "check_fit2d_1feature": "sets n_clusters=1; FedFuzzDB needs K >= 2",
    "check_fit2d_predict1d": "sets n_clusters=1; FedFuzzDB needs K >= 2",
    "check_estimators_nan_inf": "3 to 4 rows per participant: below the federation's size "
    "rules for K=3 (the exact-FCM rule, local clusterings)",
    "check_estimator_sparse_array": "fit takes a list of participants' dense rows",
    "check_estimator_sparse_matrix": "fit takes a list of participants' dense rows",
    "check_transformer_data_not_an_array": "fit takes a list of participants' rows",
}


@parametrize_with_checks(  # type: ignore[untyped-decorator]
    [cls(protection="none") for cls in (FFCMOneMatrix, FedFCMOneMatrix, FKMOneMatrix,
                                        KFedOneMatrix)]
    + [KFedOneMatrix(protection="none", variant="dennis")],
    expected_failed_checks=lambda est: {  # FedFCM's local FCM has no size rule
        name: why for name, why in _NOT_FEDERATED.items()
        if not (isinstance(est, FedFCM) and name == "check_estimators_nan_inf")
    },
)
def test_scikit_learn_checks(estimator: Any, check: Any) -> None:
    """scikit-learn's own estimator checks (fitted attributes, labels_, transform, pickling,
    feature names, idempotent fits, ...), fit(X) splitting X among three participants."""
    check(estimator)


def test_invalid_parameters_fail_in_sklearn_wording() -> None:
    parts = _parts()
    with pytest.raises(ValueError, match=r"^The 'n_clusters' parameter of FederatedFuzzyCMeans "
                       r"must be an int in the range \[2, 1000\]\. Got 1 instead\.$"):
        FederatedFuzzyCMeans(1).fit(parts)
    with pytest.raises(ValueError, match="'k_range' parameter of FedFCM must be None or a pair"):
        FedFCM(k_range=(5, 2)).fit(parts)
    with pytest.raises(ValueError, match="'m' parameter of FederatedKMeans"):
        FederatedKMeans(m=1.0).fit(parts)
    with pytest.raises(ValueError, match="'protection' parameter of FederatedFuzzyCMeans"):
        FederatedFuzzyCMeans(protection="secret").fit(parts)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'protection' parameter of KFed must be 'none'"):
        KFed(protection="masking").fit(parts)
    with pytest.raises(ValueError, match=r"'variant' parameter of KFed must be a str among "
                       r"\{'ours', 'dennis'\}\. Got 'paper' instead\.$"):
        KFed(variant="paper").fit(parts)  # type: ignore[arg-type]


# -- fit equals the simulator ----------------------------------------------------------------
@pytest.mark.parametrize("algorithm", list(ESTIMATORS))
def test_fit_and_predict_equal_the_simulator(algorithm: str) -> None:
    parts = _parts()
    cls, kw = ESTIMATORS[algorithm]
    est = cls(2, random_state=3, **kw).fit(parts)
    expected = _simulated_centers(parts, algorithm, seed=3, protection="none")
    np.testing.assert_array_equal(est.cluster_centers_, expected)
    assert est.n_clusters_ == 2 and est.n_features_in_ == 2
    assert est.result_.algorithm == algorithm and est.result_.k_selected == 2
    assert est.fed_fuzzy_db_ == est.result_.sweep[0].fed_fuzzy_db
    assert not hasattr(est, "feature_names_in_")
    for part in parts:  # the simulator's own labelling of a participant's rows
        np.testing.assert_array_equal(
            est.predict(part), LocalParticipant(part, name="p").assign(expected)
        )
    np.testing.assert_array_equal(
        est.fit_predict(parts), np.concatenate([est.predict(part) for part in parts])
    )
    assert est.n_iter_ == est.result_.sweep[0].rounds


def test_default_protection_fit_equals_the_simulator() -> None:
    parts = _parts(seed=1)
    est = FederatedFuzzyCMeans(2, random_state=5).fit(parts)
    assert est.result_.protection == "masking"
    np.testing.assert_array_equal(
        est.cluster_centers_, _simulated_centers(parts, "ffcm", seed=5, protection="masking")
    )


def test_standardised_fit_predicts_as_the_simulator() -> None:
    rng = np.random.default_rng(2)
    parts = [p * np.array([1.0, 100.0]) + rng.normal(size=2) for p in _parts(seed=2)]
    est = FederatedFuzzyCMeans(2, protection="none", standardise=True, random_state=1).fit(parts)
    report = simulate(
        Federation("t", tuple(parts), None), algorithm="ffcm", ks=[2], seed=1,
        protection="none", standardise=True,
    )
    z_centers = report.outcome.sweep.entries[0].result.centers
    np.testing.assert_array_equal(est.cluster_centers_, report.outcome.centers(0))
    assert est.mean_ is not None and est.scale_ is not None
    for part in parts:
        local = LocalParticipant(part, name="p")
        local.apply_standardisation(est.mean_, est.scale_)
        np.testing.assert_array_equal(est.predict(part), local.assign(z_centers))


def test_predict_proba_gives_fuzzy_or_one_hot_memberships() -> None:
    parts = _parts()
    fuzzy = FederatedFuzzyCMeans(2, m=1.7, protection="none", random_state=0).fit(parts)
    U = fuzzy.predict_proba(parts[0])
    np.testing.assert_allclose(U, fcm_memberships(parts[0], fuzzy.cluster_centers_, m=1.7))
    np.testing.assert_allclose(U.sum(axis=1), 1.0)
    fuzzy.set_params(m=3.0)  # memberships keep the m of the fit
    np.testing.assert_array_equal(fuzzy.predict_proba(parts[0]), U)
    crisp = FederatedKMeans(2, protection="none", random_state=0).fit(parts)
    P = crisp.predict_proba(parts[1])
    assert set(np.unique(P)) == {0.0, 1.0}
    np.testing.assert_array_equal(P.argmax(axis=1), crisp.predict(parts[1]))


# -- DataFrames ------------------------------------------------------------------------------
def test_dataframes_give_feature_names() -> None:
    parts = _parts()
    frames = [pd.DataFrame(p, columns=["age", "income"]) for p in parts]
    est = FederatedKMeans(2, protection="none", random_state=4).fit(frames)
    assert list(est.feature_names_in_) == ["age", "income"]
    assert est.result_.feature_names == ["age", "income"]
    arrays = FederatedKMeans(2, protection="none", random_state=4).fit(parts)
    np.testing.assert_array_equal(est.cluster_centers_, arrays.cluster_centers_)
    np.testing.assert_array_equal(est.predict(frames[0]), arrays.predict(parts[0]))
    with pytest.raises(ValueError, match="feature names should match those that were passed"):
        est.predict(frames[0][["income", "age"]])
    with pytest.warns(UserWarning, match="X does not have valid feature names, but "
                      "FederatedKMeans was fitted with feature names"):
        est.predict(parts[0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a DataFrame with the fitted names: no warning
        est.predict(frames[1])
    renamed = [frames[0], frames[1].rename(columns={"age": "years"}), frames[2]]
    with pytest.raises(ValueError, match=r"columns must agree: federation\[1\]"):
        FederatedKMeans(2, protection="none").fit(renamed)


def test_split_column_names_the_participants() -> None:
    parts = _parts()
    sites = ["site-a", "site-b", "site-c"]  # sorted: the participants' order
    whole = pd.concat(
        [
            pd.DataFrame(p, columns=["x", "y"]).assign(site=s)
            for p, s in zip(parts, sites, strict=True)
        ]
    ).sample(frac=1.0, random_state=0)  # row order within a site does not matter to the sums
    est = FederatedFuzzyCMeans(2, protection="none", random_state=2).fit(
        whole, split_column="site"
    )
    arrays = FederatedFuzzyCMeans(2, protection="none", random_state=2).fit(parts)
    np.testing.assert_allclose(est.cluster_centers_, arrays.cluster_centers_, rtol=1e-9)
    assert est.participants_ == sites
    assert list(est.feature_names_in_) == ["x", "y"]
    with pytest.raises(ValueError, match="split_column 'hospital' is not a column"):
        FederatedFuzzyCMeans(2).fit(whole, split_column="hospital")
    with pytest.raises(ValueError, match="split_column 'site' has missing values"):
        FederatedFuzzyCMeans(2).fit(whole.assign(site=None), split_column="site")
    with pytest.raises(ValueError, match="split_column needs one DataFrame"):
        FederatedFuzzyCMeans(2).fit(parts, split_column="site")
    with pytest.raises(ValueError, match=r"fit takes a federation.*got DataFrame"):
        FederatedFuzzyCMeans(2).fit(whole)


# -- errors ----------------------------------------------------------------------------------
def test_predict_errors_are_clear() -> None:
    parts = _parts()
    with pytest.raises(NotFittedError, match="not fitted yet"):
        FederatedFuzzyCMeans(2).predict(parts[0])
    est = FederatedFuzzyCMeans(2, protection="none", random_state=0).fit(parts)
    with pytest.raises(
        ValueError, match=r"^X has 3 features, but FederatedFuzzyCMeans is expecting 2 features"
    ):
        est.transform(np.zeros((4, 3)))
    bad = parts[0].copy()
    bad[1, 0] = np.nan
    with pytest.raises(ValueError, match=r"^Input X contains NaN"):
        est.predict_proba(bad)
    with pytest.raises(ValueError, match="Expected 2D array, got 1D array"):
        est.score(parts[0][0])
    with pytest.raises(ValueError, match=r"^Input federation\[1\] contains NaN"):
        FederatedFuzzyCMeans(2).fit([parts[0], bad, parts[2]])
    with pytest.raises(ValueError, match=r"federation\[2\] has 3 features, but federation\[0\]"):
        FederatedFuzzyCMeans(2).fit([parts[0], parts[1], np.zeros((5, 3))])


# -- scikit-learn's fitted attributes --------------------------------------------------------
def test_labels_follow_the_input_rows_when_sites_interleave() -> None:
    parts = _parts(seed=5)
    sites = ["b-site", "a-site", "c-site"]  # not sorted: participants_ sorts them
    whole = pd.concat(
        [pd.DataFrame(p, columns=["x", "y"]).assign(site=s) for p, s in zip(parts, sites,
                                                                           strict=True)]
    ).sample(frac=1.0, random_state=3).reset_index(drop=True)
    assert whole["site"].iloc[:10].nunique() == 3  # the sites interleave
    est = FederatedKMeans(2, protection="none", random_state=1)
    labels = est.fit_predict(whole, split_column="site")
    assert est.participants_ == sorted(sites)
    assert labels.shape == (len(whole),) and labels.dtype.kind == "i"
    np.testing.assert_array_equal(labels, est.labels_)
    # row i's label is the one predict gives row i: the input's order, not the sites'
    np.testing.assert_array_equal(labels, est.predict(whole[["x", "y"]]))
    truth = (whole["x"] > 2.5).to_numpy()  # the blob each row was drawn from
    assert len({(t, lab) for t, lab in zip(truth, labels, strict=True)}) == 2
    distances = est.fit_transform(whole, split_column="site")
    np.testing.assert_allclose(distances, est.transform(whole[["x", "y"]]), rtol=1e-12)


@pytest.mark.parametrize("algorithm", list(ESTIMATORS))
def test_transform_score_and_the_objective(algorithm: str) -> None:
    parts = _parts(seed=6)
    cls, kw = ESTIMATORS[algorithm]
    est = cls(2, random_state=2, **kw).fit(parts)
    X = np.vstack(parts)
    C = est.cluster_centers_
    d2 = ((X[:, None, :] - C[None, :, :]) ** 2).sum(axis=2)  # independent of the package
    D = est.transform(X)
    assert D.shape == (len(X), est.n_clusters_) == (120, 2)
    np.testing.assert_allclose(D, np.sqrt(d2), rtol=1e-10)
    np.testing.assert_array_equal(D.argmin(axis=1), est.predict(X))
    if est.result_.algorithm in ("ffcm", "fedfcm"):
        U = fcm_memberships(X, C, m=2.0)
        assert not hasattr(est, "inertia_")
        assert est.objective_ == pytest.approx((U**2 * d2).sum(), rel=1e-10)
        assert est.score(X) == pytest.approx(-est.objective_, rel=1e-12)
    else:
        assert not hasattr(est, "objective_")
        assert est.inertia_ == pytest.approx(d2.min(axis=1).sum(), rel=1e-10)
        assert est.score(X) == pytest.approx(-est.inertia_, rel=1e-12)
    assert est.score(parts[0]) > est.score(X)  # a sum over rows: fewer rows, less to lose
    assert est.n_iter_ == est.result_.sweep[0].rounds >= 1
    assert list(est.get_feature_names_out()) == [f"{type(est).__name__.lower()}{j}"
                                                 for j in range(2)]


def test_random_state_takes_what_scikit_learn_takes() -> None:
    parts = _parts(seed=7)

    def centers(random_state: Any) -> np.ndarray:
        est = FederatedFuzzyCMeans(2, protection="none", random_state=random_state)
        return np.asarray(est.fit(parts).cluster_centers_)

    np.testing.assert_array_equal(
        centers(np.random.RandomState(0)), centers(np.random.RandomState(0))
    )
    np.testing.assert_array_equal(
        centers(np.random.default_rng(4)), centers(np.random.default_rng(4))
    )
    shared = np.random.RandomState(1)  # as in scikit-learn, a shared one advances
    first = FederatedFuzzyCMeans(2, protection="none", random_state=shared).fit(parts)
    second = FederatedFuzzyCMeans(2, protection="none", random_state=shared).fit(parts)
    assert first.result_.seed != second.result_.seed
    drawn = FederatedFuzzyCMeans(2, protection="none").fit(parts)
    assert drawn.result_.seed is not None  # drawn and recorded: it replays the fit
    np.testing.assert_array_equal(centers(drawn.result_.seed), drawn.cluster_centers_)
    with pytest.raises(ValueError, match=r"'random_state' parameter of FederatedFuzzyCMeans "
                       r"must be None, an int, a numpy\.random\.RandomState"):
        FederatedFuzzyCMeans(2, random_state="seven").fit(parts)  # type: ignore[arg-type]


def test_two_participants_get_a_value_error_saying_how_to_allow_them() -> None:
    two = _parts()[:2]
    with pytest.raises(ValueError, match=r"protection='masking' needs at least 3 participants"
                       r".*protection='none' and min_cohort=2"):
        FederatedFuzzyCMeans(2, random_state=0).fit(two)
    with pytest.raises(ValueError, match=r"2 participant\(s\), fewer than min_cohort=3.*set "
                       r"min_cohort=2 to allow it"):
        KFed(2, random_state=0).fit(two)
    allowed = FederatedFuzzyCMeans(2, protection="none", min_cohort=2, random_state=0)
    assert allowed.fit(two).labels_.shape == (80,)


# -- initial centers ---------------------------------------------------------------------------
@pytest.mark.parametrize("cls", [FederatedFuzzyCMeans, FedFCM, FederatedKMeans],
                         ids=lambda c: c.__name__)
def test_init_from_converged_centers_converges_at_once(cls: type) -> None:
    parts = _parts(seed=8)
    seeded = cls(2, protection="none", random_state=3).fit(parts)
    again = cls(2, protection="none", random_state=11, init=seeded.cluster_centers_).fit(parts)
    assert again.n_iter_ <= 2
    np.testing.assert_allclose(again.cluster_centers_, seeded.cluster_centers_, atol=1e-3)
    assert again.init is seeded.cluster_centers_  # the parameter is kept as given


def test_init_errors_name_init() -> None:
    parts = _parts()
    with pytest.raises(ValueError, match=r"'init' array of FedFCM must have shape "
                       r"\(n_clusters, n_features\) = \(2, 2\)\. Got shape \(3, 2\)"):
        FedFCM(2, init=np.zeros((3, 2))).fit(parts)
    with pytest.raises(ValueError, match=r"'init' array of FederatedKMeans gives the initial "
                       r"centers of one K; it does not apply with k_range=\(2, 3\)"):
        FederatedKMeans(init=np.zeros((2, 2)), k_range=(2, 3)).fit(parts)
    with pytest.raises(ValueError, match="'init' parameter of FederatedFuzzyCMeans must be "
                       "'auto' or an array-like"):
        FederatedFuzzyCMeans(2, init="k-means++").fit(parts)
    with pytest.raises(ValueError, match="init contains NaN"):
        FederatedFuzzyCMeans(2, init=[[0.0, np.nan], [1.0, 1.0]]).fit(parts)
    assert "init" not in KFed().get_params()  # k-FED does not start from global centers


# -- sweeps ----------------------------------------------------------------------------------
def test_sweep_returns_one_row_per_k() -> None:
    parts = _parts()
    est = FederatedFuzzyCMeans(protection="none", random_state=0)
    frame = sweep(est, parts, k_range=(2, 4))
    assert tuple(frame.columns) == SWEEP_COLUMNS
    assert list(frame["K"]) == [2, 3, 4]
    assert frame["FedFuzzDB"].idxmin() == 0  # two blobs: K=2 scores best
    assert not hasattr(est, "result_") and est.k_range is None  # the estimator is untouched
    fitted = clone(est).set_params(k_range=(2, 4)).fit(parts)
    pd.testing.assert_frame_equal(fitted.sweep_, frame)
    assert fitted.n_clusters_ == fitted.result_.k_selected == 2


def test_importing_fedclust_stays_light() -> None:
    code = (
        "import sys, fedclust; "
        "print('sklearn' in sys.modules, 'fedclust.simulate' in sys.modules); "
        "fedclust.KFed; print('fedclust.estimators' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    ).stdout.split()
    assert out == ["False", "False", "True"]
