"""The FedCRef driver with stand-in participants (no models trained): which federated models
each participant refines with, and the FedAvg statistics a group's members answer."""

from __future__ import annotations

import numpy as np
import pytest

from fedclust.coordinator.fedcref import run_fedcref
from fedclust.protocol.algorithms.fedcref_params import FedCRefParams
from fedclust.protocol.maths.fedcref import AutoencoderSpec
from fedclust.protocol.wire import messages as msg
from tests.coordinator._recording import RecordingSummation


class StandIn:
    """Two local clusters; cluster q scores 0 against the others' cluster-q models (their
    models arrive in cluster order) and 0.5 against the rest, or 1 throughout if ``loner``.
    It answers the driver's FedCRef tasks and records them."""

    n_features = 4

    def __init__(self, name: str, *, loner: bool = False) -> None:
        self.name = name
        self.loner = loner
        self.refined_with: list[int] = []
        self.fedavg: list[msg.FedCRefFedavgTask] = []
        self._params = 0

    def answer(self, spec: msg.TaskSpec) -> msg.Reply:
        match spec:
            case msg.FedCRefInitTask(hidden=hidden):
                self._params = AutoencoderSpec(self.n_features, hidden).n_params
                return msg.FedCRefInitReply(k=2)
            case msg.FedCRefTrainTask():
                return msg.AckReply()
            case msg.FedCRefModelsTask():
                models = np.zeros((2, self._params), dtype=np.float32)
                return msg.FedCRefModelsReply(models=msg.WireArray.of(models))
            case msg.FedCRefScoresTask(models=models):
                m = models.shape[0]
                column = np.arange(m) % 2
                scores = (np.ones((2, m)) if self.loner
                          else np.where(column[None, :] == np.arange(2)[:, None], 0.0, 0.5))
                return msg.FedCRefScoresReply(scores=msg.WireArray.of(scores))
            case msg.FedCRefFedavgTask(members=members):
                self.fedavg.append(spec)
                n = 10.0 * len(members[self.name])
                return msg.FedCRefFedavgReply(
                    weighted_params=msg.WireArray.of(np.full(self._params, n)),
                    rows=msg.WireArray.of(np.array([n])),
                )
            case msg.FedCRefRefineTask(models=models):
                self.refined_with.append(models.shape[0])
                # unchanged: everyone freezes after one iteration
                return msg.FedCRefRefineReply(agreement=1.0)
        raise AssertionError(f"unexpected task {spec.kind!r}")


def _run(refine_with: str) -> list[StandIn]:
    parts = [StandIn("a"), StandIn("b"), StandIn("c"), StandIn("z", loner=True)]
    params = FedCRefParams(hidden=(3,), fedavg_rounds=2, refine_with=refine_with)
    res = run_fedcref(parts, params, seed=0)
    (it,) = res.iterations
    assert res.stop_reason == "all_frozen"
    assert it.n_groups == 2 and it.n_isolated == 2  # a, b, c's clusters 0 and 1; z's alone
    return parts


def test_refinement_uses_own_groups_or_every_group() -> None:
    own = _run("groups")
    assert [p.refined_with for p in own] == [[2], [2], [2], [0]]
    every = _run("all")
    assert [p.refined_with for p in every] == [[2], [2], [2], [2]]
    with pytest.raises(ValueError, match="refine_with"):
        _run("some")


def test_each_member_is_asked_its_own_clusters() -> None:
    parts = _run("groups")
    for p in parts[:3]:
        # per group, its start and two FedAvg rounds over the member's cluster in it
        assert [t.members[p.name] for t in p.fedavg] == [[0]] * 3 + [[1]] * 3
        assert [t.model is None for t in p.fedavg] == [True, False, False] * 2
    assert parts[3].fedavg == []
    # a group of 3 sums in the clear without a summation: each member is asked its own part
    assert all(set(t.members) == set(t.seeds) == {p.name} for p in parts[:3] for t in p.fedavg)
    # the rounds' seeds differ, the members' tasks of a round carry the same model
    a, b = parts[0].fedavg, parts[1].fedavg
    assert a[1].model == b[1].model and a[1].seeds["a"] != a[2].seeds["a"]


def test_a_group_of_three_sums_one_statistic_naming_every_member_by_the_summation() -> None:
    summation = RecordingSummation()
    parts = [StandIn("a"), StandIn("b"), StandIn("c"), StandIn("z", loner=True)]
    params = FedCRefParams(hidden=(3,), fedavg_rounds=2)
    res = run_fedcref(parts, params, seed=0, summation=summation)
    assert len(summation.sums) == 6  # 2 groups x (start + 2 rounds)
    for names, statistic, required in summation.sums:
        assert isinstance(statistic, msg.FedCRefFedavgTask) and required
        assert names == ("a", "b", "c") and sorted(statistic.members) == list(names)
    assert res.iterations[0].small_groups == ()
