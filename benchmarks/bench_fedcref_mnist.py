"""FedCRef on MNIST beside Nardi, Valerio & Passarella's Tables 3–4 (d = 0, 0.3, 0.5).

Runs the service's FedCRef job in process (``fedclust.deep_simulate.simulate_fedcref``: the
agents' dispatch over an in-process channel) once per dirtiness d of the simulated initial
clustering, and prints ours beside the paper's: groups found, wrong associations, isolated
clusters of all clusters, and the mean local clustering ACC of the dirty initial clustering,
of the trained local-only baseline and of FedCRef. The local-only baseline
(``participant.deep.fedcref_local.local_only_baseline``) starts from the same initial
clustering and models and runs FedCRef's local steps alone (retraining, Algorithm 2 over
the client's own models, the same tau and iterations): no association, groups or FedAvg.
``--preset paper`` (default):
25 clients with 2..5 classes, 500 images per client cluster, MNIST train and test pooled, 20
local epochs, theta 0.2 (``deep_setups.SETUPS``, ``protocol.algorithms.fedcref``);
``--preset code``: the project's quick digits set-up. ``--device auto`` trains on a GPU when
torch sees one. ``--quick``: a seconds-long smoke run on digits (4 clients, 1 iteration).
``--clients``, ``--fedavg-rounds`` and ``--max-iterations`` scale a preset down (e.g. for a
CPU run).

The paper-scale grid needs a GPU: on the development machine's 2 CPU cores one d takes hours.
Uses MNIST from the shared datasets folder ($FEDCLUST_DATASETS, else ../shared/datasets).

Usage: python -m benchmarks.bench_fedcref_mnist [--preset paper|code] [--device auto]
       [--dirtiness 0 0.3 0.5] [--clients C] [--fedavg-rounds R] [--max-iterations I]
       [--protection none|masking] [--seed 0] [--quick]

Design notes: ``docs/fedcref.md`` (§ The MNIST benchmark).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from benchmarks._deep import deep_parser
from fedclust.deep_simulate import DeepSimulationDocument, simulate_fedcref

#: Nardi et al., Tables 3-4 (MNIST, 25 clients), as issue 22 quotes them: groups found,
#: final mean ACC, and at d = 0 wrong associations and isolated clusters of all.
PAPER: dict[float, dict[str, Any]] = {
    0.0: {"groups": 10.1, "acc": 0.948, "wrong": 0, "isolated": "17.3/89"},
    0.3: {"groups": 9.8, "acc": 0.879},
    0.5: {"groups": 10.2, "acc": 0.711},
}
QUICK: dict[str, Any] = {
    "dataset": "digits", "preset": "code", "clients": 4, "samples_per_class": 15,
    "fedavg_rounds": 1, "max_iterations": 1, "local_epochs": 3,
}


def run(args: argparse.Namespace, d: float) -> DeepSimulationDocument:
    options: dict[str, Any] = dict(QUICK) if args.quick else {"preset": args.preset}
    for key in ("clients", "fedavg_rounds", "max_iterations"):
        if getattr(args, key) is not None:
            options[key] = getattr(args, key)
    return simulate_fedcref(
        dirtiness=d, seed=args.seed, device=args.device, protection=args.protection,
        local_only=True, **options,
    )


def _clusters(doc: DeepSimulationDocument) -> int:
    return sum(len(g.members) for g in doc.groups) + (doc.isolated_clusters or 0)


def main(argv: list[str] | None = None) -> int:
    ap = deep_parser(__doc__)
    ap.add_argument("--dirtiness", type=float, nargs="+", default=[0.0, 0.3, 0.5])
    ap.add_argument("--clients", type=int, default=None,
                    help="clients (default: the preset's)")
    ap.add_argument("--fedavg-rounds", type=int, default=None,
                    help="FedAvg rounds per group (default: the preset's)")
    ap.add_argument("--max-iterations", type=int, default=None,
                    help="the most FedCRef iterations, also the local-only baseline's "
                         "(default: the preset's)")
    args = ap.parse_args(argv)
    docs: list[tuple[float, DeepSimulationDocument]] = []
    for d in args.dirtiness:
        try:
            doc = run(args, d)
        except FileNotFoundError as exc:
            print(f"{exc}; skipping.")
            return 0
        docs.append((d, doc))
        print(f"d={d}: {doc.groups_found} groups, {doc.seconds:.0f} s on {doc.device}", flush=True)
    first = docs[0][1]
    p = first.params
    print(
        f"\nFedCRef on {first.dataset}, preset {first.preset}, device {first.device}: "
        f"{p['clients']} clients, {p['classes_per_client']} classes each, "
        f"{p['samples_per_class']} images per class, {p['local_epochs']} local epochs, "
        f"{p['fedavg_rounds']} FedAvg rounds, at most {p['max_iterations']} iterations, "
        f"theta {p['theta']}, tau {p['tau']}, seed {first.seed}"
    )
    head = (f"{'d':>4} {'groups':>6} {'paper':>6} {'wrong':>5} {'paper':>5} "
            f"{'isolated':>9} {'paper':>8} {'initial':>7} {'local-only':>10} {'FedCRef':>7} "
            f"{'paper':>6} {'s':>6}")
    print(head)
    print("-" * len(head))
    for d, doc in docs:
        ref = PAPER.get(d, {}) if first.dataset == "mnist" else {}
        print(
            f"{d:>4.1f} {doc.groups_found:>6d} {ref.get('groups', '-')!s:>6} "
            f"{doc.wrong_associations!s:>5} {ref.get('wrong', '-')!s:>5} "
            f"{f'{doc.isolated_clusters}/{_clusters(doc)}':>9} {ref.get('isolated', '-'):>8} "
            f"{doc.initial_accuracy or 0.0:>7.3f} {doc.local_only_accuracy or 0.0:>10.3f} "
            f"{doc.final_accuracy or 0.0:>7.3f} {ref.get('acc', '-')!s:>6} {doc.seconds:>6.0f}"
        )
    print("Mean local ACC (Hungarian): initial = the dirty initial clustering, as given;"
          " local-only = the trained local-only baseline; FedCRef = after the federation."
          "\npaper: Tables 3-4 (MNIST; FedCRef's ACC); its perfect-association baseline is"
          " 0.914 at d = 0.5. s: FedCRef and the local-only baseline together.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
