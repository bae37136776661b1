"""One organisation's local statistics over its own Dask cluster, equal to numpy's bit for bit.

When an organisation's rows outgrow one machine, its agent keeps them in a ``dask.array``
(rows × features, e.g. read from Parquet with ``dask.dataframe``) and wraps it in
:class:`DaskRows`. Every statistic of ``protocol`` is a fold of per-block partial sums
(``protocol.maths.rows``): here the workers compute the partials of the blocks of their chunks
(each chunk a whole number of ``BLOCK_ROWS`` blocks, so the blocks are those of the
in-memory array), only the (blocks × statistic size) partials travel back, and the agent adds
them in block order. The statistics are therefore the numpy ones, bit for bit, for any
cluster layout; e.g. ``exact_fcm.participant_sums(DaskRows(X), C, m=2.0)``.

Needs the optional extra ``fedclust[dask]``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import dask.array as da
import numpy as np

from fedclust.core.validation import FloatArray
from fedclust.protocol.maths.rows import (
    BLOCK_ROWS,
    DEFAULT_BUDGET_BYTES,
    Block,
    Partial,
    Rows,
    RowSource,
    as_rows,
    blas_threads,
    chunk_rows,
    sum_in_order,
)

__all__ = ["DaskRows"]


def _layout(parts: tuple[Any, ...]) -> list[tuple[int, ...]]:
    return [np.shape(p) for p in parts]


def _pack(parts: tuple[Any, ...]) -> FloatArray:
    return np.concatenate([np.ravel(np.asarray(p, dtype=np.float64)) for p in parts])


def _unpack(flat: FloatArray, layout: list[tuple[int, ...]]) -> tuple[Any, ...]:
    out: list[Any] = []
    start = 0
    for shape in layout:
        size = math.prod(shape)
        piece = flat[start : start + size]
        out.append(float(piece[0]) if shape == () else piece.reshape(shape).copy())
        start += size
    return tuple(out)


def _chunk_partials(chunk: FloatArray, partial: Partial, width: int) -> FloatArray:
    """The packed partials of the blocks of one chunk, one row per block (on a worker)."""
    rows = as_rows(chunk)
    out = np.empty((math.ceil(rows.n_rows / BLOCK_ROWS), width))
    with blas_threads(1):
        for i, (xb, nb) in enumerate(rows):
            out[i] = _pack(partial(xb, nb))
    return out


class DaskRows(RowSource):
    """A ``dask.array`` of rows (n_samples, n_features) as a :class:`RowSource`.

    Args:
        X: the rows; the row count must be known (no NaN chunk sizes). It is rechunked so
            that each chunk holds a whole number of blocks and at most ``budget_bytes``.
        budget_bytes: the memory of one chunk's rows on a worker.
    """

    def __init__(self, X: da.Array, *, budget_bytes: int = DEFAULT_BUDGET_BYTES) -> None:
        if X.ndim != 2:
            raise ValueError(
                f"X must be a 2-D dask array (n_samples, n_features); got shape {X.shape}."
            )
        if any(math.isnan(c) for c in X.chunks[0]):
            raise ValueError("X has unknown chunk sizes; call compute_chunk_sizes() first.")
        if X.shape[0] < 1 or X.shape[1] < 1:
            raise ValueError(f"X must have at least one row and one column; got {X.shape}.")
        rows = chunk_rows(int(X.shape[1]), budget_bytes=budget_bytes)
        floats = X.astype(np.float64)  # type: ignore[no-untyped-call]
        self._X = floats.rechunk({0: rows, 1: -1})

    @property
    def n_rows(self) -> int:
        return int(self._X.shape[0])

    @property
    def n_features(self) -> int:
        return int(self._X.shape[1])

    def fold(self, partial: Partial) -> tuple[Any, ...]:
        """Partials computed on the workers, added here in block order."""
        first = self._X[: min(BLOCK_ROWS, self.n_rows)].compute()
        probe = partial(first, np.einsum("ij,ij->i", first, first))
        layout = _layout(probe)
        width = sum(math.prod(s) for s in layout)
        chunks = tuple(math.ceil(c / BLOCK_ROWS) for c in self._X.chunks[0])
        partials = self._X.map_blocks(
            _chunk_partials, partial, width, dtype=np.float64, chunks=(chunks, (width,))
        ).compute()
        return sum_in_order(_unpack(row, layout) for row in partials)

    def __iter__(self) -> Iterator[Block]:
        for start in range(0, self.n_rows, BLOCK_ROWS):
            yield from as_rows(self._X[start : start + BLOCK_ROWS].compute())

    def in_memory(self) -> Rows:
        return as_rows(self._X.compute())
