"""Clustered federated distillation (Yang & Tae 2023): the pure numpy steps, and the driver
with numpy stub participants (no torch needed)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
from numpy.typing import NDArray

from fedclust.coordinator.distillation import MIN_PROTECTED_MEMBERS, run_fed_distill
from fedclust.core.errors import ProtocolError
from fedclust.protocol.algorithms.fed_distill_params import DistillParams
from fedclust.protocol.maths import distillation as dist
from fedclust.protocol.wire import messages as msg
from tests.coordinator._recording import RecordingSummation

FloatArray = NDArray[np.float64]


def _probs(rng: np.random.Generator, n: int, k: int) -> FloatArray:
    raw = rng.random((n, k))
    out: FloatArray = raw / raw.sum(axis=1, keepdims=True)
    return out


# -- participant side ---------------------------------------------------------------------


def test_label_counts_by_hand() -> None:
    P = np.array([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.6, 0.3, 0.1], [0.5, 0.5, 0.0]])
    # argmax: 0, 1, 0, and a tie -> the lowest label 0
    out = dist.participant_label_counts(P)
    np.testing.assert_array_equal(out[dist.LABEL_COUNTS], [3.0, 1.0, 0.0])


def test_soft_contribution_is_the_probabilities_and_a_count_of_one() -> None:
    P = _probs(np.random.default_rng(0), 5, 4)
    out = dist.participant_soft_contribution(P)
    np.testing.assert_array_equal(out[dist.SOFT_SUM], P)
    np.testing.assert_array_equal(out[dist.COUNT], [1.0])


@pytest.mark.parametrize(
    "bad",
    [
        np.array([[0.5, 0.6], [0.5, 0.5]]),  # a row sums to 1.1
        np.array([[1.2, -0.2], [0.5, 0.5]]),  # negative
        np.array([[np.nan, 1.0]]),  # NaN
        np.array([[1.0], [1.0]]),  # one class
        np.array([0.5, 0.5]),  # 1-D
    ],
    ids=["row-sum", "negative", "nan", "one-class", "1d"],
)
def test_participant_functions_refuse_non_probabilities(bad: FloatArray) -> None:
    with pytest.raises(ValueError, match="probs"):
        dist.participant_label_counts(bad)
    with pytest.raises(ValueError, match="probs"):
        dist.participant_soft_contribution(bad)


# -- scaling and grouping --------------------------------------------------------------------


def test_scale_counts_by_hand_and_constant_column_is_zero() -> None:
    C = np.array([[10.0, 0.0, 5.0], [30.0, 0.0, 5.0], [20.0, 0.0, 5.0]])
    S = dist.scale_counts(C)
    # column 0: (c - 10) / 20; columns 1 and 2 are constant -> 0 (MinMaxScaler's convention)
    np.testing.assert_allclose(S, [[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.5, 0.0, 0.0]])


def test_scale_counts_single_client_is_all_zero() -> None:
    np.testing.assert_array_equal(dist.scale_counts([[3.0, 7.0]]), [[0.0, 0.0]])


@pytest.mark.parametrize(
    ("bad", "match"),
    [([[1.0, -1.0]], "non-negative"), ([[np.nan, 1.0]], "NaN"), ([1.0, 2.0], "2-D")],
)
def test_scale_counts_rejects_bad_input(bad: list[float], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        dist.scale_counts(bad)


@pytest.mark.parametrize(("gap", "n_groups"), [(1.9, 1), (2.1, 2)])
def test_ward_threshold_by_hand(gap: float, n_groups: int) -> None:
    # Two single clients at Euclidean distance d: Ward's merge distance is
    # sqrt(2·1·1/2)·d = d, so they merge under the threshold 2 exactly when d < 2.
    S = np.array([[0.0, 0.0], [gap, 0.0]])
    labels = dist.group_clients(S)
    assert int(labels.max()) + 1 == n_groups


def test_grouping_finds_separated_groups_in_first_member_order() -> None:
    rng = np.random.default_rng(3)
    centres = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]) * 3.0
    truth = np.array([2, 0, 1, 2, 0, 1, 2, 0, 1, 1])
    S = centres[truth] + rng.normal(0.0, 0.05, size=(truth.size, 3))
    labels = dist.group_clients(S)
    assert dist.grouping_ari(truth, labels) == 1.0
    # canonical naming: group 0 contains client 0, group 1 the first client not in group 0
    assert labels[0] == 0
    assert labels[1] == 1


def test_grouping_single_client_fallback_and_huge_threshold() -> None:
    np.testing.assert_array_equal(dist.group_clients([[0.3, 0.9]]), [0])
    S = np.eye(4)
    np.testing.assert_array_equal(dist.group_clients(S, distance_threshold=1e6), [0, 0, 0, 0])


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), "2"])
def test_grouping_threshold_must_be_positive(bad: object) -> None:
    with pytest.raises(ValueError, match="'distance_threshold' parameter of group_clients"):
        dist.group_clients(np.eye(3), distance_threshold=bad)  # type: ignore[arg-type]


def test_global_groups_and_groups_as_lists() -> None:
    np.testing.assert_array_equal(dist.global_groups(3), [0, 0, 0])
    assert dist.groups_as_lists([1, 0, 1, 2]) == [[1], [0, 2], [3]]
    with pytest.raises(ValueError, match="n_clients"):
        dist.global_groups(0)


# -- teacher ------------------------------------------------------------------------------


def test_teacher_from_sums_equals_central_mean() -> None:
    # federated = central: dividing the summed contributions gives the mean of the members'
    # probabilities to float rounding.
    rng = np.random.default_rng(1)
    members = [_probs(rng, 6, 3) for _ in range(4)]
    total = {dist.SOFT_SUM: sum(members, np.zeros((6, 3))), dist.COUNT: np.array([4.0])}
    np.testing.assert_allclose(dist.combine_teacher(total), np.mean(members, axis=0),
                               rtol=0, atol=1e-15)


@pytest.mark.parametrize(
    "total",
    [
        {dist.SOFT_SUM: np.full((2, 2), 0.5)},  # no count
        {dist.SOFT_SUM: np.full((2, 2), 0.5), dist.COUNT: np.array([0.0])},
        {dist.SOFT_SUM: np.full((2, 2), 0.5), dist.COUNT: np.array([1.5])},
        {dist.SOFT_SUM: np.full((2, 2), np.nan), dist.COUNT: np.array([1.0])},
        {dist.SOFT_SUM: np.full((2, 2), 0.5), dist.COUNT: np.array([2.0])},  # rows sum to 0.5
        {dist.SOFT_SUM: np.full(4, 0.5), dist.COUNT: np.array([1.0])},  # 1-D
    ],
    ids=["no-count", "zero", "fraction", "nan", "not-probabilities", "1d"],
)
def test_teacher_rejects_inconsistent_sums(total: dict[str, FloatArray]) -> None:
    with pytest.raises(ProtocolError):
        dist.combine_teacher(total)


# -- evaluation helpers ---------------------------------------------------------------------


def test_grouping_ari_is_label_permutation_invariant() -> None:
    assert dist.grouping_ari([0, 0, 1, 1], [5, 5, 2, 2]) == 1.0
    assert dist.grouping_ari([0, 0, 1, 1], [0, 1, 0, 1]) < 0.0
    with pytest.raises(ValueError, match="equal length"):
        dist.grouping_ari([0, 1], [0, 1, 2])


def test_group_means() -> None:
    np.testing.assert_allclose(dist.group_means([1.0, 0.5, 0.0, 1.0], [0, 1, 1, 0]),
                               [1.0, 0.25])


# -- the driver with stub participants (numpy only) ------------------------------------------


class _Stub:
    """A participant whose 'model' predicts a fixed distribution over its own classes; it
    answers the driver's distillation tasks."""

    def __init__(self, name: str, classes: Sequence[int], n_classes: int = 4) -> None:
        self.name = name
        self.n_features = 5
        self._classes = list(classes)
        self._n_classes = n_classes
        self.teacher: FloatArray | None = None
        self.trained_with: int | None = None

    def _probs(self, public_X: FloatArray) -> FloatArray:
        P = np.full((public_X.shape[0], self._n_classes), 0.01)
        # cycle the public rows through the participant's classes
        for i in range(public_X.shape[0]):
            P[i, self._classes[i % len(self._classes)]] += 1.0
        out: FloatArray = P / P.sum(axis=1, keepdims=True)
        return out

    def soft(self, public_X: FloatArray) -> dict[str, FloatArray]:
        return dist.participant_soft_contribution(self._probs(public_X))

    def answer(self, spec: msg.TaskSpec) -> msg.Reply:
        match spec:
            case msg.DistillTrainTask(seed=seed):
                self.trained_with = seed
                return msg.AckReply()
            case msg.DistillCountsTask(public=public):
                counts = dist.participant_label_counts(self._probs(public.to_numpy()))
                return msg.DistillCountsReply(
                    label_counts=msg.WireArray.of(counts[dist.LABEL_COUNTS])
                )
            case msg.DistillSoftTask(public=public):
                soft = self.soft(public.to_numpy())
                return msg.DistillSoftReply(
                    soft_sum=msg.WireArray.of(soft[dist.SOFT_SUM]),
                    members=msg.WireArray.of(soft[dist.COUNT]),
                )
            case msg.DistillStepTask(teacher=teacher):
                self.teacher = teacher.to_numpy()
                return msg.AckReply()
        raise AssertionError(f"unexpected task {spec.kind!r}")

    def score(self) -> float:
        return 1.0 if self.teacher is None else float(self.teacher.max(axis=1).mean())


def _stubs() -> list[_Stub]:
    return [_Stub(f"a{i}", [0, 1]) for i in range(3)] + [_Stub(f"b{i}", [2, 3]) for i in range(2)]


PUBLIC = np.zeros((8, 5))


def _params(public: FloatArray = PUBLIC, **terms: object) -> DistillParams:
    return DistillParams(public=msg.WireArray.of(public), n_classes=4, **terms)


def test_driver_groups_stubs_and_flags_the_small_group() -> None:
    stubs = _stubs()
    result = run_fed_distill(stubs, _params(), seed=0)
    assert result.groups == (("a0", "a1", "a2"), ("b0", "b1"))
    assert MIN_PROTECTED_MEMBERS == 3
    assert result.unprotected_groups == (("b0", "b1"),)
    assert any("could not be protected" in note for note in result.notes)
    # each stub received its own group's teacher: the mean of identical members = their probs
    assert stubs[0].teacher is not None and stubs[3].teacher is not None
    np.testing.assert_allclose(stubs[0].teacher, stubs[0]._probs(PUBLIC))
    np.testing.assert_allclose(stubs[3].teacher, stubs[3]._probs(PUBLIC))
    assert [r.stage for r in result.history] == ["train_local", "counts", "teachers", "distill"]


def test_driver_global_mode_gives_one_teacher_for_all() -> None:
    stubs = _stubs()
    result = run_fed_distill(stubs, _params(mode="global"), seed=0)
    assert result.groups == (tuple(s.name for s in stubs),)
    assert result.unprotected_groups == ()
    expected = np.mean([s._probs(PUBLIC) for s in stubs], axis=0)
    for s in stubs:
        assert s.teacher is not None
        np.testing.assert_allclose(s.teacher, expected)


def test_driver_local_mode_shares_nothing() -> None:
    stubs = _stubs()
    result = run_fed_distill(stubs, _params(mode="local"), seed=0, evaluate=lambda s: s.score())
    assert all(s.teacher is None for s in stubs)
    assert len(result.groups) == 5
    assert result.overall_accuracy == 1.0
    assert result.accuracy == result.accuracy_before


def test_driver_sums_groups_of_three_or_more_by_the_summation() -> None:
    summation = RecordingSummation()
    stubs = _stubs()
    result = run_fed_distill(stubs, _params(), seed=0, summation=summation)
    # the group of 2 is summed in the clear, outside the summation
    assert [(names, s.kind, required) for names, s, required in summation.sums] == [
        (("a0", "a1", "a2"), "distill_soft", True)
    ]
    assert stubs[0].teacher is not None and stubs[3].teacher is not None
    np.testing.assert_allclose(stubs[3].teacher, stubs[3]._probs(PUBLIC))
    assert result.unprotected_groups == (("b0", "b1"),)


def test_driver_is_deterministic_for_a_seed_and_evaluates() -> None:
    a, b = _stubs(), _stubs()
    ra = run_fed_distill(a, _params(), seed=7, evaluate=lambda s: s.score())
    rb = run_fed_distill(b, _params(), seed=7, evaluate=lambda s: s.score())
    assert ra.groups == rb.groups
    assert [s.trained_with for s in a] == [s.trained_with for s in b]
    assert ra.group_accuracy == rb.group_accuracy and len(ra.group_accuracy) == 2
    assert ra.overall_accuracy is not None


def test_driver_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="at least one participant"):
        run_fed_distill([], _params())
    with pytest.raises(ValueError, match="distinct participant names"):
        run_fed_distill([_Stub("x", [0]), _Stub("x", [1])], _params())
    with pytest.raises(
        ValueError, match=r"distill.public must have the participants' n_features=\[5\]"
    ):
        run_fed_distill(_stubs(), _params(np.zeros((8, 4))))


def test_members_with_mismatched_soft_predictions_fail_the_sum() -> None:
    class Odd(_Stub):
        def soft(self, public_X: FloatArray) -> dict[str, FloatArray]:
            return {dist.SOFT_SUM: np.ones((1, 1)), dist.COUNT: np.ones(1)}

    members = [_Stub("a", [0]), Odd("b", [0])]
    with pytest.raises(ProtocolError, match="participant 'b' returned 'soft_sum' of shape"):
        run_fed_distill(members, _params(mode="global"), seed=0)
