"""Time ONE local fuzzy c-means iteration: fedclust vs scikit-fuzzy vs fuzzy-c-means.

One iteration = memberships of every row to the current centers + the center update (and,
for us, the Frobenius norm of the membership change). Gaussian rows, D=16, K=10, m=2, N in
``--sizes``. Variants: ours (``protocol.maths.fcm._fcm_step``), the memory-bandwidth floor,
the two BLAS products alone, ours with sums only, numpy passes, scikit-fuzzy's and
fuzzy-c-means' loop bodies. Warmed up once, then interleaved ``--repeats`` times; medians and
ranges, ratios theirs / ours (> 1: we are faster). ``OPENBLAS_CORETYPE`` is left as found and
printed.

Set-up: pip install -e ".[bench]" && pip install --no-deps fuzzy-c-means

Usage: python benchmarks/bench_local_fcm.py [--sizes 100000 1000000] [--repeats 5]

Design notes: ``docs/benchmarks.md`` (§ One local FCM iteration: what each variant times).
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from functools import partial

import numpy as np

from fedclust.core.validation import FloatArray
from fedclust.protocol.maths._fuzzy import weighted_sums
from fedclust.protocol.maths.fcm import _fcm_step, fcm_memberships
from fedclust.protocol.maths.rows import BLOCK_ROWS, as_rows, blas_threads

D, K, M = 16, 10, 2.0
Step = Callable[[], object]


def _time(step: Step) -> float:
    start = time.perf_counter()
    step()
    return time.perf_counter() - start


def _interleaved(steps: dict[str, Step], repeats: int) -> dict[str, list[float]]:
    """Seconds of each step, run in turn ``repeats`` times after one warm-up each."""
    for step in steps.values():
        step()  # warm-up (allocations, BLAS thread start)
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(repeats):
        for name, step in steps.items():
            times[name].append(_time(step))
    return times


def _summary(seconds: list[float]) -> str:
    ms = np.asarray(seconds) * 1e3
    return f"{np.median(ms):8.1f} ms  [{ms.min():.1f}, {ms.max():.1f}]"


def _ours(X: FloatArray, C: FloatArray) -> Step:
    rows = as_rows(X)  # once per job: checks and squared norms
    U = np.ascontiguousarray(fcm_memberships(rows, C, m=M).T)  # previous memberships (K, N)
    return lambda: _fcm_step(rows, C, M, U, measure=True)


def _skfuzzy(X: FloatArray, C: FloatArray) -> Step:
    from skfuzzy.cluster._cmeans import _cmeans0

    data = np.ascontiguousarray(X.T)  # scikit-fuzzy wants (features, samples)
    state = {"u": fcm_memberships(X, C, m=M).T.copy()}

    def step() -> float:  # the body of cmeans' while loop
        u2 = state["u"].copy()
        _, state["u"], _, _ = _cmeans0(data, u2, K, M, "euclidean")
        return float(np.linalg.norm(state["u"] - u2))

    return step


def _fcmeans(X: FloatArray, C: FloatArray) -> Callable[[], object]:
    from fcmeans import FCM

    model = FCM(n_clusters=K, m=M, max_iter=1)
    model.u = fcm_memberships(X, C, m=M)

    def step() -> float:  # the body of FCM._fit_once's loop
        u_old = model.u.copy()
        model._update_centers(X)
        model._update_u(X)
        return float(np.linalg.norm(model.u - u_old))

    return step


def _products(X: FloatArray, C: FloatArray) -> Step:
    rows = as_rows(X)
    minus_2c = -2.0 * C
    d = np.empty((K, BLOCK_ROWS))
    ws = np.empty((K, D))

    def step() -> None:
        with blas_threads(1):
            for xb, _ in rows:
                out = d[:, : xb.shape[0]]
                np.matmul(minus_2c, xb.T, out=out)
                np.matmul(out, xb, out=ws)

    return step


def _numpy_passes(X: FloatArray, C: FloatArray) -> Step:
    """Our block step with each element-wise operation a numpy pass (the kernel before the
    compiled passes of ``protocol.maths._fcm_kernels``): the gain of fusing them."""
    rows = as_rows(X)
    U = np.ascontiguousarray(fcm_memberships(rows, C, m=M).T)
    minus_2c, sq = -2.0 * C, np.einsum("ij,ij->i", C, C)
    tiny = np.finfo(np.float64).tiny

    def step() -> float:
        u_sum, ws, change2 = np.zeros(K), np.zeros((K, D)), 0.0
        with blas_threads(1):
            for start, (xb, nb) in zip(range(0, rows.n_rows, BLOCK_ROWS), rows, strict=True):
                d = minus_2c @ xb.T
                d += nb
                d += sq[:, None]
                np.maximum(d, tiny, out=d)
                np.reciprocal(d, out=d)  # m = 2
                d *= 1.0 / (np.ones(K) @ d)
                Ub = U[:, start : start + xb.shape[0]]
                diff = (Ub - d).ravel()
                change2 += float(diff @ diff)
                np.copyto(Ub, d)
                d *= d
                u_sum += d @ np.ones(d.shape[1])
                ws += d @ xb
        return change2

    return step


COMPETITORS: dict[str, Callable[[FloatArray, FloatArray], Callable[[], object]]] = {
    "numpy passes": _numpy_passes,
    "scikit-fuzzy": _skfuzzy,
    "fuzzy-c-means": _fcmeans,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--budget", type=float, default=30.0, help="max seconds per iteration")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-competitors", action="store_true", help="ours and the floor only")
    args = parser.parse_args()
    if args.repeats < 5:
        parser.error("--repeats must be at least 5")

    print(f"numpy {np.__version__}; OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE')!r}; "
          f"cpus={os.cpu_count()}; D={D}, K={K}, m={M}; {args.repeats} interleaved runs, "
          "median [min, max]")
    rng = np.random.default_rng(args.seed)
    skipped: dict[str, str] = {}
    for n in args.sizes:
        X = rng.standard_normal((n, D))
        C = X[rng.choice(n, size=K, replace=False)].copy()
        steps: dict[str, Step] = {
            "ours": _ours(X, C),
            "ours: sums only": partial(weighted_sums, as_rows(X), C, M),
            "floor: X.max()": partial(np.max, X),
            "floor: X.copy()": X.copy,
            "products": _products(X, C),
        }
        for name, make in ({} if args.no_competitors else COMPETITORS).items():
            if name in skipped:
                continue
            try:
                steps[name] = make(X, C)
            except ImportError as exc:
                skipped[name] = f"not installed: {exc}"
        try:
            times = _interleaved(steps, args.repeats)
        except MemoryError:
            print(f"N={n:,d}: out of memory; stopping")
            return
        ours = float(np.median(times["ours"]))
        print(f"\nN={n:>9,d}")
        for name, seconds in times.items():
            median = float(np.median(seconds))
            if name == "ours":
                note = ""
            elif name == "ours: sums only":
                read = float(np.median(times["floor: X.max()"]))
                note = f"sums/read floor {median / read:5.2f}x"
            elif name.startswith(("floor", "products")):
                note = f"ours/{name.split(':')[0]} {ours / median:5.2f}x"
            else:
                note = f"theirs/ours {median / ours:5.2f}x"
                if median > args.budget:
                    skipped[name] = f"over the {args.budget:g} s budget at N={n:,d}"
            print(f"  {name:<22} {_summary(seconds)}  {note}")
        for name, why in skipped.items():
            print(f"  {name:<22} skipped ({why})")


if __name__ == "__main__":
    main()
