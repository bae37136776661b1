"""``fedclust plot``: draw a result's K sweep and centers (:mod:`fedclust.plot`)."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path


def add_arguments(plot: argparse.ArgumentParser) -> None:
    plot.description = (
        "Draw the FedFuzzDB and silhouette curves over K (selected K and elbow marked; "
        "the ARI curves where the result has labels) and the selected K's centers, each "
        "feature on its own scale, with --data's rows coloured by cluster, as PNG and SVG."
    )
    plot.add_argument("result", type=Path, metavar="RESULT.json",
                      help="a result document (simulate --json, job result --json)")
    plot.add_argument("--out", type=Path, required=True, metavar="DIR",
                      help="directory for k-sweep.png/.svg and centers.png/.svg")
    plot.add_argument("--data", type=Path, metavar="CSV",
                      help="a CSV file whose header names the features: draw its rows, "
                      "coloured by their nearest center, under the centers")


def run(args: argparse.Namespace) -> int:
    from fedclust.exports import feature_names
    from fedclust.plot import MISSING, read_data, write_plots
    from fedclust.protocol.wire.messages import ResultDocument

    if importlib.util.find_spec("matplotlib") is None:
        print(MISSING, file=sys.stderr)
        return 2

    doc = ResultDocument.model_validate_json(args.result.read_text(encoding="utf-8"))
    data = read_data(args.data, feature_names(doc)) if args.data is not None else None
    for path in write_plots(doc, args.out, data):
        print(path)
    return 0
