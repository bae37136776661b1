"""Result exports: tables and files from a result document."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pandas as pd
import pytest

from fedclust.exports import (
    centers_frame,
    feature_names,
    sweep_frame,
    with_feature_names,
    write_exports,
)
from fedclust.protocol.wire.messages import ResultDocument
from tests.fedclust._results import sample_document


def test_feature_names_fall_back_to_indexed_names() -> None:
    assert feature_names(sample_document(width=3)) == ["x0", "x1", "x2"]
    assert feature_names(sample_document(names=["age", "income"])) == ["age", "income"]
    unnamed = sample_document()
    assert with_feature_names(unnamed, None) == unnamed  # the service's document, unchanged
    assert with_feature_names(sample_document(), ("a", "b")).feature_names == ["a", "b"]


def test_sweep_frame_has_one_row_per_k_with_the_scores() -> None:
    frame = sweep_frame(sample_document())
    assert frame["k"].tolist() == [2, 3, 4]
    assert frame["fed_fuzzy_db"].tolist() == [0.9, 0.4, 0.6]
    assert frame["simplified_silhouette"].tolist() == [0.5, 0.7, 0.6]
    assert frame["rounds"].tolist() == [7, 8, 9]
    assert frame["selected"].tolist() == [False, True, False]
    assert frame["elbow"].tolist() == [True, False, False]


def test_centers_frame_names_the_features_and_skips_withheld_centers() -> None:
    frame = centers_frame(sample_document(names=["age", "income"]))
    assert frame.columns.tolist() == ["k", "center", "age", "income"]
    assert frame["center"].tolist() == [0, 2]
    assert frame["k"].tolist() == [3, 3]
    assert frame.loc[1, ["age", "income"]].tolist() == [20.0, 21.0]


def test_centers_frame_refuses_names_of_the_wrong_width() -> None:
    with pytest.raises(ValueError, match="names 3 features"):
        centers_frame(sample_document(names=["a", "b", "c"]))


def test_write_exports_writes_the_tables_and_the_json_document(tmp_path: Path) -> None:
    doc = sample_document(names=["age", "income"])
    written = write_exports(doc, tmp_path / "out")
    out = tmp_path / "out"
    assert {p.name for p in written} >= {"sweep.csv", "centers.csv", "result.json"}
    assert pd.read_csv(out / "sweep.csv")["k"].tolist() == [2, 3, 4]
    assert pd.read_csv(out / "centers.csv").columns.tolist() == ["k", "center", "age", "income"]
    assert ResultDocument.model_validate_json((out / "result.json").read_text()) == doc
    if importlib.util.find_spec("pyarrow") is not None:
        assert pd.read_parquet(out / "centers.parquet")["center"].tolist() == [0, 2]
