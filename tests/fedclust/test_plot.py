"""Pictures of a result: the figures' data, not their pixels."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from numpy.typing import NDArray

from fedclust.cli import main
from tests.fedclust._results import sample_document

pytest.importorskip("matplotlib", reason="fedclust plot needs matplotlib (fedclust[plot])")

from matplotlib.colors import to_rgba_array

from fedclust.plot import MAX_PANELS, cluster_colours, figures, read_data, write_plots


def _values(data: object) -> list[float]:
    """A line's x or y data as plain floats."""
    return [float(v) for v in np.asarray(data, dtype=np.float64).ravel()]


def _rgb(colours: Any) -> NDArray[np.float64]:
    """Colours as an (n, 3) array of RGB values (alpha dropped)."""
    rgba: NDArray[np.float64] = to_rgba_array(colours)
    return rgba[:, :3]


def test_sweep_figure_plots_the_scores_and_marks_selected_and_elbow() -> None:
    doc = sample_document()
    ax = figures(doc)["k-sweep"].axes[0]
    assert ax.get_xlabel() == "K"
    curves, markers = ax.lines[:2], ax.lines[2:]
    assert _values(curves[0].get_xdata()) == [2, 3, 4]
    assert _values(curves[0].get_ydata()) == [0.9, 0.4, 0.6]
    assert _values(curves[1].get_ydata()) == [0.5, 0.7, 0.6]
    assert _values(markers[0].get_xdata()) == [doc.k_selected, doc.k_selected]
    assert _values(markers[1].get_xdata()) == [doc.k_elbow, doc.k_elbow]


def test_the_ari_curves_are_drawn_only_where_the_result_has_labels() -> None:
    doc = sample_document()
    unlabelled = figures(doc)["k-sweep"].axes[0]
    assert not [line for line in unlabelled.lines if "ARI" in str(line.get_label())]
    sweep = [e.model_copy(update={"ari": 0.1 * e.k, "client_weighted_ari": 0.2 * e.k})
             for e in doc.sweep]
    labelled = figures(doc.model_copy(update={"sweep": sweep}))["k-sweep"].axes[0]
    ari = {str(line.get_label()): _values(line.get_ydata())
           for line in labelled.lines if "ARI" in str(line.get_label())}
    assert len(ari) == 2
    pooled = next(v for label, v in ari.items() if "pooled" in label)
    weighted = next(v for label, v in ari.items() if "weighted" in label)
    np.testing.assert_allclose(pooled, [0.2, 0.3, 0.4])
    np.testing.assert_allclose(weighted, [0.4, 0.6, 0.8])


def test_two_features_draw_a_scatter_coloured_by_cluster() -> None:
    # Nearest released centers of K = 3: (0, 1) is center 0, (20, 21) center 2.
    data = pd.DataFrame({"age": [1.0, 2.0, 19.0], "income": [1.0, 0.0, 22.0]})
    fig = figures(sample_document(names=["age", "income"]), data)["centers"]
    assert len(fig.axes) == 1
    ax = fig.axes[0]
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("age", "income")
    points, centers = ax.collections
    np.testing.assert_array_equal(points.get_offsets(), data.to_numpy())
    np.testing.assert_array_equal(centers.get_offsets(), [[0.0, 1.0], [20.0, 21.0]])
    palette = cluster_colours(3)
    np.testing.assert_allclose(_rgb(points.get_facecolor()), _rgb([palette[j] for j in (0, 0, 2)]))
    np.testing.assert_allclose(_rgb(centers.get_facecolor()), _rgb([palette[0], palette[2]]))


def test_more_features_get_one_panel_each_on_their_own_scale() -> None:
    # A small feature (4..7) beside a large one (120..150): each panel keeps its own axis.
    doc = sample_document(names=["petal", "weight", "height"], width=3)
    sweep = [e.model_copy(update={"centers": [[4.0, 120.0, 1.0], None, [7.0, 150.0, 2.0]]})
             if e.k == 3 else e for e in doc.sweep]
    doc = doc.model_copy(update={"sweep": sweep})
    data = pd.DataFrame({"petal": [4.2, 4.5, 6.8, 7.1], "weight": [118.0, 125.0, 149.0, 152.0],
                         "height": [1.0, 1.1, 2.0, 2.2]})
    fig = figures(doc, data)["centers"]
    assert [ax.get_title() for ax in fig.axes] == ["petal", "weight", "height"]
    petal, weight, _ = fig.axes
    assert petal.get_ylim()[1] < 10 and weight.get_ylim()[0] > 100  # raw units, own scale
    # Each panel: the rows as one strip per cluster, coloured by their nearest center,
    # and one bar per released center at its raw value, in the cluster's colour.
    palette = cluster_colours(3)
    strip = weight.collections[0]
    np.testing.assert_array_equal(np.asarray(strip.get_offsets())[:, 1], data["weight"])
    np.testing.assert_allclose(
        _rgb(strip.get_facecolor()), _rgb([palette[j] for j in (0, 0, 2, 2)])
    )
    assert [_values(line.get_ydata())[0] for line in weight.lines] == [120.0, 150.0]
    np.testing.assert_allclose(_rgb([line.get_color() for line in weight.lines]),
                               _rgb([palette[0], palette[2]]))
    assert [t.get_text() for t in weight.get_xticklabels()] == ["0", "2"]


def test_the_centers_panels_stop_at_the_cap() -> None:
    fig = figures(sample_document(width=MAX_PANELS + 4))["centers"]
    assert len(fig.axes) == MAX_PANELS
    assert f"first {MAX_PANELS} of {MAX_PANELS + 4}" in fig.get_suptitle()


def test_write_plots_and_the_cli_write_png_and_svg(tmp_path: Path) -> None:
    doc = sample_document(names=["age", "income"])
    names = {p.name for p in write_plots(doc, tmp_path / "a")}
    assert names == {"k-sweep.png", "k-sweep.svg", "centers.png", "centers.svg"}
    result = tmp_path / "result.json"
    result.write_text(doc.model_dump_json())
    csv = tmp_path / "data.csv"
    csv.write_text("age,income,other\n1,2,x\n3,4,y\n")
    assert main(["plot", str(result), "--out", str(tmp_path / "b"), "--data", str(csv)]) == 0
    assert (tmp_path / "b" / "centers.png").stat().st_size > 0


def test_read_data_names_missing_columns(tmp_path: Path) -> None:
    csv = tmp_path / "data.csv"
    csv.write_text("age\n1\n")
    with pytest.raises(ValueError, match="no column"):
        read_data(csv, ["age", "income"])


def test_model_based_results_have_nothing_to_plot() -> None:
    doc = sample_document().model_copy(update={"sweep": []})
    with pytest.raises(ValueError, match="no K sweep"):
        figures(doc)
