"""The scikit-learn style estimators: parameters, fit == the simulator, input validation."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import sklearn.utils.estimator_checks as sk_checks
from sklearn.base import clone
from sklearn.exceptions import NotFittedError

from fedclust import FederatedFuzzyCMeans, FederatedKMeans, FedFCM, KFed, sweep
from fedclust.data.federations import Federation
from fedclust.estimators import SWEEP_COLUMNS
from fedclust.participant.local import LocalParticipant
from fedclust.protocol.maths.fcm import fcm_memberships
from fedclust.simulate import simulate

ESTIMATORS = {
    "ffcm": (FederatedFuzzyCMeans, {"protection": "none"}),
    "fedfcm": (FedFCM, {"protection": "none"}),
    "fkm": (FederatedKMeans, {"protection": "none"}),
    "kfed": (KFed, {}),
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


@pytest.mark.parametrize(
    "check",
    [
        "check_no_attributes_set_in_init",
        "check_parameters_default_constructible",
        "check_get_params_invariance",
        "check_set_params",
        "check_estimator_repr",
        "check_estimator_cloneable",
        "check_mixin_order",
        "check_do_not_raise_errors_in_init_or_set_params",
        "check_estimators_unfitted",
    ],
)
@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_the_applicable_sklearn_checks_pass(cls: type, check: str) -> None:
    """check_estimator as a whole calls fit(X) with one matrix; these checks do not fit."""
    function = getattr(sk_checks, check, None)
    if function is None:
        pytest.skip(f"this scikit-learn has no {check}")
    function(cls.__name__, cls())
    assert cls().get_params() == clone(cls()).get_params()


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
        FederatedFuzzyCMeans(protection="secret").fit(parts)
    with pytest.raises(ValueError, match="'protection' parameter of KFed must be 'none'"):
        KFed(protection="masking").fit(parts)


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
    assert [list(labels) for labels in est.fit_predict(parts)] == [
        list(est.predict(part)) for part in parts
    ]


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
    with pytest.raises(ValueError, match=r"X has feature names \['income', 'age'\]"):
        est.predict(frames[0][["income", "age"]])
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
        est.predict(np.zeros((4, 3)))
    bad = parts[0].copy()
    bad[1, 0] = np.nan
    with pytest.raises(ValueError, match=r"^X contains NaN or infinity"):
        est.predict_proba(bad)
    with pytest.raises(ValueError, match="2-D array"):
        est.predict(parts[0][0])
    with pytest.raises(ValueError, match=r"^federation\[1\] contains NaN"):
        FederatedFuzzyCMeans(2).fit([parts[0], bad, parts[2]])
    with pytest.raises(ValueError, match=r"federation\[2\] has 3 features, but federation\[0\]"):
        FederatedFuzzyCMeans(2).fit([parts[0], parts[1], np.zeros((5, 3))])


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
