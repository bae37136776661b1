"""Result exports: a result document as tables (pandas) and as files in a directory.

``sweep.csv`` has one row per K; ``centers.csv`` one row per center of the selected K,
columns ``k``, ``center`` and the feature names; ``result.json`` is exactly the ``--json``
document. Parquet copies of the two tables are written when pyarrow is importable.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from fedclust.protocol.wire.messages import ResultDocument


def feature_names(doc: ResultDocument) -> list[str]:
    """The document's feature names, or ``x0 .. x{D-1}`` when it carries none."""
    if doc.feature_names is not None:
        return list(doc.feature_names)
    width = next((len(row) for e in doc.sweep for row in e.centers if row is not None), 0)
    return [f"x{i}" for i in range(width)]


def with_feature_names(doc: ResultDocument, names: Sequence[str] | None) -> ResultDocument:
    """The document with ``feature_names`` set to ``names``; unchanged without names (so a
    simulation of unnamed data gives the service's document; tables and exports then name
    the columns ``x0 .. x{D-1}``, see :func:`feature_names`)."""
    if names is None:
        return doc
    return doc.model_copy(update={"feature_names": list(names)})


def sweep_frame(doc: ResultDocument) -> pd.DataFrame:
    """One row per K: the scores, rounds, stop reason, ARI and empty clusters."""
    columns = [
        "k", "fed_fuzzy_db", "simplified_silhouette", "rounds", "stop_reason", "ari",
        "empty_clusters", "selected", "elbow",
    ]
    rows = [
        (e.k, e.fed_fuzzy_db, e.simplified_silhouette, e.rounds, e.stop_reason, e.ari,
         e.empty_clusters, e.k == doc.k_selected, e.k == doc.k_elbow)
        for e in doc.sweep
    ]
    return pd.DataFrame(rows, columns=columns)


def centers_frame(doc: ResultDocument) -> pd.DataFrame:
    """One row per released center of the selected K (withheld centers are left out)."""
    names = feature_names(doc)
    entry = next((e for e in doc.sweep if e.k == doc.k_selected), None)
    rows: list[list[object]] = []
    if entry is not None:
        for j, row in enumerate(entry.centers):
            if row is None:
                continue
            if len(row) != len(names):
                raise ValueError(
                    f"center {j} has {len(row)} values but the document names {len(names)} "
                    "features; fix feature_names in the result document."
                )
            rows.append([doc.k_selected, j, *row])
    return pd.DataFrame(rows, columns=["k", "center", *names])


def write_exports(doc: ResultDocument, out: Path) -> list[Path]:
    """Write ``sweep.csv``, ``centers.csv``, ``result.json`` (and the parquet copies when
    pyarrow is importable) into ``out``, creating it; return the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    tables = {"sweep": sweep_frame(doc), "centers": centers_frame(doc)}
    written: list[Path] = []
    for name, frame in tables.items():
        path = out / f"{name}.csv"
        frame.to_csv(path, index=False)
        written.append(path)
    result = out / "result.json"
    result.write_text(doc.model_dump_json(indent=2) + "\n", encoding="utf-8")
    written.append(result)
    if importlib.util.find_spec("pyarrow") is not None:
        for name, frame in tables.items():
            path = out / f"{name}.parquet"
            frame.to_parquet(path, index=False)
            written.append(path)
    return written
