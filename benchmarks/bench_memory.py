"""Peak memory of a participant's statistics, per data size: peak RSS / data size.

Each measurement runs in its own subprocess (a clean peak: ``ru_maxrss``). The subprocess
imports everything, notes its RSS (the baseline), builds the data, runs the workload, and
reports its peak RSS. Printed: the data size (N x 16 float64), the extra peak over the
baseline in units of the data size (target: <= 2 + a constant), and the wall time.

Workloads (D = 16, K = 10, m = 2):

- ``participant``: a :class:`participant.local.LocalParticipant` on N in-memory rows answers
  a job's tasks: moments, 3 exact FCM sums, FedFuzzDB sums, silhouette sums, a federated
  k-means step and a local FCM (FedFCM, 3 iterations; its (K, N) membership buffer is
  K/D = 0.625 of the data).
- ``parquet-stream``: the same sums (moments, FCM sums, FedFuzzDB, silhouette) read from a
  Parquet file chunk by chunk (``fedclust.data.stream.parquet_rows``, default 256 MiB budget):
  the rows are never in memory whole, so the extra peak stays near the chunk size (and a
  row group: Parquet decodes whole row groups; the file here has 32 MiB ones).
- ``load-csv`` / ``np.loadtxt`` (N = 10^6 only, ``--repeats`` interleaved runs, median
  and range): :func:`fedclust.data.loaders.load_dataset` against numpy's ``loadtxt``.

Usage: python benchmarks/bench_memory.py [--sizes 1000000] [--large] [--repeats 5]
(``--large`` adds N = 10^7, 1.28 GB of data; a few minutes.)
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

D, K = 16, 10
MiB = 2**20


def _rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def _data(n: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    return rng.standard_normal((n, D))


def _centers() -> np.ndarray:
    return np.random.default_rng(1).standard_normal((K, D))


def _participant(n: int, _path: Path) -> None:
    from fedclust.participant.local import LocalParticipant

    X = _data(n)
    C = _centers()
    p = LocalParticipant(X, name="bench")
    p.statistic("moment_sums", np.zeros((1, D)))
    for _ in range(3):
        p.statistic("fcm_sums", C, {"m": 2.0})
    p.statistic("fuzzy_db_sums", C, {"m": 2.0, "q": 1.0})
    p.statistic("silhouette_sums", C)
    p.hold_kmeans_step(C)
    p.local_fcm(C, m=2.0, tol=0.0, max_iter=3)


def _write_parquet(n: int, path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    X = _data(n)
    table = pa.table({f"f{j}": X[:, j] for j in range(D)})
    pq.write_table(table, path, row_group_size=1 << 18)  # 32 MiB row groups


def _parquet_stream(_: int, path: Path) -> None:
    from fedclust.data.stream import parquet_rows
    from fedclust.protocol.maths import exact_fcm, standardise, validity

    rows = parquet_rows(path)
    C = _centers()
    standardise.participant_moments(rows)
    exact_fcm.participant_sums(rows, C, m=2.0)
    validity.participant_fuzzy_db_sums(rows, C, m=2.0, q=1.0)
    validity.participant_silhouette_sums(rows, C)


def _write_csv(n: int, path: Path) -> None:
    np.savetxt(path, _data(n), delimiter=",", fmt="%.17g",
               header=",".join(f"f{j}" for j in range(D)), comments="")


def _load_csv(_: int, path: Path) -> None:
    from fedclust.data.loaders import load_dataset

    load_dataset(path)


def _loadtxt(_: int, path: Path) -> None:
    np.loadtxt(path, delimiter=",", skiprows=1)


WORKLOADS = {
    "participant": _participant,
    "write-parquet": _write_parquet,
    "parquet-stream": _parquet_stream,
    "write-csv": _write_csv,
    "load-csv": _load_csv,
    "np.loadtxt": _loadtxt,
}


def _child(name: str, n: int, path: str) -> None:
    # Imported first, so that they count in the baseline.
    import fedclust.data.loaders
    import fedclust.data.stream
    import fedclust.participant.local  # noqa: F401

    baseline = _rss_bytes()
    start = time.perf_counter()
    WORKLOADS[name](n, Path(path))
    seconds = time.perf_counter() - start
    print(json.dumps({"baseline": baseline, "peak": _rss_bytes(), "seconds": seconds}))


def _run(name: str, n: int, path: Path) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", name, str(n), str(path)],
        check=True, capture_output=True, text=True,
    )
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def _line(label: str, n: int, r: dict[str, float]) -> str:
    data = n * D * 8
    extra = (r["peak"] - r["baseline"]) / data
    return (f"  {label:<16} data {data / MiB:8.0f} MiB   peak {r['peak'] / MiB:8.0f} MiB   "
            f"(peak - baseline) / data {extra:5.2f}   {r['seconds']:7.2f} s")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _child(sys.argv[2], int(sys.argv[3]), sys.argv[4])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000_000])
    parser.add_argument("--large", action="store_true", help="add N = 10^7")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if args.repeats < 5:
        parser.error("--repeats must be at least 5")
    sizes = list(args.sizes) + ([10_000_000] if args.large else [])
    print(f"numpy {np.__version__}; D={D}, K={K}; one subprocess per measurement")
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            print(f"\nN={n:,d}")
            print(_line("participant", n, _run("participant", n, Path(tmp) / "none")))
            parquet = Path(tmp) / f"{n}.parquet"
            _run("write-parquet", n, parquet)
            print(_line("parquet-stream", n, _run("parquet-stream", n, parquet)))
            parquet.unlink()
        n = 1_000_000
        csv = Path(tmp) / "rows.csv"
        _run("write-csv", n, csv)
        runs: dict[str, list[dict[str, float]]] = {"load-csv": [], "np.loadtxt": []}
        for _ in range(args.repeats):  # interleaved
            for name in runs:
                runs[name].append(_run(name, n, csv))
        print(f"\nloading a CSV of N={n:,d} rows ({csv.stat().st_size / MiB:.0f} MiB), "
              f"{args.repeats} interleaved runs: median [min, max]")
        for name, rs in runs.items():
            secs = np.array([r["seconds"] for r in rs])
            extra = np.array([(r["peak"] - r["baseline"]) / (n * D * 8) for r in rs])
            print(f"  {name:<12} {np.median(secs):6.2f} s [{secs.min():.2f}, {secs.max():.2f}]"
                  f"   (peak - baseline) / data {np.median(extra):5.2f} "
                  f"[{extra.min():.2f}, {extra.max():.2f}]")


if __name__ == "__main__":
    main()
