"""How the cost of a protected job grows with the number of participants (issue 10).

For every P in ``--participants``: the same job (``--algorithms``, K = 5, D = 16,
``--rows`` rows per participant, a fixed number of rounds) in the in-process simulator with
protection ``none`` and ``masking`` (SecAgg+, ``crypto.masking``), interleaved and repeated
``--repeats`` times (at least 5). Printed per P: the median job time [range] of both, their
ratio, the job's key setup (once per job: every participant checks every advert, O(P) each),
the number of secure sums, the extra time per secure sum besides the setup
((masked − plain − setup) / sums) and that per participant, with the graph's degree k.
Last, the growth exponents: the slope of log(extra per sum) against log(P) (1 means linear
in P, i.e. constant work per participant; the full mesh of Bonawitz et al. gives 2) and the
slope of the per-participant cost.

Issue 10's targets on this 2-core machine: a 1000-participant masked job completes;
masked/plain <= 1.5x at P = 100 and <= 1.2x at P = 30 with 10^5 rows per participant
(``--rows 100000 --participants 30,100``); per-participant cost O(log P).

Usage: python -m benchmarks.bench_scale [--participants 10,30,100,300,1000] [--rows 1000]
       [--algorithms ffcm,fedfcm] [--rounds 3] [--repeats 5] [--graph auto|full]
"""

from __future__ import annotations

import argparse
import math
from typing import Literal, cast

import numpy as np

from benchmarks._blobs import blobs
from benchmarks._timing import interleaved
from fedclust.coordinator.job import run_job
from fedclust.coordinator.secure_sum import MaskedSummation
from fedclust.data.federations import Federation
from fedclust.participant.local import LocalParticipant
from fedclust.protocol.wire.messages import Algorithm, ProtectionScheme
from fedclust.simulate import CountingService, _protected, job_spec

K, D = 5, 16


class Job:
    """One job, runnable again and again; remembers the secure sums of its runs and the
    time their key setups took."""

    def __init__(
        self, fed: Federation, algorithm: Algorithm, rounds: int, protection: ProtectionScheme,
        graph: Literal["auto", "full"],
    ) -> None:
        self.spec = job_spec(
            fed, algorithm=algorithm, ks=[K], seed=1, eps=0.0, max_rounds=rounds,
            protection=protection, masking_graph=graph,
        )
        self.fed = fed
        self.sums = 0
        self.degree: int | None = None
        self.setup_seconds: list[float] = []

    def __call__(self) -> None:
        counter = CountingService(self.spec.participants, min_participants=3)
        participants = [
            LocalParticipant(X, name=name, count_sink=counter.report)
            for name, X in zip(self.spec.participants, self.fed.parts, strict=True)
        ]
        members, summation = _protected(self.spec, participants)
        run_job(members, self.spec, total_count=counter.total, summation=summation)
        if isinstance(summation, MaskedSummation):
            self.sums = summation.rounds
            self.setup_seconds.append(summation.setup_seconds)
            params = summation.parameters
            self.degree = None if params is None else params.neighbours


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of log(y) against log(x)."""
    return float(np.polyfit(np.log(xs), np.log(ys), 1)[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--participants", default="10,30,100,300,1000")
    parser.add_argument("--rows", type=int, default=1000, help="rows per participant")
    parser.add_argument("--algorithms", default="ffcm,fedfcm")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (eps = 0)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--graph", choices=("auto", "full"), default="auto")
    args = parser.parse_args()
    sizes = [int(p) for p in args.participants.split(",")]
    algorithms = [cast(Algorithm, a) for a in args.algorithms.split(",")]

    for algorithm in algorithms:
        print(
            f"\n{algorithm}: K={K}, D={D}, {args.rows} rows per participant, "
            f"{args.rounds} rounds (eps=0), graph {args.graph}; median [range] of "
            f"{max(args.repeats, 5)} interleaved runs"
        )
        print(
            f"  {'P':>5} {'k':>4} {'plain s':>22} {'masked s':>22} {'ratio':>6} "
            f"{'setup s':>8} {'sums':>5} {'extra/sum ms':>13} {'per participant µs':>19}"
        )
        extra_per_sum: list[float] = []
        for n in sizes:
            fed = blobs(n, args.rows, k=K, d=D)
            plain = Job(fed, algorithm, args.rounds, "none", args.graph)
            masked = Job(fed, algorithm, args.rounds, "masking", args.graph)
            times = interleaved({"none": plain, "masking": masked}, args.repeats)
            t_plain, t_masked = times["none"].median, times["masking"].median
            setup = float(np.median(masked.setup_seconds))
            extra = max(t_masked - t_plain - setup, 1e-9) / max(masked.sums, 1)
            extra_per_sum.append(extra)
            print(
                f"  {n:5d} {masked.degree or 0:4d} {times['none'].text(digits=3):>22} "
                f"{times['masking'].text(digits=3):>22} {t_masked / t_plain:5.2f}x "
                f"{setup:8.2f} {masked.sums:5d} {extra * 1e3:13.1f} {extra / n * 1e6:19.0f}"
            )
        if len(sizes) >= 2:
            total = slope([float(n) for n in sizes], extra_per_sum)
            per = slope([float(n) for n in sizes], [e / n for e, n in zip(extra_per_sum, sizes,
                                                                           strict=True)])
            print(
                f"  growth of the extra time per secure sum: P^{total:.2f}; per participant "
                f"P^{per:.2f} (O(log P) work per participant shows as an exponent near 0; "
                f"log2 P grows {math.log2(sizes[-1]) / math.log2(sizes[0]):.1f}x over the range)"
            )


if __name__ == "__main__":
    main()
