"""FedCRef on MNIST, the shape of Nardi, Valerio & Passarella's Tables 3–4, scaled down.

Paper (MNIST): ~9–10 groups found for the 10 classes, few wrong associations, mean local ACC
rising from the initial clustering's to up to ~0.95. Set-up: ``--clients`` clients holding
2..5 random digit classes, ``--per-class`` images per class each, a "dirty" initial
clustering per ``--dirtiness``; autoencoder 784-100-64-32; ``--local-epochs`` 60 (the paper
20), ``--rounds`` FedAvg rounds of ``--fedavg-epochs`` epochs, ``--theta`` 0.2 and 0.25.
Prints per run: groups found vs the true K and the most possible, wrong associations,
isolated clusters, initial and final mean local ACC, iterations, stop reason, seconds.
Uses the MNIST copy in ../shared/datasets/mnist (skips with a message if absent).

Usage: python benchmarks/bench_fedcref_mnist.py [--clients 10] [--per-class 500]
       [--dirtiness 0 0.3 0.5] [--theta 0.2 0.25] [--local-epochs 60] [--rounds 5]
       [--fedavg-epochs 6] [--iterations 3] [--refine-with all|groups] [--seed 0]

Design notes: ``docs/fedcref.md`` (§ The MNIST benchmark: why 60 epochs, measured figures).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter

from fedclust.coordinator.fedcref import FedCRefResult, run_fedcref
from fedclust.deep_simulate import DeepData, fedcref_federation, load_dataset
from fedclust.participant.deep.fedcref_local import FedCRefLocal, label_evaluator


def federation(
    data: DeepData, args: argparse.Namespace, dirtiness: float
) -> tuple[list[FedCRefLocal], int, int]:
    """The simulator's federation (``fedclust.deep_simulate.fedcref_federation``) with this
    benchmark's settings. Returns the participants, the classes present and the classes held
    by >= 2 clients (the most groups possible; the authors' "ideal communities")."""
    fed = fedcref_federation(
        data, clients=args.clients, classes_per_client=(2, 5),
        samples_per_class=args.per_class, dirtiness=dirtiness,
        local_epochs=args.local_epochs, seed=args.seed,
    )
    holders = Counter(c for p in fed.participants for c in p.true_classes().tolist())
    possible = sum(1 for n in holders.values() if n >= 2)
    return fed.participants, fed.true_k, possible


def run_one(
    data: DeepData, args: argparse.Namespace, dirtiness: float, theta: float
) -> tuple[FedCRefResult, int, int, float]:
    parts, true_k, possible = federation(data, args, dirtiness)
    t0 = time.perf_counter()
    res = run_fedcref(
        parts,
        theta=theta,
        fedavg_rounds=args.rounds,
        fedavg_epochs=args.fedavg_epochs,
        max_iterations=args.iterations,
        refine_with=args.refine_with,
        seed=args.seed,
        evaluate=label_evaluator(parts),
        on_iteration=lambda r: print(
            f"    it {r.iteration}: groups {r.n_groups}, isolated {r.n_isolated}, "
            f"wrong {r.wrong_associations}, ACC {r.mean_accuracy:.3f}, "
            f"frozen {len(r.frozen)}, small groups {len(r.small_groups)}",
            flush=True,
        ),
    )
    return res, true_k, possible, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--per-class", type=int, default=500)
    ap.add_argument("--dirtiness", type=float, nargs="+", default=[0.0, 0.3, 0.5])
    ap.add_argument("--theta", type=float, nargs="+", default=[0.2, 0.25])
    ap.add_argument("--local-epochs", type=int, default=60)
    ap.add_argument("--refine-with", choices=("groups", "all"), default="all")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--fedavg-epochs", type=int, default=6)
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    try:
        data = load_dataset("mnist")
    except FileNotFoundError as exc:
        print(f"{exc}; skipping.")
        return 0
    rows = []
    for d in args.dirtiness:
        for theta in args.theta:
            print(f"d={d} theta={theta}", flush=True)
            res, true_k, possible, secs = run_one(data, args, d, theta)
            last = res.iterations[-1]
            rows.append(
                (d, theta, last.n_groups, true_k, possible, last.wrong_associations,
                 last.n_isolated,
                 res.initial_accuracy, last.mean_accuracy, res.n_iterations, res.stop_reason,
                 secs)
            )
    print()
    print(
        f"FedCRef on MNIST: {args.clients} clients, 2..5 classes each, {args.per_class} "
        f"images per class per client, {args.local_epochs} local epochs, {args.rounds} FedAvg "
        f"rounds x {args.fedavg_epochs} epochs, seed {args.seed}"
    )
    print("Paper (MNIST, Tables 3-4): ~9-10 groups of 10 classes, few wrong, ACC up to ~0.95")
    head = (
        f"{'d':>4} {'theta':>5} {'groups':>6} {'true K':>6} {'poss.':>5} {'wrong':>5} "
        f"{'isol.':>5} "
        f"{'ACC0':>6} {'ACC':>6} {'it':>3} {'stop':>14} {'s':>6}"
    )
    print(head)
    print("-" * len(head))
    for d, theta, g, k, poss, w, iso, a0, a1, it, stop, secs in rows:
        print(
            f"{d:>4.1f} {theta:>5.2f} {g:>6d} {k:>6d} {poss:>5d} {w!s:>5} {iso:>5d} {a0:>6.3f} "
            f"{a1:>6.3f} "
            f"{it:>3d} {stop:>14} {secs:>6.0f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
