"""The flags the model-based benchmarks (FedCRef, clustered federated distillation on MNIST)
share."""

from __future__ import annotations

import argparse

__all__ = ["deep_parser"]


def deep_parser(description: str | None) -> argparse.ArgumentParser:
    """A parser with ``--preset``, ``--device``, ``--protection``, ``--seed`` and
    ``--quick``; the benchmark adds its own flags."""
    ap = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawTextHelpFormatter
    )
    ap.add_argument("--preset", choices=("paper", "code"), default="paper")
    ap.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    ap.add_argument("--protection", choices=("none", "masking"), default="none",
                    help="none (default, as in the paper) or masking")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="a seconds-long smoke run on digits")
    return ap
