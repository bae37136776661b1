"""Pictures of a result document: the K sweep and the centers of the selected K (matplotlib,
Agg backend). :func:`figures` builds the figures without saving, so tests can read them.

The centers figure gives every feature its own scale in its original units: a scatter for
two features, else one panel per feature (small multiples), each with the rows of ``data``
as a strip per cluster and the centers as bars. Rows are coloured by the cluster of their
nearest released center, as ``participant assign`` labels them; for a standardised run,
distances are measured after z-scoring with the plotted data's own mean and standard
deviation (the federation's are not in the result), which is the job's scaling when the data
is the whole federation.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Final

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from fedclust.core.validation import FloatArray, check_centers, check_data
from fedclust.exports import feature_names
from fedclust.protocol.maths._fuzzy import nearest
from fedclust.protocol.wire.assignment import released_centers, sweep_entry
from fedclust.protocol.wire.messages import ResultDocument

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

MISSING = 'fedclust plot needs matplotlib: pip install "fedclust[plot]"'
#: Panels of the centers figure at most (the first features); a title says when it is cut.
MAX_PANELS: Final = 36
#: Panels per row of the centers figure.
_COLUMNS: Final = 4


def figures(doc: ResultDocument, data: pd.DataFrame | None = None) -> dict[str, Figure]:
    """``{"k-sweep": ..., "centers": ...}``: FedFuzzDB and simplified silhouette over K with
    the selected K (and the elbow) marked, and the pooled and client-weighted ARI where the
    result has them; the selected K's centers over ``data`` (its columns named as the
    features), coloured by cluster, each feature on its own scale (module docstring).

    Raises:
        ValueError: the document has no sweep (a model-based result), every center of the
            selected K is withheld, or ``data`` lacks a feature column.
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


def cluster_colours(k: int) -> list[tuple[float, float, float, float]]:
    """One colour per cluster index 0..k-1: tab10 up to 10 clusters, tab20 up to 20, else
    evenly spaced along turbo."""
    from matplotlib import colormaps

    if k <= 10:
        return [colormaps["tab10"](j) for j in range(k)]
    if k <= 20:
        return [colormaps["tab20"](j) for j in range(k)]
    return [colormaps["turbo"](j / (k - 1)) for j in range(k)]


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
    for values, style, colour, label in (
        ([e.ari for e in doc.sweep], "^-", "tab:green", "ARI, pooled rows (against the labels)"),
        ([e.client_weighted_ari for e in doc.sweep], "v:", "tab:purple",
         "ARI, per participant weighted by rows"),
    ):
        if any(v is not None for v in values):
            ax.plot(ks, [math.nan if v is None else v for v in values], style, color=colour,
                    label=label)
    ax.set_xlabel("K")
    ax.set_ylabel("score")
    ax.set_xticks(ks)
    ax.set_title(f"{doc.algorithm} on {doc.dataset or 'the federation'}")
    fig.legend(loc="outside lower center", ncols=2, fontsize="small")
    return fig


def _labels(doc: ResultDocument, X: FloatArray, centers: FloatArray) -> NDArray[np.intp]:
    """Each row's nearest center (module docstring: z-scored for a standardised run)."""
    if doc.standardised:
        mean = X.mean(axis=0)
        scale = X.std(axis=0)
        scale[scale == 0.0] = 1.0
        return nearest((X - mean) / scale, (centers - mean) / scale)
    return nearest(X, centers)


def _centers_figure(doc: ResultDocument, data: pd.DataFrame | None) -> Figure:
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    names = feature_names(doc)
    entry = sweep_entry(doc)
    centers, kept = released_centers(entry)
    centers = check_centers(centers, n_features=len(names), name="centers")
    colours = cluster_colours(entry.k)
    X = labels = None
    if data is not None:
        X = check_data(data[names].to_numpy(dtype=np.float64), name="data")
        labels = _labels(doc, X, centers)
    shown = min(len(names), MAX_PANELS)
    title = f"centers at K = {doc.k_selected}" + (
        f" (the first {shown} of {len(names)} features)" if shown < len(names) else ""
    )
    if len(names) == 2:
        fig = Figure(figsize=(6.4, 5.2), layout="constrained")
        ax = fig.add_subplot()
        if X is not None and labels is not None:
            ax.scatter(X[:, 0], X[:, 1], s=8, alpha=0.5, linewidths=0,
                       c=np.asarray(colours)[np.asarray(kept)[labels]])
        ax.scatter(centers[:, 0], centers[:, 1], marker="X", s=160, edgecolors="black",
                   c=[colours[j] for j in kept])
        ax.set_xlabel(names[0])
        ax.set_ylabel(names[1])
    else:
        rows = math.ceil(shown / _COLUMNS)
        cols = min(shown, _COLUMNS)
        fig = Figure(figsize=(2.6 * cols + 0.6, 2.4 * rows + 1.0), layout="constrained")
        for d in range(shown):
            ax = fig.add_subplot(rows, cols, d + 1)
            _feature_panel(ax, names[d], d, centers, kept, colours, X, labels)
    fig.suptitle(title)
    scatter = len(names) == 2  # the centers are crosses there, bars in the panels
    handles = [
        Line2D([], [], marker="X" if scatter else None, linestyle="" if scatter else "-",
               linewidth=3, markersize=9, markeredgecolor="black", color=colours[j],
               label=f"cluster {j}")
        for j in kept
    ]
    fig.legend(handles=handles, loc="outside lower center", ncols=min(len(kept), 6),
               fontsize="small")
    return fig


def _feature_panel(
    ax: Axes,
    name: str,
    d: int,
    centers: FloatArray,
    kept: list[int],
    colours: list[tuple[float, float, float, float]],
    X: FloatArray | None,
    labels: NDArray[np.intp] | None,
) -> None:
    """One feature in its own units: per cluster (x position), its rows as a jittered strip
    and its center as a bar."""
    positions = np.arange(len(kept), dtype=np.float64)
    if X is not None and labels is not None:
        jitter = np.random.default_rng(d).uniform(-0.25, 0.25, size=X.shape[0])
        ax.scatter(positions[labels] + jitter, X[:, d], s=4, alpha=0.35, linewidths=0,
                   c=np.asarray(colours)[np.asarray(kept)[labels]])
    for i, j in enumerate(kept):
        ax.plot([i - 0.4, i + 0.4], [centers[i, d]] * 2, color=colours[j], linewidth=3,
                solid_capstyle="butt")
    ax.set_title(name, fontsize="medium")
    ax.set_xlabel("cluster", fontsize="small")
    ax.set_xticks(positions, [str(j) for j in kept])
    ax.set_xlim(-0.6, len(kept) - 0.4)
    ax.tick_params(labelsize="small")
