"""FedCRef's local-only baseline: FedCRef's local steps on each client alone (digits, CPU)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from sklearn.datasets import load_digits  # noqa: E402

from fedclust import deep_simulate as ds  # noqa: E402
from fedclust.core.errors import ProtocolError  # noqa: E402
from fedclust.participant.deep import autoencoder as ae  # noqa: E402
from fedclust.participant.deep.fedcref_local import (  # noqa: E402
    COMMON_INIT_SEED,
    FedCRefLocal,
    local_only_baseline,
)
from fedclust.protocol.maths.fedcref import AutoencoderSpec  # noqa: E402
from fedclust.protocol.maths.metrics import clustering_accuracy  # noqa: E402

SPEC = AutoencoderSpec(64)
CONFIG = ae.TrainConfig(epochs=5)
TAU = 0.8


def _rows(classes: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """The first 25 digits of each class, scaled to [0, 1], and their classes."""
    X, y = load_digits(return_X_y=True)
    rows = np.concatenate([np.flatnonzero(y == c)[:25] for c in classes])
    return X[rows] / 16.0, y[rows]


def _client(name: str, classes: tuple[int, ...]) -> FedCRefLocal:
    """A client whose initial clustering is its true classes with 30 % of them swapped."""
    X, y = _rows(classes)
    return FedCRefLocal(X, name=name, initial="dirty", y_true=y, dirtiness=0.3, config=CONFIG)


def test_refine_alone_retrains_and_reassigns_until_the_agreement_reaches_tau() -> None:
    p = _client("a", (0, 1, 2, 3))
    p.fedcref_init(SPEC, seed=1)
    start_labels, start_models = p.labels, p.fedcref_models()
    agreements = p.refine_alone(tau=TAU, max_iterations=4, seed=2)
    # FedCRef's stop rule for a client: every iteration before the last agreed < tau.
    assert 1 <= len(agreements) <= 4
    assert all(a < TAU for a in agreements[:-1])
    assert agreements[-1] >= TAU or len(agreements) == 4
    # d = 0.3 on 4 classes: the first reassignment moves over 20 % of the rows, so a second
    # iteration retrains the models (fedcref_train) on the new clusters.
    assert agreements[0] < TAU and len(agreements) >= 2
    common = ae.init_params(SPEC, seed=COMMON_INIT_SEED)
    for m in p.fedcref_models():
        assert not np.array_equal(m, common)
        assert not any(np.array_equal(m, s) for s in start_models)
    _, y = _rows((0, 1, 2, 3))
    assert p.labels.shape == y.shape
    # Reassignment by reconstruction error cleans the dirty clustering (measured over init
    # seeds 1-3: ACC 0.68-0.70 -> 0.93-0.96; first agreement 0.64-0.68).
    assert clustering_accuracy(y, p.labels) > clustering_accuracy(y, start_labels) + 0.1


def test_refine_alone_needs_the_initial_clustering_and_checks_its_arguments() -> None:
    p = _client("a", (0, 1))
    with pytest.raises(ProtocolError, match="fedcref_init was not called"):
        p.refine_alone(seed=0)
    p.fedcref_init(SPEC, seed=1)
    with pytest.raises(ValueError, match="max_iterations"):
        p.refine_alone(max_iterations=0, seed=0)
    with pytest.raises(ValueError, match="tau"):
        p.refine_alone(tau=1.5, seed=0)


def test_the_baseline_scores_every_client_and_no_client_sees_another() -> None:
    def run(second: tuple[int, ...]) -> tuple[list[FedCRefLocal], float]:
        parts = [_client("a", (0, 1, 2)), _client("b", second), _client("c", (7, 8))]
        for i, p in enumerate(parts):
            p.fedcref_init(SPEC, seed=10 + i)
        return parts, local_only_baseline(parts, tau=TAU, max_iterations=3, seed=5).mean_accuracy

    parts, mean = run((3, 4, 5))
    accs = [clustering_accuracy(_rows(c)[1], p.labels)
            for p, c in zip(parts, [(0, 1, 2), (3, 4, 5), (7, 8)], strict=True)]
    assert mean == pytest.approx(float(np.mean(accs)))
    # Client b holding other rows changes nothing at a or c: no step crosses clients.
    other, _ = run((4, 6))
    for i in (0, 2):
        np.testing.assert_array_equal(other[i].labels, parts[i].labels)
        for m, n in zip(other[i].fedcref_models(), parts[i].fedcref_models(), strict=True):
            np.testing.assert_array_equal(m, n)


TINY: dict[str, Any] = {"clients": 4, "samples_per_class": 15, "fedavg_rounds": 1,
                        "max_iterations": 2, "local_epochs": 3, "dirtiness": 0.3,
                        "protection": "none", "device": "cpu"}


def test_the_simulator_runs_the_baseline_from_fedcrefs_initial_clustering(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plain = ds.simulate_fedcref("digits", **TINY)
    starts: list[float] = []
    alone = FedCRefLocal.refine_alone

    def recording(self: FedCRefLocal, **kw: Any) -> list[float]:
        starts.append(self.fedcref_evaluation()[0])
        return alone(self, **kw)

    monkeypatch.setattr(FedCRefLocal, "refine_alone", recording)
    doc = ds.simulate_fedcref("digits", local_only=True, **TINY)
    assert plain.local_only_accuracy is None
    assert doc.local_only_accuracy is not None and 0.0 < doc.local_only_accuracy <= 1.0
    # Each client starts where FedCRef started (the dirty clustering, ACC ~0.7 at d = 0.3),
    # not where FedCRef ended (0.3 at this scale: clients collapse to one cluster).
    assert len(starts) == 4
    assert float(np.mean(starts)) == pytest.approx(doc.initial_accuracy)
    # The baseline runs after the federation: FedCRef's own results are unchanged.
    for key in ("final_accuracy", "initial_accuracy", "groups", "iterations"):
        assert getattr(doc, key) == getattr(plain, key), key
    assert "local-only baseline mean ACC" in ds.format_deep_result(doc)
