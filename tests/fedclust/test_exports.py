"""Result exports: tables and files from a result document."""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

import pandas as pd
import pytest

from fedclust.data.federations import build_federation
from fedclust.exports import (
    centers_frame,
    feature_names,
    sweep_frame,
    with_feature_names,
    write_exports,
)
from fedclust.protocol.wire.messages import ResultDocument
from fedclust.simulate import simulate
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


def test_centers_frame_has_every_k_names_the_features_and_skips_withheld_centers() -> None:
    frame = centers_frame(sample_document(names=["age", "income"]))
    assert frame.columns.tolist() == ["k", "center", "selected", "age", "income"]
    # K = 2, 3 (center 1 withheld) and 4: every K's released centers, in long format.
    assert frame["k"].tolist() == [2, 2, 3, 3, 4, 4, 4, 4]
    assert frame["center"].tolist() == [0, 1, 0, 2, 0, 1, 2, 3]
    assert frame["selected"].tolist() == [k == 3 for k in frame["k"]]
    selected = frame[frame["selected"]]
    assert selected[["age", "income"]].to_numpy().tolist() == [[0.0, 1.0], [20.0, 21.0]]


def test_centers_frame_refuses_names_of_the_wrong_width() -> None:
    with pytest.raises(ValueError, match="names 3 features"):
        centers_frame(sample_document(names=["a", "b", "c"]))


def test_write_exports_writes_the_tables_and_the_json_document(tmp_path: Path) -> None:
    doc = sample_document(names=["age", "income"])
    written = write_exports(doc, tmp_path / "out")
    out = tmp_path / "out"
    assert {p.name for p in written} >= {"sweep.csv", "centers.csv", "result.json"}
    assert pd.read_csv(out / "sweep.csv")["k"].tolist() == [2, 3, 4]
    assert pd.read_csv(out / "centers.csv").columns.tolist() == [
        "k", "center", "selected", "age", "income",
    ]
    assert ResultDocument.model_validate_json((out / "result.json").read_text()) == doc
    if importlib.util.find_spec("pyarrow") is not None:
        centers = pd.read_parquet(out / "centers.parquet")
        assert centers[centers["selected"]]["center"].tolist() == [0, 2]


def _simulated(tmp_path: Path, name: str, *, labels: bool) -> Path:
    """Export a small real run (with or without ground-truth labels) into ``tmp_path/name``."""
    fed = build_federation(dataset="motivational", seed=3)
    if not labels:
        fed = dataclasses.replace(fed, labels=None)
    doc = simulate(fed, algorithm="fkm", ks=range(2, 4), seed=5, protection="none").to_document()
    assert (doc.sweep[0].ari is not None) == labels
    write_exports(doc, tmp_path / name)
    return tmp_path / name


@pytest.mark.parametrize("table", ["sweep", "centers"])
def test_runs_with_and_without_labels_read_as_one_dataset(tmp_path: Path, table: str) -> None:
    pytest.importorskip("pyarrow")
    import pyarrow.dataset as ds

    runs = [_simulated(tmp_path, "labelled", labels=True),
            _simulated(tmp_path, "unlabelled", labels=False)]
    schemas = [ds.dataset(run / f"{table}.parquet").schema for run in runs]
    assert schemas[0].equals(schemas[1], check_metadata=False)
    both = ds.dataset([run / f"{table}.parquet" for run in runs]).to_table().to_pandas()
    frames = [pd.read_parquet(run / f"{table}.parquet") for run in runs]
    assert len(both) == sum(len(f) for f in frames)
    assert frames[0].dtypes.equals(frames[1].dtypes)
    if table == "sweep":
        assert str(schemas[1].field("ari").type) == "double"
        assert frames[1]["ari"].isna().all() and frames[0]["ari"].notna().all()
        assert frames[1]["client_weighted_ari"].isna().all()


def test_tables_keep_their_types_when_empty() -> None:
    empty = sample_document().model_copy(update={"sweep": []})
    assert sweep_frame(empty).dtypes.equals(sweep_frame(sample_document()).dtypes)
    assert centers_frame(empty)[["k", "center", "selected"]].dtypes.tolist() == [
        "int64", "int64", "bool",
    ]
