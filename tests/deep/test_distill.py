"""Clustered federated distillation (Yang & Tae 2023) end to end on scikit-learn's 8x8 digits.

Federation: 3 groups of 4 clients; group class sets {0,1}, {2,3,4}, {5,6,7} (disjoint, like
the paper's label-based groups); 30 training rows per class per client (the digits have
~180 rows per class, too few for the paper's 50 with 4 clients); public set 20 rows of every
class 0-9; each client tested on 20 held-out rows per class of its group.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from numpy.typing import NDArray

torch = pytest.importorskip("torch")

from sklearn.datasets import load_digits  # noqa: E402

from fedclust.coordinator.distillation import FedDistillResult, run_fed_distill  # noqa: E402
from fedclust.participant.deep.classifier import (  # noqa: E402
    ClassifierSpec,
    build_classifier,
    predict_proba,
)
from fedclust.participant.deep.distill_local import DistillParticipant  # noqa: E402
from fedclust.participant.local import LocalParticipant  # noqa: E402
from fedclust.protocol.algorithms.fed_distill_params import DistillParams  # noqa: E402
from fedclust.protocol.maths.distillation import grouping_ari  # noqa: E402
from fedclust.protocol.wire.messages import WireArray  # noqa: E402
from tests.deep._answering import distilling  # noqa: E402

GROUPS = ((0, 1), (2, 3, 4), (5, 6, 7))
CLIENTS_PER_GROUP = 4
PER_CLASS = 30
SPEC = ClassifierSpec(64, 10, "mlp")
EPOCHS = 30  # distillation epochs (paper 50): enough on 200 public rows, keeps the file fast


@dataclass
class Federation:
    participants: list[DistillParticipant]
    rows: list[tuple[NDArray[np.float64], NDArray[np.int64]]]  # each participant's X, y
    truth: list[int]
    public: NDArray[np.float64]
    X: NDArray[np.float64]
    y: NDArray[np.int64]
    tests: dict[str, NDArray[np.int64]]

    @property
    def members(self) -> list[LocalParticipant]:
        """The participants as a new job's driver asks them (an agent trains its classifier
        once per job)."""
        return [distilling(p, X, y) for p, (X, y) in zip(self.participants, self.rows,
                                                          strict=True)]

    def evaluate(self, member: LocalParticipant) -> float:
        idx = self.tests[member.name]
        model = next(p for p in self.participants if p.name == member.name)
        return model.evaluate(self.X[idx], self.y[idx])

    def per_true_group(self, acc: tuple[tuple[str, float], ...]) -> list[float]:
        a = dict(acc)
        names = [p.name for p in self.participants]
        return [
            float(np.mean([a[n] for n, t in zip(names, self.truth, strict=True) if t == g]))
            for g in range(len(GROUPS))
        ]


def make_federation(seed: int = 0) -> Federation:
    X, y = load_digits(return_X_y=True)
    X = X / 16.0
    rng = np.random.default_rng(seed)
    pools = {c: list(rng.permutation(np.flatnonzero(y == c))) for c in range(10)}
    public = [pools[c].pop() for c in range(10) for _ in range(20)]
    held = {c: [pools[c].pop() for _ in range(20)] for c in range(10)}
    y = y.astype(np.int64)
    participants, rows, truth, tests = [], [], [], {}
    for g, classes in enumerate(GROUPS):
        test_idx = np.array([i for c in classes for i in held[c]])
        for k in range(CLIENTS_PER_GROUP):
            idx = np.array([pools[c].pop() for c in classes for _ in range(PER_CLASS)])
            p = DistillParticipant(X[idx], y[idx], name=f"g{g}-c{k}", spec=SPEC)
            participants.append(p)
            rows.append((X[idx], y[idx]))
            truth.append(g)
            tests[p.name] = test_idx
    return Federation(participants, rows, truth, X[public], X, y, tests)


def _params(public: NDArray[np.float64], **terms: object) -> DistillParams:
    return DistillParams(public=WireArray.of(public), n_classes=SPEC.n_classes, **terms)


@pytest.fixture(scope="module")
def federation() -> Federation:
    return make_federation()


@pytest.fixture(scope="module")
def runs(federation: Federation) -> dict[str, FedDistillResult]:
    return {
        mode: run_fed_distill(
            federation.members, _params(federation.public, mode=mode, epochs=EPOCHS),
            seed=1, evaluate=federation.evaluate,
        )
        for mode in ("clustered", "global")
    }


def test_grouping_recovers_the_label_groups(
    federation: Federation, runs: dict[str, FedDistillResult]
) -> None:
    found = runs["clustered"].group_labels([p.name for p in federation.participants])
    # Tolerance ARI >= 0.85: the run is deterministic for its seed and recovers the groups
    # exactly here (ARI 1); the slack admits one client split off on its own (ARI 0.88), which
    # float differences between torch builds could cause, but not one client put in a wrong
    # group (0.74) or two groups merged (0.52).
    assert grouping_ari(federation.truth, found) >= 0.85
    assert runs["clustered"].scaled_counts is not None
    assert runs["clustered"].scaled_counts.shape == (12, 10)
    assert runs["clustered"].unprotected_groups == ()  # groups of 4 >= 3


def test_clustered_beats_global_averaging_per_group(
    federation: Federation, runs: dict[str, FedDistillResult]
) -> None:
    clustered = federation.per_true_group(runs["clustered"].accuracy)
    global_ = federation.per_true_group(runs["global"].accuracy)
    local = federation.per_true_group(runs["clustered"].accuracy_before)
    # The paper's claim: a group teacher helps where one global teacher mixes other groups'
    # labels in. Measured here: clustered 1.00 in every group, global 0.72-0.98, local
    # 0.98-1.00. Tolerances: every group at least as good as global up to 0.02 (one test row
    # in 60); overall at least 0.05 better (measured ~0.14); clustered within 0.03 of
    # local-only (distilling towards one's own group must not hurt).
    for c, g in zip(clustered, global_, strict=True):
        assert c >= g - 0.02
    assert runs["clustered"].overall_accuracy is not None
    assert runs["global"].overall_accuracy is not None
    assert runs["clustered"].overall_accuracy >= runs["global"].overall_accuracy + 0.05
    assert np.mean(clustered) >= np.mean(local) - 0.03


def test_same_seed_same_groups_and_local_mode_shares_nothing(federation: Federation) -> None:
    # epochs=0: grouping and teachers only, fast
    a = run_fed_distill(federation.members, _params(federation.public, epochs=0), seed=5)
    b = run_fed_distill(federation.members, _params(federation.public, epochs=0), seed=5)
    assert a.groups == b.groups
    assert a.scaled_counts is not None and b.scaled_counts is not None
    np.testing.assert_array_equal(a.scaled_counts, b.scaled_counts)
    local = run_fed_distill(federation.members, _params(federation.public, mode="local"),
                            seed=5, evaluate=federation.evaluate)
    assert len(local.groups) == 12 and local.accuracy == local.accuracy_before


def test_a_client_with_one_class_is_accepted(federation: Federation) -> None:
    # Documented fallback: a one-class client trains normally and predicts its class; the
    # run completes and the client is placed in some group.
    X, y = federation.X, federation.y
    ones = np.flatnonzero(y == 9)[:40]
    lone = DistillParticipant(X[ones], y[ones], name="only-nines", spec=SPEC)
    members = [*federation.members[:4], distilling(lone, X[ones], y[ones])]
    result = run_fed_distill(members, _params(federation.public, epochs=1), seed=0)
    assert sum(len(g) for g in result.groups) == 5
    counts = lone.predict_counts(federation.public)["label_counts"]
    assert counts[9] == counts.sum()


def test_bad_input_gets_clear_errors(federation: Federation) -> None:
    X, y = federation.X[:50], federation.y[:50]
    with pytest.raises(ValueError, match="n_features=64"):
        DistillParticipant(X[:, :63], y, name="narrow", spec=SPEC)
    bad = X.copy()
    bad[3, 3] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        DistillParticipant(bad, y, name="nan", spec=SPEC)
    with pytest.raises(ValueError, match=r"labels in \[0, 10\)"):
        DistillParticipant(X, y + 10, name="labels", spec=SPEC)
    with pytest.raises(ValueError, match="1-D with 50 labels"):
        DistillParticipant(X, y[:49], name="short", spec=SPEC)
    p = DistillParticipant(X, y, name="ok", spec=SPEC)
    with pytest.raises(RuntimeError, match="train_local"):
        p.predict_counts(federation.public)
    with pytest.raises(
        ValueError, match=r"distill.public must have the participants' n_features"
    ):
        run_fed_distill([distilling(p, X, y)], _params(federation.public[:, :60]), seed=0)
    with pytest.raises(ValueError, match="public_X must have n_features=64"):
        p.predict_soft(federation.public[:, :60])
    with pytest.raises(ValueError, match="teacher must have shape"):
        p.distill(np.full((3, 10), 0.1), federation.public, seed=0)
    with pytest.raises(ValueError, match="teacher must hold probabilities"):
        p.distill(np.full((200, 10), 0.5), federation.public, seed=0)
    with pytest.raises(ValueError, match="n_samples=1"):
        DistillParticipant(X[:1], y[:1], name="one-row", spec=SPEC)
    with pytest.raises(ValueError, match="non-empty float64"):
        _params(federation.public[:0])
    with pytest.raises(ValueError, match="cnn"):
        ClassifierSpec(63, 10, "cnn")


def test_cnn_runs_on_8x8_images_and_is_seeded() -> None:
    spec = ClassifierSpec(64, 10, "cnn")
    X = np.random.default_rng(0).random((5, 64))
    a = predict_proba(build_classifier(spec, seed=3), X)
    b = predict_proba(build_classifier(spec, seed=3), X)
    assert a.shape == (5, 10)
    np.testing.assert_allclose(a.sum(axis=1), 1.0, atol=1e-9)
    np.testing.assert_array_equal(a, b)
