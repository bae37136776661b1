"""Clustered federated distillation on MNIST (Yang & Tae 2023, Tables 3, 5 and 6), scaled down.

Per configuration GxC: G groups of 5 clients, each group a random set of C digit classes, 50
training images per class per client, a public set of 500 images; the strided CNN of
``participant.deep.classifier``; ``--epochs`` distillation epochs (paper 50). Prints per
configuration the Table 3 shape (groups found vs true, grouping ARI), Table 5 (accuracy per
true group: clustered / global / local-only) and Table 6 (overall accuracy).

Usage: python benchmarks/bench_fed_distill_mnist.py [--configs 2x5,5x2,10x2] [--epochs 50]

Design notes: ``docs/fed-distill.md`` (§ The MNIST benchmark: set-up, run times).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass

import numpy as np

from fedclust.coordinator.distillation import FedDistillResult, run_fed_distill
from fedclust.deep_simulate import DeepData, distill_federation, load_dataset
from fedclust.protocol.maths.distillation import grouping_ari

CLIENTS_PER_GROUP = 5
PER_CLASS = 50
PUBLIC_PER_CLASS = 50


def load() -> DeepData:
    try:
        return load_dataset("mnist")
    except FileNotFoundError as exc:
        sys.exit(f"{exc}; skipping.")


@dataclass(frozen=True)
class Row:
    """One configuration's measurements."""

    config: str
    sets: list[tuple[int, ...]]
    found: int
    ari: float
    clustered: list[float]
    global_: list[float]
    local: list[float]
    overall: dict[str, float]
    unprotected: int
    seconds: dict[str, float]


def run_config(
    n_groups: int, n_classes: int, *, seed: int, epochs: int, test_per_class: int
) -> Row:
    fed = distill_federation(
        load(), groups=n_groups, clients_per_group=CLIENTS_PER_GROUP,
        classes_per_group=n_classes, samples_per_class=PER_CLASS,
        public_per_class=PUBLIC_PER_CLASS, test_per_class=test_per_class, kind="cnn", seed=seed,
    )
    participants, truth, sets = fed.participants, fed.truth, fed.sets
    results: dict[str, FedDistillResult] = {}
    seconds: dict[str, float] = {}
    for mode in ("clustered", "global"):
        t0 = time.perf_counter()
        results[mode] = run_fed_distill(
            participants, fed.public, mode=mode, seed=seed, epochs=epochs,
            evaluate=fed.evaluate,
        )
        seconds[mode] = time.perf_counter() - t0
    names = [p.name for p in participants]
    found = results["clustered"].group_labels(names)
    truth_arr = np.array(truth)

    per_true_group = fed.per_true_group

    local = results["clustered"].accuracy_before
    return Row(
        config=f"{n_groups}x{n_classes}",
        sets=sets,
        found=len(results["clustered"].groups),
        ari=grouping_ari(truth_arr, found),
        clustered=per_true_group(results["clustered"].accuracy),
        global_=per_true_group(results["global"].accuracy),
        local=per_true_group(local),
        overall={
            "clustered": float(results["clustered"].overall_accuracy or 0.0),
            "global": float(results["global"].overall_accuracy or 0.0),
            "local": float(np.mean([a for _, a in local])),
        },
        unprotected=len(results["clustered"].unprotected_groups),
        seconds=seconds,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--configs", default="2x5,5x2,10x2",
                        help="comma-separated GROUPSxCLASSES (default 2x5,5x2,10x2)")
    parser.add_argument("--epochs", type=int, default=50, help="distillation epochs (paper 50)")
    parser.add_argument("--test-per-class", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rows = []
    for item in args.configs.split(","):
        g, c = (int(v) for v in item.lower().split("x"))
        row = run_config(g, c, seed=args.seed, epochs=args.epochs,
                         test_per_class=args.test_per_class)
        rows.append(row)
        secs = row.seconds
        print(f"[{row.config}] class sets {row.sets}  "
              f"({secs['clustered']:.0f} s clustered, {secs['global']:.0f} s global)", flush=True)

    print("\nTable 3 shape: grouping (5 clients per group, 50 images per class per client)")
    print(f"{'groups x classes':>16} {'groups found':>12} {'ARI':>6} {'groups < 3':>10}")
    for row in rows:
        print(f"{row.config:>16} {row.found:>12} {row.ari:>6.3f} {row.unprotected:>10}")

    print("\nTable 5 shape: accuracy per true group (mean over its 5 clients)")
    print(f"{'groups x classes':>16} {'group':>5} {'clustered':>9} {'global':>7} {'local':>6}")
    for row in rows:
        accs = zip(row.clustered, row.global_, row.local, strict=True)
        for group, (a_clu, a_glo, a_loc) in enumerate(accs):
            print(f"{row.config:>16} {group:>5} {a_clu:>9.3f} {a_glo:>7.3f} {a_loc:>6.3f}")

    print("\nTable 6 shape: overall accuracy (mean over clients)")
    print(f"{'groups x classes':>16} {'clustered':>9} {'global':>7} {'local':>6}")
    for row in rows:
        o = row.overall
        print(f"{row.config:>16} {o['clustered']:>9.3f} {o['global']:>7.3f} {o['local']:>6.3f}")


if __name__ == "__main__":
    main()
