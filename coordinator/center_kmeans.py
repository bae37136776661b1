"""The participants' summed statistics as :func:`protocol.center_kmeans.center_kmeans` asks
for them: one secure sum (or, with protection "none", one plain gather) per question.

Used by FedFCM's k-means averaging and by federated k-means: the participants keep their
local centers, so the server's k-means is the same procedure whatever the protection; only
how each sum is added differs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fedclust.coordinator._rounds import gather_required
from fedclust.coordinator.secure_sum import Summation
from fedclust.protocol import messages as msg
from fedclust.protocol._validation import FloatArray
from fedclust.protocol.center_kmeans import (
    CenterScatter,
    CenterSums,
    add_center_scatter,
    add_center_sums,
)

__all__ = ["FederatedCenters"]


class FederatedCenters:
    """A :class:`protocol.center_kmeans.CenterOracle` over the participants holding local
    centers. Every holder must answer every question (the point set must not change), so a
    refusal or dropout fails the run. ``weight_bound`` bounds one participant's total weight
    (it sets the fixed-point scale of the protected sums; None: the job's row bound)."""

    def __init__(
        self, holders: Sequence[Any], summation: Summation | None,
        weight_bound: float | None = None,
    ) -> None:
        self._holders = list(holders)
        self._summation = summation
        self._weight_bound = weight_bound

    def center_sums(self, starts: FloatArray) -> CenterSums:
        if self._summation is None:
            parts = gather_required(self._holders, lambda p: p.center_sums(starts))
            return add_center_sums(parts, starts.shape)
        task = msg.CenterSumsTask(
            centers=msg.WireArray.of(starts), weight_bound=self._weight_bound
        )
        total, _ = self._summation.sum(self._holders, task, msg.CenterSumsReply, required=True)
        return total.to_result()

    def center_scatter(self, starts: FloatArray) -> CenterScatter:
        if self._summation is None:
            return add_center_scatter(
                gather_required(self._holders, lambda p: p.center_scatter(starts))
            )
        task = msg.CenterScatterTask(
            centers=msg.WireArray.of(starts), weight_bound=self._weight_bound
        )
        total, _ = self._summation.sum(
            self._holders, task, msg.CenterScatterReply, required=True
        )
        return total.to_result()
