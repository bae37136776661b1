"""A result document as tables: the one schema of ``sweep.csv`` and ``centers.csv``.

``sweep`` has one row per K; ``centers`` one row per released center of every K (long
format: columns ``k``, ``center``, ``selected`` and the feature names). Every column has one
type whatever the run (:data:`SWEEP_COLUMNS`, :data:`CENTER_KEYS`, the features float64), so
the tables of several runs read as one dataset: a score a run has not (ARI without labels)
is a missing float64, never a column of another type. The command line's exports
(``fedclust.exports``) and the coordinator's ``GET /jobs/{id}/result/{table}.csv`` both
build their files here, so a download and an export of one result are the same CSV.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Final, Literal

import pandas as pd

from fedclust.protocol.wire.messages import ResultDocument

__all__ = [
    "CENTER_KEYS", "SWEEP_COLUMNS", "TABLES", "TableName", "centers_frame", "feature_names",
    "sweep_frame", "table_csv",
]

TableName = Literal["sweep", "centers"]


def feature_names(doc: ResultDocument) -> list[str]:
    """The document's feature names, or ``x0 .. x{D-1}`` when it carries none."""
    if doc.feature_names is not None:
        return list(doc.feature_names)
    width = next((len(row) for e in doc.sweep for row in e.centers if row is not None), 0)
    return [f"x{i}" for i in range(width)]


#: The columns of :func:`sweep_frame` and their pandas dtypes.
SWEEP_COLUMNS: Final[dict[str, str]] = {
    "k": "int64", "fed_fuzzy_db": "float64", "simplified_silhouette": "float64",
    "rounds": "int64", "stop_reason": "string", "ari": "float64",
    "client_weighted_ari": "float64", "empty_clusters": "int64", "selected": "bool",
    "elbow": "bool",
}
#: The leading columns of :func:`centers_frame` (then one float64 column per feature).
CENTER_KEYS: Final[dict[str, str]] = {"k": "int64", "center": "int64", "selected": "bool"}


def sweep_frame(doc: ResultDocument) -> pd.DataFrame:
    """One row per K: the scores, rounds, stop reason, pooled and client-weighted ARI
    (NaN without labels), empty clusters, and whether it is the selected or the elbow K."""
    rows = [
        (e.k, e.fed_fuzzy_db, e.simplified_silhouette, e.rounds, e.stop_reason,
         _float(e.ari), _float(e.client_weighted_ari), e.empty_clusters,
         e.k == doc.k_selected, e.k == doc.k_elbow)
        for e in doc.sweep
    ]
    return pd.DataFrame(rows, columns=list(SWEEP_COLUMNS)).astype(SWEEP_COLUMNS)


def centers_frame(doc: ResultDocument) -> pd.DataFrame:
    """One row per released center of every K (withheld centers are left out); ``selected``
    marks the rows of the selected K."""
    names = feature_names(doc)
    rows: list[list[object]] = []
    for entry in doc.sweep:
        for j, row in enumerate(entry.centers):
            if row is None:
                continue
            if len(row) != len(names):
                raise ValueError(
                    f"K={entry.k}: center {j} has {len(row)} values but the document names "
                    f"{len(names)} features; fix feature_names in the result document."
                )
            rows.append([entry.k, j, entry.k == doc.k_selected, *row])
    dtypes = {**CENTER_KEYS, **dict.fromkeys(names, "float64")}
    return pd.DataFrame(rows, columns=list(dtypes)).astype(dtypes)


def _float(value: float | None) -> float:
    """A score, NaN where the run has none (a float64 column's missing value)."""
    return math.nan if value is None else value


#: The tables of a result, by the name of their file (``NAME.csv``, ``NAME.parquet``).
TABLES: Final[dict[TableName, Callable[[ResultDocument], pd.DataFrame]]] = {
    "sweep": sweep_frame, "centers": centers_frame,
}


def table_csv(frame: pd.DataFrame) -> str:
    """The CSV text of a table: a header row, no index column."""
    text: str = frame.to_csv(index=False)
    return text
