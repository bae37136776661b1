"""Pictures of a result document: the K sweep and the centers of the selected K (matplotlib,
Agg backend). :func:`figures` builds the figures without saving, so tests can read them."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from fedclust.exports import feature_names
from fedclust.protocol.wire.messages import ResultDocument

if TYPE_CHECKING:
    from matplotlib.figure import Figure

MISSING = 'fedclust plot needs matplotlib: pip install "fedclust[plot]"'


def figures(doc: ResultDocument, data: pd.DataFrame | None = None) -> dict[str, Figure]:
    """``{"k-sweep": ..., "centers": ...}``: FedFuzzDB and simplified silhouette over K with
    the selected K (and the elbow) marked; the selected K's centers, over ``data`` (its
    columns named as the features) in a 2-D scatter when there are two features, else in
    parallel coordinates.

    Raises:
        ValueError: the document has no sweep (a model-based result), or ``data`` lacks a
            feature column.
    """
    if not doc.sweep:
        raise ValueError("the result has no K sweep (a model-based job); nothing to plot.")
    return {"k-sweep": _sweep_figure(doc), "centers": _centers_figure(doc, data)}


def write_plots(doc: ResultDocument, out: Path, data: pd.DataFrame | None = None) -> list[Path]:
    """Save :func:`figures` as PNG and SVG into ``out`` (created); return the paths."""
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for name, fig in figures(doc, data).items():
        for suffix in ("png", "svg"):
            path = out / f"{name}.{suffix}"
            fig.savefig(path, dpi=120, bbox_inches="tight")
            written.append(path)
        plt.close(fig)
    return written


def read_data(path: Path, names: list[str]) -> pd.DataFrame:
    """The columns ``names`` of a CSV file with a header row.

    Raises:
        ValueError: a feature column is missing from the file.
    """
    frame = pd.read_csv(path)
    missing = [n for n in names if n not in frame.columns]
    if missing:
        raise ValueError(
            f"{path} has no column(s) {', '.join(missing)}; pass a CSV whose header names "
            "the result's features."
        )
    return frame[names]


def _sweep_figure(doc: ResultDocument) -> Figure:
    from matplotlib.figure import Figure

    ks = [e.k for e in doc.sweep]
    fig = Figure(figsize=(6.4, 4.6), layout="constrained")
    ax = fig.add_subplot()
    ax.plot(ks, [e.fed_fuzzy_db for e in doc.sweep], "o-", label="FedFuzzDB (lower is better)")
    ax.plot(ks, [e.simplified_silhouette for e in doc.sweep], "s--",
            label="simplified silhouette (higher is better)")
    ax.axvline(doc.k_selected, color="tab:red", label=f"selected K = {doc.k_selected}")
    if doc.k_elbow is not None:
        ax.axvline(doc.k_elbow, color="tab:gray", linestyle=":",
                   label=f"elbow K = {doc.k_elbow}")
    ax.set_xlabel("K")
    ax.set_ylabel("score")
    ax.set_xticks(ks)
    ax.set_title(f"{doc.algorithm} on {doc.dataset or 'the federation'}")
    fig.legend(loc="outside lower center", ncols=2, fontsize="small")
    return fig


def _centers_figure(doc: ResultDocument, data: pd.DataFrame | None) -> Figure:
    from matplotlib.figure import Figure

    names = feature_names(doc)
    entry = next(e for e in doc.sweep if e.k == doc.k_selected)
    centers = np.array([row for row in entry.centers if row is not None], dtype=np.float64)
    fig = Figure(figsize=(6.4, 4.8))
    ax = fig.add_subplot()
    ax.set_title(f"centers at K = {doc.k_selected}")
    if len(names) == 2:
        if data is not None:
            ax.scatter(data[names[0]], data[names[1]], s=6, color="tab:gray", alpha=0.4,
                       label="data")
        ax.scatter(centers[:, 0], centers[:, 1], marker="X", s=120, color="tab:red",
                   label="centers")
        ax.set_xlabel(names[0])
        ax.set_ylabel(names[1])
        ax.legend()
        return fig
    positions = np.arange(len(names))
    if data is not None:
        for row in data.to_numpy(dtype=np.float64):
            ax.plot(positions, row, color="tab:gray", alpha=0.1, linewidth=0.5)
    for j, row in enumerate(centers):
        ax.plot(positions, row, "o-", linewidth=2, label=f"center {j}")
    ax.set_xticks(positions, names, rotation=45, ha="right")
    ax.set_xlabel("feature")
    ax.set_ylabel("value (original units)")
    ax.legend()
    return fig
