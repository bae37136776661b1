"""Clustered federated distillation on MNIST beside Yang & Tae (2023), Tables 3 and 5.

Runs the service's fed-distill job in process (``fedclust.deep_simulate.simulate_fed_distill``)
per configuration GxC (G groups of clients, each group a distinct random set of C digit
classes) in mode "clustered" and, with ``--global``, "global" (FedDF-style, one teacher).
Prints ours beside the paper's: groups found and the grouping's ARI (Table 3), accuracy per
true group and overall, clustered against local-only (Table 5; local-only is the accuracy
after local training, before any sharing). ``--preset paper`` (default): lr 1e-4, batch 128,
25 local and 40 distillation epochs, 400 public images per class (``protocol.algorithms.
fed_distill``, ``deep_setups.SETUPS``); ``--preset code``: the authors' code's training
(lr 1e-3, batch 32/64, <= 30 local and 50 distillation epochs on MNIST) on the same
federation. 5 clients per group, 50 images per class each, 100 test images per class.
``--quick``: a seconds-long smoke run on digits.

Paper figures known here (issue 22): clustered accuracy 87.6-98.0 % over its grid, grouping
ARI 0.91 at 10x2. Uses MNIST from the shared datasets folder ($FEDCLUST_DATASETS, else
../shared/datasets).

Usage: python benchmarks/bench_fed_distill_mnist.py [--preset paper|code] [--device auto]
       [--configs 2x2,2x5,5x2,5x5,10x2,10x5] [--global] [--seed 0] [--quick]

Design notes: ``docs/fed-distill.md`` (§ The MNIST benchmark).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from benchmarks._deep import deep_parser
from fedclust.deep_simulate import DeepSimulationDocument, simulate_fed_distill

#: Yang & Tae 2023, Table 3: grouping ARI where issue 22 quotes it.
PAPER_ARI = {"10x2": 0.91}
PAPER_ACC = "87.6-98.0 %"
QUICK: dict[str, Any] = {
    "dataset": "digits", "clients_per_group": 2, "samples_per_class": 15,
    "public_per_class": 5, "test_per_class": 5, "distill_epochs": 2, "local_epochs": 3,
}


def run(args: argparse.Namespace, groups: int, classes: int, mode: str) -> DeepSimulationDocument:
    options: dict[str, Any] = dict(QUICK) if args.quick else {}
    return simulate_fed_distill(
        preset=args.preset, groups=groups, classes_per_group=classes, mode=mode,  # type: ignore[arg-type]
        seed=args.seed, device=args.device, protection=args.protection, **options,
    )


def main(argv: list[str] | None = None) -> int:
    ap = deep_parser(__doc__)
    ap.add_argument("--configs", default="2x2,2x5,5x2,5x5,10x2,10x5",
                    help="comma-separated GROUPSxCLASSES")
    ap.add_argument("--global", dest="global_", action="store_true",
                    help="also run mode global (one teacher for all)")
    args = ap.parse_args(argv)
    configs = "2x2,3x3" if args.quick else args.configs
    rows: list[tuple[str, DeepSimulationDocument, DeepSimulationDocument | None]] = []
    for item in configs.split(","):
        g, c = (int(v) for v in item.lower().split("x"))
        try:
            clustered = run(args, g, c, "clustered")
        except FileNotFoundError as exc:
            print(f"{exc}; skipping.")
            return 0
        glob = run(args, g, c, "global") if args.global_ else None
        rows.append((item, clustered, glob))
        print(f"[{item}] {clustered.seconds:.0f} s on {clustered.device}", flush=True)
    first = rows[0][1]
    p = first.params
    print(
        f"\nfed-distill on {first.dataset}, preset {first.preset}, device {first.device}: "
        f"{p['clients_per_group']} clients per group, {p['samples_per_class']} images per "
        f"class each, {p['public_per_class']} public per class, lr {p['learning_rate']}, "
        f"batch {p['batch_size'] or '32/64'}, {p['local_epochs']} local and "
        f"{p['distill_epochs']} distillation epochs, seed {first.seed}"
    )
    print(f"\nTable 3: grouping          Table 5: accuracy (paper, clustered: {PAPER_ACC})")
    head = (f"{'GxC':>5} {'found':>5} {'ARI':>6} {'paper':>5} {'clustered':>9} "
            f"{'global':>7} {'local-only':>10} {'per true group (clustered)':<30}")
    print(head)
    print("-" * len(head))
    for item, doc, glob in rows:
        per_group = " ".join(f"{a:.3f}" for a in doc.accuracy_per_true_group or [])
        global_acc = "-" if glob is None else f"{glob.overall_accuracy or 0.0:.3f}"
        print(
            f"{item:>5} {doc.groups_found:>5d} {doc.ari:>6.3f} "
            f"{PAPER_ARI.get(item, '-')!s:>5} {doc.overall_accuracy or 0.0:>9.3f} "
            f"{global_acc:>7} {doc.local_overall_accuracy or 0.0:>10.3f} {per_group:<30}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
