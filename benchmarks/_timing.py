"""Timing for the benchmarks: compared runs interleaved, repeated, reported as median and range.

Interleaving (A, B, A, B, …) spreads a machine's slow moments over every variant instead of
one; the median of at least 5 runs with its range shows how far a ratio can be trusted.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

__all__ = ["MIN_REPEATS", "Timing", "interleaved"]

MIN_REPEATS = 5


@dataclass(frozen=True)
class Timing:
    """Seconds of one variant over its repeats."""

    samples: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def low(self) -> float:
        return min(self.samples)

    @property
    def high(self) -> float:
        return max(self.samples)

    def text(self, unit: float = 1.0, digits: int = 3) -> str:
        """``median [low–high]`` in ``unit`` seconds."""
        return (
            f"{self.median / unit:.{digits}f} "
            f"[{self.low / unit:.{digits}f}–{self.high / unit:.{digits}f}]"
        )


def interleaved(runs: Mapping[str, Callable[[], object]], repeats: int) -> dict[str, Timing]:
    """Time every run ``repeats`` times (at least :data:`MIN_REPEATS`), interleaved."""
    repeats = max(repeats, MIN_REPEATS)
    samples: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            start = time.perf_counter()
            run()
            samples[name].append(time.perf_counter() - start)
    return {name: Timing(tuple(values)) for name, values in samples.items()}
