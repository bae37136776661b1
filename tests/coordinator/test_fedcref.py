"""The FedCRef driver with stand-in participants (no models trained): which federated models
each participant refines with, and the FedAvg requests a group's members answer."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
from numpy.typing import NDArray

from fedclust.coordinator.fedcref import FedAvgRequest, run_fedcref, sum_contributions
from fedclust.protocol.maths.fedcref import AutoencoderSpec


class StandIn:
    """Two local clusters; cluster q scores 0 against the others' cluster-q models (their
    models arrive in cluster order) and 0.5 against the rest, or 1 throughout if ``loner``."""

    n_features = 4

    def __init__(self, name: str, *, loner: bool = False) -> None:
        self.name = name
        self.loner = loner
        self.refined_with: list[int] = []
        self.fedavg_clusters: list[tuple[int, ...]] = []
        self._params = 0

    def fedcref_init(self, spec: AutoencoderSpec, *, seed: int) -> int:
        self._params = spec.n_params
        return 2

    def fedcref_train(self, *, seed: int) -> None:
        return None

    def fedcref_models(self) -> list[NDArray[np.float32]]:
        return [np.zeros(self._params, dtype=np.float32) for _ in range(2)]

    def fedcref_scores(
        self, models: Sequence[NDArray[np.float32]], *, alpha: float
    ) -> NDArray[np.float64]:
        if self.loner:
            return np.ones((2, len(models)))
        column = np.arange(len(models)) % 2
        return np.where(column[None, :] == np.arange(2)[:, None], 0.0, 0.5)

    def fedcref_fedavg_step(
        self, model: NDArray[np.float32] | None, clusters: Sequence[int], *, epochs: int,
        seed: int,
    ) -> dict[str, NDArray[np.float64]]:
        self.fedavg_clusters.append(tuple(clusters))
        n = 10.0 * len(clusters)
        return {"weighted_params": np.full(self._params, n), "n": np.array([n])}

    def fedcref_refine(self, group_models: Sequence[NDArray[np.float32]], *, seed: int) -> float:
        self.refined_with.append(len(group_models))
        return 1.0  # unchanged: everyone freezes after one iteration


def _run(refine_with: str) -> list[StandIn]:
    parts = [StandIn("a"), StandIn("b"), StandIn("c"), StandIn("z", loner=True)]
    res = run_fedcref(
        parts, hidden=(3,), fedavg_rounds=2, seed=0,
        refine_with=refine_with,  # type: ignore[arg-type]
    )
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


def test_every_member_answers_the_same_request_for_its_own_clusters() -> None:
    parts = _run("groups")
    for p in parts[:3]:
        # per group, its start and two FedAvg rounds over the member's cluster in it
        assert p.fedavg_clusters == [(0,)] * 3 + [(1,)] * 3
    assert parts[3].fedavg_clusters == []
    request = FedAvgRequest(None, {"a": (1,), "b": (0, 1)}, {"a": 3, "b": 4}, 0)
    total = sum_contributions([StandIn("a"), StandIn("b")], request)
    assert total["n"][0] == 30.0
