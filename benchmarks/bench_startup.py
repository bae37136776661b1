"""Start-up of the ``fedclust`` command against ``python -c "import pandas"``, in the same run.

Times, each in a fresh process: ``fedclust --version``, ``fedclust --help``, ``fedclust
simulate --help``, ``fedclust job submit --help`` (its flags come from the wire models) and
``fedclust federation --help`` (each to its exit), and a small ``fedclust simulate``
(motivational example, fkm, K = 2) to its first line on stderr (``starting: ...``) and to its
first sweep line (``clustering  K=2``: the modules imported and the data loaded), then
stopped. Aims: --version and --help within 0.3 s, the command groups' --help within 0.5 s,
the first line within 1 s. Medians [ranges] of ``--repeats`` (>= 5)
interleaved runs (``benchmarks._timing``), and each median over the pandas import's.

Usage: python -m benchmarks.bench_startup [--repeats 5]

Design notes: ``docs/benchmarks.md`` (§ Start-up of the command line).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks._timing import Timing, interleaved

SIMULATE = ("simulate", "--dataset", "motivational", "--algorithm", "fkm", "--k", "2",
            "--seed", "1", "--protection", "none")
FIRST_SWEEP_LINE = "progress: clustering"
AIMS = {"fedclust --version": 0.3, "fedclust --help": 0.3, "fedclust job submit --help": 0.5,
        "fedclust federation --help": 0.5, "simulate: first line": 1.0}


def fedclust_command() -> list[str]:
    """The console script beside this interpreter (what a user runs), else ``-m fedclust``."""
    script = Path(sys.executable).with_name("fedclust")
    found = script if script.exists() else shutil.which("fedclust")
    return [str(found)] if found else [sys.executable, "-m", "fedclust"]


def to_exit(argv: list[str]) -> Callable[[], object]:
    def run() -> None:
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)

    return run


class FirstLines:
    """A ``fedclust simulate`` run timed to its first sweep line; the seconds to its first
    line kept beside (``first``). Each run is killed once timed and reaped later."""

    def __init__(self, argv: list[str]) -> None:
        self.argv = argv
        self.first: list[float] = []
        self._stopped: list[subprocess.Popen[str]] = []

    def __call__(self) -> None:
        start = time.perf_counter()
        proc = subprocess.Popen(self.argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True)
        assert proc.stderr is not None
        lines = iter(proc.stderr)
        first = next(lines, "")
        self.first.append(time.perf_counter() - start)
        if "progress: starting: " not in first:
            proc.kill()
            raise RuntimeError(f"the first line is not a starting line: {first!r}")
        for line in lines:
            if FIRST_SWEEP_LINE in line:
                break
        proc.kill()
        self._stopped.append(proc)

    def reap(self) -> None:
        for proc in self._stopped:
            proc.wait()
            if proc.stderr is not None:
                proc.stderr.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="interleaved runs (>= 5)")
    args = parser.parse_args()
    cli = fedclust_command()
    simulate = FirstLines([*cli, *SIMULATE])
    runs: dict[str, Callable[[], object]] = {
        'python -c "import pandas"': to_exit([sys.executable, "-c", "import pandas"]),
        "fedclust --version": to_exit([*cli, "--version"]),
        "fedclust --help": to_exit([*cli, "--help"]),
        "fedclust simulate --help": to_exit([*cli, "simulate", "--help"]),
        "fedclust job submit --help": to_exit([*cli, "job", "submit", "--help"]),
        "fedclust federation --help": to_exit([*cli, "federation", "--help"]),
        "simulate: first sweep line": simulate,
    }
    try:
        timings = interleaved(runs, args.repeats)
    finally:
        simulate.reap()
    sweep = timings.pop("simulate: first sweep line")  # listed after the first line
    timings |= {"simulate: first line": Timing(tuple(simulate.first)),
                "simulate: first sweep line": sweep}
    pandas = timings['python -c "import pandas"'].median
    print(f"command: {' '.join(cli)}; simulate run: {' '.join(SIMULATE)}")
    print(f"{'':30} {'seconds: median [range]':>26} {'/ pandas':>9}  aim")
    for name, t in timings.items():
        aim = AIMS.get(name)
        verdict = "" if aim is None else (
            f"<= {aim:g} s " + ("met" if t.median <= aim else "NOT met")
        )
        print(f"{name:30} {t.text():>26} {t.median / pandas:9.2f}  {verdict}")


if __name__ == "__main__":
    main()
