"""End-to-end cost of protecting the sums: the same job with no protection, masking, Paillier.

One run, one machine, three measurements:

1. ``core``: the job through the in-process simulator (``fedclust.simulate``; every
   participant computation and every secure-sum stage, no HTTP). ``--algorithm`` (exact
   federated FCM by default; fedfcm and fkm run the same server procedure under every
   protection) with a fixed number of rounds (eps = 0) on ``--rows`` rows per participant, so
   each protection does the same clustering work; then the job's FedFuzzDB and silhouette
   sums.
2. ``service``: the same job through the real coordinator, counting service and participant
   agents in one process over in-process HTTP (``fedclust.inprocess``).
3. Paillier throughput: values per second encrypted packed (``crypto.paillier``) vs one value
   per ciphertext (phe's ``encrypt(float)``), 2048-bit key.

Ratios are against no protection (1, 2) and per-value Paillier (3). Issue 4's aims: masking
within 1.2x of plaintext end to end, packed Paillier at least 10x per-value throughput.

Job times are medians [ranges] of ``--repeats`` (at least 5) runs, the three protections
interleaved (``benchmarks._timing``); Paillier throughput is one run of each encoding.

Usage: python -m benchmarks.bench_protection [--algorithm ffcm|fedfcm|fkm] [--rows 200000]
       [--rounds 5] [--repeats 5] [--service-rows 20000]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray
from phe import paillier

from benchmarks._blobs import blobs
from benchmarks._timing import Timing, interleaved
from fedclust.crypto.paillier import PaillierKeyPair, SlotSpec, encrypt_vector
from fedclust.inprocess import run_in_process
from fedclust.protocol.messages import Algorithm, JobCreate, ProtectionScheme
from fedclust.simulate import job_spec, simulate

K, D, PARTIES = 5, 8, 3
SCHEMES: tuple[ProtectionScheme, ...] = ("none", "masking", "paillier")


def seconds(run: Callable[[], object]) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def end_to_end(
    algorithm: Algorithm, rows: int, rounds: int, repeats: int, *, service: bool
) -> dict[str, Timing]:
    fed = blobs(PARTIES, rows, k=K, d=D)
    runs: dict[str, Callable[[], object]] = {}
    for scheme in SCHEMES:
        spec = job_spec(
            fed, algorithm=algorithm, ks=[K], seed=1, eps=0.0, max_rounds=rounds,
            protection=scheme,
        )

        def once(scheme: ProtectionScheme = scheme, spec: JobCreate = spec) -> object:
            if service:
                return run_in_process(fed, spec)
            return simulate(
                fed, algorithm=algorithm, ks=[K], seed=1, eps=0.0, max_rounds=rounds,
                protection=scheme,
            )

        runs[scheme] = once
    return interleaved(runs, repeats)


def paillier_throughput(values: int, baseline_values: int) -> tuple[float, float]:
    pair = PaillierKeyPair.generate(2048)
    rng = np.random.default_rng(0)
    x: NDArray[np.float64] = rng.uniform(-1000, 1000, size=values)
    spec = SlotSpec("bench", scale_bits=24, bound=1000.0, max_parties=PARTIES)
    packed = values / seconds(lambda: encrypt_vector(pair.public_key, x, spec))
    key: paillier.PaillierPublicKey = pair.public_key
    per_value = baseline_values / seconds(
        lambda: [key.encrypt(float(v), precision=2**-24) for v in x[:baseline_values]]
    )
    return packed, per_value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=200_000, help="rows per participant (core)")
    parser.add_argument("--service-rows", type=int, default=20_000,
                        help="rows per participant (service)")
    parser.add_argument("--algorithm", choices=("ffcm", "fedfcm", "fkm"), default="ffcm")
    parser.add_argument("--rounds", type=int, default=5, help="rounds (eps = 0)")
    parser.add_argument("--repeats", type=int, default=5, help="runs per time (median, >= 5)")
    args = parser.parse_args()

    print(
        f"{args.algorithm}, {PARTIES} participants, D={D}, K={K}, {args.rounds} rounds (eps=0)"
    )
    for label, rows, service in (
        ("core (in-process simulator)", args.rows, False),
        ("service (apps + agents, in-process HTTP)", args.service_rows, True),
    ):
        times = end_to_end(args.algorithm, rows, args.rounds, args.repeats, service=service)
        print(f"\n{label}, {rows} rows per participant")
        print(f"  {'protection':<10} {'seconds: median [range]':>26} {'ratio':>7}")
        for scheme, timing in times.items():
            ratio = timing.median / times["none"].median
            print(f"  {scheme:<10} {timing.text(digits=2):>26} {ratio:6.2f}x")

    packed, per_value = paillier_throughput(3000, 100)
    print("\nPaillier encryption, 2048-bit key, values per second")
    print(f"  packed     {packed:9.0f}")
    print(f"  per-value  {per_value:9.0f}")
    print(f"  ratio      {packed / per_value:8.1f}x  (aim >= 10x)")


if __name__ == "__main__":
    main()
