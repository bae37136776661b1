"""Result exports: a result document as files in a directory.

``sweep.csv`` and ``centers.csv`` are the tables of :mod:`protocol.wire.result_tables` (the
coordinator serves the same CSV); ``result.json`` is exactly the ``--json`` document. Parquet
copies of the two tables are written when pyarrow is importable.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path

from fedclust.protocol.wire.messages import ResultDocument
from fedclust.protocol.wire.result_tables import (
    TABLES,
    centers_frame,
    feature_names,
    sweep_frame,
    table_csv,
)

__all__ = ["centers_frame", "feature_names", "sweep_frame", "with_feature_names", "write_exports"]


def with_feature_names(doc: ResultDocument, names: Sequence[str] | None) -> ResultDocument:
    """The document with ``feature_names`` set to ``names``; unchanged without names (so a
    simulation of unnamed data gives the service's document; tables and exports then name
    the columns ``x0 .. x{D-1}``, see :func:`feature_names`)."""
    if names is None:
        return doc
    return doc.model_copy(update={"feature_names": list(names)})


def write_exports(doc: ResultDocument, out: Path) -> list[Path]:
    """Write ``sweep.csv``, ``centers.csv``, ``result.json`` (and the parquet copies when
    pyarrow is importable) into ``out``, creating it; return the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    tables = {name: table(doc) for name, table in TABLES.items()}
    written: list[Path] = []
    for name, frame in tables.items():
        path = out / f"{name}.csv"
        path.write_text(table_csv(frame), encoding="utf-8")
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
