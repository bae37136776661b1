"""The participants' summed statistics as :func:`protocol.maths.center_kmeans.center_kmeans` asks
for them: one secure sum (or, with protection "none", one plain gather) per question.

Used by FedFCM's k-means averaging and by federated k-means: the participants keep their
local centers, so the server's k-means is the same procedure whatever the protection; only
how each sum is added differs. Every holder must answer every question of one k-means (the
point set must not change): :func:`center_kmeans_of` runs it again without a holder that
dropped out midway.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from fedclust.coordinator._rounds import present
from fedclust.coordinator.secure_sum import PlainSummation, Summation
from fedclust.core.errors import UnavailableError
from fedclust.core.validation import FloatArray
from fedclust.protocol.maths.center_kmeans import (
    CenterKMeansResult,
    CenterScatter,
    CenterSums,
    center_kmeans,
)
from fedclust.protocol.wire import messages as msg

__all__ = ["FederatedCenters", "center_kmeans_of"]


class FederatedCenters:
    """A :class:`protocol.maths.center_kmeans.CenterOracle` over the participants holding local
    centers. Every holder must answer every question (the point set must not change), so a
    refusal or dropout fails the run. ``weight_bound`` bounds one participant's total weight
    (it sets the fixed-point scale of the protected sums; None: the job's row bound)."""

    def __init__(
        self, holders: Sequence[Any], summation: Summation | None,
        weight_bound: float | None = None,
    ) -> None:
        self._holders = list(holders)
        self._summation = summation if summation is not None else PlainSummation()
        self._params = {} if weight_bound is None else {"weight_bound": weight_bound}

    def center_sums(self, starts: FloatArray) -> CenterSums:
        task = msg.StatisticTask.of("center_sums", starts, **self._params)
        total, _ = self._summation.sum(self._holders, task, msg.StatisticReply, required=True)
        fields = msg.summands(total)
        return CenterSums(sums=fields["sums"], weights=fields["weights"],
                          inertia=fields["inertia"], contributors=fields["contributors"],
                          objective=float(fields["objective"][0]))

    def center_scatter(self, starts: FloatArray) -> CenterScatter:
        task = msg.StatisticTask.of("center_scatter", starts, **self._params)
        total, _ = self._summation.sum(self._holders, task, msg.StatisticReply, required=True)
        return CenterScatter(scatter=total.fields["scatter"].to_numpy(),
                             removal=total.fields["removal"].to_numpy())


def center_kmeans_of(
    holders: Sequence[Any],
    summation: Summation | None,
    k: int,
    n_features: int,
    *,
    init: FloatArray | None,
    seed: np.random.Generator,
    weight_bound: float | None = None,
) -> tuple[CenterKMeansResult, list[Any]]:
    """The server's k-means over the holders' local centers, and the holders it ran over:
    a holder that drops out midway is left out and the k-means run again over the others.

    Raises:
        UnavailableError: every holder dropped out.
    """
    while True:
        live = present(holders)
        if not live:
            raise UnavailableError("every participant holding local centers dropped out")
        oracle = FederatedCenters(live, summation, weight_bound=weight_bound)
        try:
            return center_kmeans(oracle, k, n_features, init=init, seed=seed), live
        except UnavailableError:
            if len(present(live)) == len(live):  # not one of them dropping out
                raise
