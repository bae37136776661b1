"""``fedclust demo``: a whole federation on loopback (:mod:`fedclust.demo`)."""

from __future__ import annotations

import argparse

from fedclust.cli._common import PROTECTION_CHOICES, protection_help


def add_arguments(demo: argparse.ArgumentParser) -> None:
    demo.description = (
        "Start a coordinator, a counting service and three participants as separate "
        "processes on loopback, each participant holding its share of the built-in "
        "motivational example; run the FedFCM K sweep 2..8 scored by FedFuzzDB; print "
        "the chosen K, the index per K and the centers; shut everything down."
    )
    demo.add_argument("--json", action="store_true", help="print the result document")
    demo.add_argument(
        "--workdir", metavar="DIR",
        help="keep configs, data shares, databases and logs here (default: a temporary folder)",
    )
    demo.add_argument(
        "--protection", choices=PROTECTION_CHOICES, default="masking",
        help=protection_help(),
    )
    demo.add_argument("--seed", type=int, default=1, help="data and algorithm seed (default 1)")


def starting(args: argparse.Namespace) -> str:
    """The first line, before the services start (seconds: each process loads the library)."""
    return (
        "a coordinator, a counting service and three participants on loopback "
        f"(protection {args.protection})"
    )


def run(args: argparse.Namespace) -> int:
    from fedclust.demo import run_demo

    return run_demo(
        workdir=args.workdir, as_json=args.json, protection=args.protection, seed=args.seed
    )
