"""End-to-end cost of protecting the sums: the same job with no protection, masking, Paillier.

Measures (1) ``core``: the job through the in-process simulator, fixed rounds (eps = 0) on
``--rows`` rows per participant; (2) ``service``: the same job through the real services in
process (``fedclust.inprocess``); (3) Paillier throughput, packed vs one value per
ciphertext (2048-bit key); (4) wider sums: the job in small units (one 64-bit word) and
times 2^40 (two words), then one masked sum of ``--sum-values`` values in 1, 2 and 3 words.
Aims: masking within 1.2x of plaintext, packed Paillier >= 10x per-value throughput, wider
sums within 1.3x of one word. Job times are medians [ranges] of ``--repeats`` (>= 5)
interleaved runs (``benchmarks._timing``).

Usage: python -m benchmarks.bench_protection [--algorithm ffcm|fedfcm|fkm] [--rows 200000]
       [--rounds 5] [--repeats 5] [--service-rows 20000] [--wide-rows 200000]
       [--sum-values 100000] [--only-wide]

Design notes: ``docs/benchmarks.md`` (§ The cost of protecting the sums).
"""

from __future__ import annotations

import argparse
import functools
import time
from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray
from phe import paillier

from benchmarks._blobs import blobs
from benchmarks._timing import Timing, interleaved
from fedclust.coordinator.secure_sum import field_encodings
from fedclust.crypto.fixedpoint import Statistic, decode, encode
from fedclust.crypto.masking import IdentityKey, JobConfig, MaskingClient, MaskingServer
from fedclust.crypto.paillier import PaillierKeyPair, SlotSpec, encrypt_vector
from fedclust.data.federations import Federation
from fedclust.inprocess import run_in_process
from fedclust.protocol.maths.declaration import row_bucket
from fedclust.protocol.wire.messages import (
    Algorithm,
    JobCreate,
    ProtectionScheme,
    StatisticTask,
)
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


def wide_jobs(
    algorithm: Algorithm, rows: int, rounds: int, repeats: int
) -> dict[str, Timing]:
    """The same job in small units and times 2^40, under every protection, interleaved."""
    fed = blobs(PARTIES, rows, k=K, d=D)
    small = Federation(name=f"{fed.name}/16", parts=tuple(p / 16 for p in fed.parts))
    scaled = Federation(name=f"{fed.name}x2^40", parts=tuple(p * 2.0**40 for p in fed.parts))
    runs: dict[str, Callable[[], object]] = {}
    for units, fed in (("small", small), ("natural", scaled)):
        for scheme in SCHEMES:
            def once(fed: Federation = fed, scheme: ProtectionScheme = scheme) -> object:
                return simulate(
                    fed, algorithm=algorithm, ks=[K], seed=1, eps=0.0, max_rounds=rounds,
                    protection=scheme,
                )

            runs[f"{units} {scheme}"] = once
    return interleaved(runs, repeats)


def fcm_words(rows: int, value_bound: float) -> dict[str, int]:
    """The words of a round's FCM sums for the job's declared bounds (powers of two)."""
    encoding = field_encodings(
        StatisticTask.of("fcm_sums", np.zeros((K, D)), m=2.0), n_features=D,
        n_parties=PARTIES, max_rows=row_bucket(rows), value_bound=value_bound,
    )
    return {e.name: e.words for e in encoding}


def one_sum(values: int, repeats: int) -> dict[int, Timing]:
    """One masked sum of ``values`` values among 3 parties, per ring width in words."""
    names = tuple(f"org-{i}" for i in range(PARTIES))
    keys = {p: IdentityKey.generate() for p in names}
    public = {p: k.public_bytes() for p, k in keys.items()}
    rng = np.random.default_rng(0)
    data = {p: rng.uniform(-1e3, 1e3, size=values) for p in names}
    config = JobConfig("bench", names, None, 2)
    clients = {p: MaskingClient(config, p, keys[p], public) for p in names}
    server = MaskingServer(config, public)
    listed = server.receive_adverts([c.advertise() for c in clients.values()])
    for c in clients.values():
        c.receive_adverts(listed)
    rounds = iter(range(1, 10_000))

    def secure_sum(words: int) -> None:
        stat = Statistic("x", 40, 1e3, words)
        r = next(rounds)
        rnd = server.begin(r, names, {"x": words})
        for p in names:
            encoded = {"x": encode(stat, data[p])}
            rnd.receive_masked_input(clients[p].masked_input(r, names, encoded, {"x": words}))
        request, inboxes = rnd.unmask_request()
        for p in names:
            rnd.receive_unmask_response(clients[p].unmask(request, inboxes[p]))
        decode(stat, rnd.aggregate()["x"], PARTIES)

    runs: dict[str, Callable[[], object]] = {
        str(w): functools.partial(secure_sum, w) for w in (1, 2, 3)
    }
    return {int(w): t for w, t in interleaved(runs, repeats).items()}


def print_wide(algorithm: Algorithm, rows: int, rounds: int, repeats: int, values: int) -> None:
    print(f"\nwider sums: {algorithm}, {rows} rows per participant, {rounds} rounds (eps=0)")
    for units, bound in (("small", 1.0), ("natural", 2.0**44)):
        words = ", ".join(f"{k} {w}" for k, w in fcm_words(rows, bound).items())
        print(f"  {units:<8} units (value bound {bound:.3g}): words per round: {words}")
    times = wide_jobs(algorithm, rows, rounds, repeats)
    print(f"  {'job':<17} {'seconds: median [range]':>26} {'vs none':>8} {'vs small':>9}")
    for name, timing in times.items():
        units, scheme = name.split()
        vs_none = timing.median / times[f"{units} none"].median
        vs_small = timing.median / times[f"small {scheme}"].median
        print(f"  {name:<17} {timing.text(digits=2):>26} {vs_none:7.2f}x {vs_small:8.2f}x")
    sums = one_sum(values, repeats)
    print(f"\none masked sum of {values} values, {PARTIES} parties")
    print(f"  {'words':<6} {'ms: median [range]':>24} {'vs 1 word':>10}")
    for w, timing in sums.items():
        print(f"  {w:<6} {timing.text(unit=1e-3, digits=1):>24} "
              f"{timing.median / sums[1].median:9.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=200_000, help="rows per participant (core)")
    parser.add_argument("--service-rows", type=int, default=20_000,
                        help="rows per participant (service)")
    parser.add_argument("--algorithm", choices=("ffcm", "fedfcm", "fkm"), default="ffcm")
    parser.add_argument("--rounds", type=int, default=5, help="rounds (eps = 0)")
    parser.add_argument("--repeats", type=int, default=5, help="runs per time (median, >= 5)")
    parser.add_argument("--wide-rows", type=int, default=200_000,
                        help="rows per participant of the wider-sums jobs")
    parser.add_argument("--sum-values", type=int, default=100_000,
                        help="values of the single masked sum")
    parser.add_argument("--only-wide", action="store_true",
                        help="measure the wider sums (4) only")
    args = parser.parse_args()
    if args.only_wide:
        print_wide(args.algorithm, args.wide_rows, args.rounds, args.repeats, args.sum_values)
        return

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
    print_wide(args.algorithm, args.wide_rows, args.rounds, args.repeats, args.sum_values)


if __name__ == "__main__":
    main()
