"""Read a participant's table from Parquet or CSV chunk by chunk, never whole.

:func:`parquet_rows` and :func:`csv_rows` return a :class:`protocol.maths.rows.ChunkedRows`: every
statistic that is a sum over rows (FCM sums, FedFuzzDB sums, silhouette, moments, a k-means
step) re-reads the file in chunks of ``chunk_rows`` rows (from a memory budget, default
256 MiB) and folds its fixed blocks, so memory stays at one chunk whatever the file's size
and the result is bit for bit the in-memory one. Algorithms that need all rows at once (a
local FCM fit, k-means++ seeding) read them whole with ``in_memory()``.

Columns: the named ones, else every numeric column (as :func:`fedclust.data.loaders.load_dataset`
chooses them). A missing or non-finite value fails the statistic with a message naming the
file, never a value.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from fedclust.core.validation import FloatArray
from fedclust.data.loaders import csv_layout
from fedclust.protocol.maths.rows import DEFAULT_BUDGET_BYTES, ChunkedRows, chunk_rows

__all__ = ["csv_rows", "parquet_rows"]


def _is_number_type(t: pa.DataType) -> bool:
    return bool(pa.types.is_integer(t) or pa.types.is_floating(t))


def _matrix(batch: pa.RecordBatch | pa.Table, names: Sequence[str], source: str) -> FloatArray:
    """The named columns of a batch as one (rows, columns) float64 array."""
    out = np.empty((batch.num_rows, len(names)))
    for j, name in enumerate(names):
        column = batch.column(name)
        if column.null_count:
            raise ValueError(f"column {name!r} of {source} has missing values.")
        out[:, j] = column.to_numpy()
    return out


def _chosen(schema: pa.Schema, columns: Sequence[str] | None, source: str) -> tuple[str, ...]:
    if columns is None:
        names = tuple(f.name for f in schema if _is_number_type(f.type))
        if not names:
            raise ValueError(f"{source} has no numeric column.")
        return names
    for name in columns:
        if name not in schema.names:
            raise ValueError(
                f"{source} has no column {name!r}; available columns: "
                f"{', '.join(repr(c) for c in schema.names)}."
            )
        if not _is_number_type(schema.field(name).type):
            raise ValueError(f"column {name!r} of {source} is not numeric.")
    return tuple(columns)


def parquet_rows(
    path: str | os.PathLike[str],
    *,
    columns: Sequence[str] | None = None,
    budget_bytes: int = DEFAULT_BUDGET_BYTES,
) -> ChunkedRows:
    """The rows of a Parquet file, read ``chunk_rows`` at a time (row count from its footer)."""
    p = Path(path)
    source = f"data file {p}"
    try:
        meta = pq.ParquetFile(p)
    except (OSError, pa.ArrowInvalid) as exc:
        raise ValueError(f"{source} cannot be read as Parquet ({exc}).") from None
    names = _chosen(meta.schema_arrow, columns, source)
    batch = chunk_rows(len(names), budget_bytes=max(1, budget_bytes // 2))  # Arrow + matrix

    def read() -> Iterator[FloatArray]:
        # No pre-buffering, small reads: memory stays near one row group plus one batch.
        with pq.ParquetFile(p, pre_buffer=False, buffer_size=1 << 22) as f:
            for b in f.iter_batches(batch_size=batch, columns=list(names)):
                yield _matrix(b, names, source)

    return ChunkedRows(read, n_rows=meta.metadata.num_rows, n_features=len(names), name=source)


def csv_rows(
    path: str | os.PathLike[str],
    *,
    columns: Sequence[str] | None = None,
    budget_bytes: int = DEFAULT_BUDGET_BYTES,
) -> ChunkedRows:
    """The rows of a CSV file (optionally gzip), streamed by pyarrow in chunks of about the
    budget; one pass at construction counts the rows and checks the columns' types."""
    p = Path(path)
    source = f"data file {p}"
    if not p.is_file():
        raise FileNotFoundError(f"data file not found: {p}")
    layout = csv_layout(p)
    if layout is None:
        raise ValueError(
            f"{source} cannot be streamed (ARFF, or text starting with a blank line); load it "
            "with fedclust.data.loaders.load_dataset."
        )
    delimiter, header_names, header = layout
    read_options = pa_csv.ReadOptions(
        column_names=list(header_names), skip_rows=1 if header else 0,
        block_size=max(1 << 20, min(budget_bytes, 1 << 30) // 4),  # text, Arrow, matrix
    )
    parse_options = pa_csv.ParseOptions(delimiter=delimiter)

    def batches(types: dict[str, pa.DataType]) -> Iterator[pa.RecordBatch]:
        convert = pa_csv.ConvertOptions(column_types=types)
        try:
            with pa_csv.open_csv(
                p, read_options=read_options, parse_options=parse_options,
                convert_options=convert,
            ) as reader:
                yield from reader
        except pa.ArrowInvalid as exc:
            raise ValueError(f"{source} has a malformed row or a non-numeric value.") from exc

    first = next(batches({}), None)  # types as inferred from the first block
    if first is None:
        raise ValueError(f"{source} contains no data rows.")
    names = _chosen(first.schema, columns, source)
    as_float = {name: pa.float64() for name in names}  # the same type in every block
    n_rows = sum(b.num_rows for b in batches(as_float))

    def read() -> Iterator[FloatArray]:
        for b in batches(as_float):
            yield _matrix(b, names, source)

    return ChunkedRows(read, n_rows=n_rows, n_features=len(names), name=source)
