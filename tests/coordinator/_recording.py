"""A summation that records what the drivers hand it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from fedclust.coordinator.secure_sum import PlainSummation
from fedclust.protocol.wire import messages as msg

R = TypeVar("R")


class RecordingSummation(PlainSummation):
    """Sums in the clear (:class:`PlainSummation`) and records each sum in :attr:`sums`: its
    participants' names, its statistic and whether every participant had to take part."""

    def __init__(self) -> None:
        super().__init__()
        self.sums: list[tuple[tuple[str, ...], msg.SumTaskSpec, bool]] = []

    def sum(
        self, participants: Sequence[Any], statistic: msg.SumTaskSpec, reply_type: type[R],
        *, required: bool = False,
    ) -> tuple[R, tuple[str, ...]]:
        self.sums.append((tuple(p.name for p in participants), statistic, required))
        return super().sum(participants, statistic, reply_type, required=required)
