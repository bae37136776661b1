"""Pictures of a result: the figures' data, not their pixels."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fedclust.cli import main
from tests.fedclust._results import sample_document

pytest.importorskip("matplotlib", reason="fedclust plot needs matplotlib (fedclust[plot])")

from fedclust.plot import figures, read_data, write_plots


def _values(data: object) -> list[float]:
    """A line's x or y data as plain floats."""
    return [float(v) for v in np.asarray(data, dtype=np.float64).ravel()]


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


def test_two_features_draw_a_scatter_over_the_data() -> None:
    data = pd.DataFrame({"age": [1.0, 2.0, 3.0], "income": [4.0, 5.0, 6.0]})
    ax = figures(sample_document(names=["age", "income"]), data)["centers"].axes[0]
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("age", "income")
    points, centers = ax.collections
    np.testing.assert_array_equal(points.get_offsets(), data.to_numpy())
    np.testing.assert_array_equal(centers.get_offsets(), [[0.0, 1.0], [20.0, 21.0]])


def test_more_features_draw_parallel_coordinates() -> None:
    ax = figures(sample_document(width=3))["centers"].axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["x0", "x1", "x2"]
    assert [_values(line.get_ydata()) for line in ax.lines] == [[0, 1, 2], [20, 21, 22]]


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
