"""A participant's rows, validated once and read in fixed blocks, in memory or streamed.

Every local statistic is a sum over rows. It is computed as a left fold over fixed blocks of
``BLOCK_ROWS`` rows: block b (rows [bB, (b+1)B), the last one shorter) gives a partial sum,
and the partials are added in block order, total = ((0 + p_0) + p_1) + .... Block boundaries
depend on the row index only, so a statistic is the same *bit for bit* whether the rows come
from one array, from chunks of any size (a file read ``chunk_rows`` at a time) or from a Dask
array (``participant.dask_backend``): a chunk only decides how many blocks are in memory.

:class:`Rows` holds an in-memory array checked once (finite float64, C-contiguous) together
with the squared norms ||x_j||² of its rows, computed once per job; :func:`stream_blocks`
turns an iterable of chunks of any sizes into the same blocks with the same norms.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from functools import cache
from typing import Any, TypeAlias, TypeVar

import numpy as np
from numpy.typing import ArrayLike
from threadpoolctl import ThreadpoolController

from fedclust.core.validation import FloatArray, check_data

__all__ = [
    "BLOCK_ROWS",
    "DEFAULT_BUDGET_BYTES",
    "THREADS",
    "Block",
    "BlockSource",
    "ChunkedRows",
    "Partial",
    "RowSource",
    "Rows",
    "as_rows",
    "as_source",
    "blas_threads",
    "chunk_rows",
    "fold",
    "largest_magnitude",
    "map_in_order",
    "pin_blas_threads",
    "stream_blocks",
    "sum_in_order",
]

#: Rows per block: results depend on it (summation order), never on a chunk size.
BLOCK_ROWS = 4096
#: Default memory for the rows of one chunk read from a file or held by one Dask task.
DEFAULT_BUDGET_BYTES = 256 * 2**20
#: Threads that compute blocks in parallel (``FEDCLUST_THREADS``; default 1: a participant's
#: machine is usually busy with other work, where more threads only contend for the cores).
THREADS = max(1, int(os.environ.get("FEDCLUST_THREADS", "1")))

S = TypeVar("S")
T = TypeVar("T")

#: One block: its rows (B, D) and their squared norms (B,).
Block: TypeAlias = tuple[FloatArray, FloatArray]
#: Anything yielding the blocks of some rows in order: a :class:`Rows`, a stream.
BlockSource: TypeAlias = Iterable[Block]
#: A block's partial sums: (rows, squared norms) -> a tuple of arrays or floats.
Partial: TypeAlias = Callable[[FloatArray, FloatArray], tuple[Any, ...]]

@cache
def _controller() -> ThreadpoolController:
    return ThreadpoolController()


_pinned: list[int] = []  # the thread count pin_blas_threads set for the whole process


def pin_blas_threads(n: int = 1) -> None:
    """Hold BLAS at ``n`` threads for the rest of the process, so that :func:`blas_threads`
    costs nothing. For a participant agent: every product it computes is a block product,
    and a per-statistic limit is both slow (it queries and sets every BLAS library) and, in
    an agent answering from several threads, racy (one thread restores what another set)."""
    _controller().limit(limits=n, user_api="blas")  # kept: never restored
    _pinned[:] = [n]


def blas_threads(n: int = 1) -> AbstractContextManager[Any]:
    """Limit BLAS to ``n`` threads: the block products (B x D by D x K) are too small to gain
    from threads, and threads oversubscribe a machine the participant shares. A no-op where
    :func:`pin_blas_threads` already holds BLAS at ``n``."""
    if _pinned == [n]:
        return nullcontext()
    limiter: AbstractContextManager[Any] = _controller().limit(limits=n, user_api="blas")
    return limiter


def chunk_rows(n_features: int, *, budget_bytes: int = DEFAULT_BUDGET_BYTES) -> int:
    """Rows per chunk: the largest multiple of ``BLOCK_ROWS`` whose float64 rows fit the budget
    (at least one block)."""
    if n_features < 1:
        raise ValueError(f"n_features must be >= 1; got {n_features}.")
    if budget_bytes < 1:
        raise ValueError(f"budget_bytes must be positive; got {budget_bytes}.")
    blocks = budget_bytes // (8 * n_features * BLOCK_ROWS)
    return BLOCK_ROWS * max(1, int(blocks))


def _sq_norms(xb: FloatArray) -> FloatArray:
    out: FloatArray = np.einsum("ij,ij->i", xb, xb)
    return out


class RowSource(ABC):
    """Rows of known shape whose blocks can be read, in order, any number of times."""

    @property
    @abstractmethod
    def n_rows(self) -> int: ...

    @property
    @abstractmethod
    def n_features(self) -> int: ...

    @abstractmethod
    def __iter__(self) -> Iterator[Block]: ...

    @abstractmethod
    def in_memory(self) -> Rows:
        """All rows as one array, for the algorithms that need random access."""

    def fold(self, partial: Partial) -> tuple[Any, ...]:
        """Σ of ``partial`` over the blocks in block order (see :func:`fold`); a source
        that can compute the partials elsewhere (a Dask cluster) overrides this."""
        with blas_threads(1):
            return sum_in_order(map_in_order(lambda block: partial(*block), self))


@dataclass(frozen=True, eq=False)
class Rows(RowSource):
    """Rows in memory, checked once, with ||x_j||² computed once; iterating yields the blocks.

    Build with :func:`as_rows`. The rows are shared, never copied per job.
    """

    X: FloatArray
    sq_norms: FloatArray = field(repr=False)

    @property
    def n_rows(self) -> int:
        return int(self.X.shape[0])

    @property
    def n_features(self) -> int:
        return int(self.X.shape[1])

    def in_memory(self) -> Rows:
        return self

    def __iter__(self) -> Iterator[Block]:
        for start in range(0, self.n_rows, BLOCK_ROWS):
            stop = min(start + BLOCK_ROWS, self.n_rows)
            yield self.X[start:stop], self.sq_norms[start:stop]


class ChunkedRows(RowSource):
    """Rows read afresh, chunk by chunk, each time they are iterated (a file, a cursor).

    Args:
        read: returns an iterable of 2-D chunks (any row counts) holding the rows in order.
        n_rows, n_features: the shape the chunks add up to (checked while reading).
        name: how messages name the rows.
    """

    def __init__(
        self, read: Callable[[], Iterable[ArrayLike]], *, n_rows: int, n_features: int,
        name: str = "X",
    ) -> None:
        self._read = read
        self._n_rows = n_rows
        self._n_features = n_features
        self._name = name

    @property
    def n_rows(self) -> int:
        return self._n_rows

    @property
    def n_features(self) -> int:
        return self._n_features

    def __iter__(self) -> Iterator[Block]:
        seen = 0
        for xb, nb in stream_blocks(self._read(), name=self._name):
            if xb.shape[1] != self._n_features:
                raise ValueError(
                    f"{self._name} has {xb.shape[1]} columns; expected {self._n_features}."
                )
            seen += xb.shape[0]
            if seen > self._n_rows:
                raise ValueError(f"{self._name} holds more than the {self._n_rows} rows expected.")
            yield xb, nb
        if seen != self._n_rows:
            raise ValueError(f"{self._name} held {seen} rows; expected {self._n_rows}.")

    def in_memory(self) -> Rows:
        X = np.empty((self._n_rows, self._n_features))
        start = 0
        for xb, _ in self:
            X[start : start + xb.shape[0]] = xb
            start += xb.shape[0]
        return as_rows(X, name=self._name)


def largest_magnitude(source: RowSource) -> float:
    """max |x| over all values of the rows, one pass block by block without a copy."""
    if isinstance(source, Rows):
        return max(float(source.X.max()), -float(source.X.min()))
    return max(max(float(xb.max()), -float(xb.min())) for xb, _ in source)


def as_source(X: ArrayLike | RowSource, *, name: str = "X") -> RowSource:
    """A :class:`RowSource` as is; anything else checked into :class:`Rows`."""
    return X if isinstance(X, RowSource) else as_rows(X, name=name)


def as_rows(X: ArrayLike | RowSource, *, name: str = "X") -> Rows:
    """``X`` in memory as :class:`Rows` (checked by ``check_data``; a source is read whole)."""
    if isinstance(X, RowSource):
        return X.in_memory()
    arr = check_data(X, name=name)
    norms = np.empty(arr.shape[0])
    for start in range(0, arr.shape[0], BLOCK_ROWS):
        stop = min(start + BLOCK_ROWS, arr.shape[0])
        norms[start:stop] = _sq_norms(arr[start:stop])
    return Rows(X=arr, sq_norms=norms)


def stream_blocks(chunks: Iterable[ArrayLike], *, name: str = "X") -> Iterator[Block]:
    """The blocks of the rows that ``chunks`` (2-D arrays of any row counts) hold in order.

    Each chunk is checked (finite, numeric, same width); rows are regrouped so that the
    blocks, and so every statistic, are those of the concatenated array.
    """
    pending: list[FloatArray] = []
    held = 0
    width: int | None = None
    for index, chunk in enumerate(chunks):
        arr = check_data(chunk, name=f"{name} chunk {index}")
        if width is None:
            width = arr.shape[1]
        elif arr.shape[1] != width:
            raise ValueError(
                f"{name} chunk {index} has {arr.shape[1]} columns; earlier chunks have {width}."
            )
        pending.append(arr)
        held += arr.shape[0]
        if held < BLOCK_ROWS:
            continue
        joined = pending[0] if len(pending) == 1 else np.concatenate(pending)
        whole = (held // BLOCK_ROWS) * BLOCK_ROWS
        for start in range(0, whole, BLOCK_ROWS):
            xb = np.ascontiguousarray(joined[start : start + BLOCK_ROWS])
            yield xb, _sq_norms(xb)
        rest = joined[whole:]
        pending = [rest] if rest.shape[0] else []
        held = rest.shape[0]
    if held:
        xb = np.ascontiguousarray(np.concatenate(pending))
        yield xb, _sq_norms(xb)


def fold(source: BlockSource, partial: Partial) -> tuple[Any, ...]:
    """Σ over blocks of ``partial(rows, sq_norms)`` (a tuple of arrays or floats), added in block
    order starting from zeros: the summation order that makes results chunk-independent."""
    if isinstance(source, np.ndarray):
        raise TypeError("fold needs blocks (a RowSource or stream_blocks), not a bare array.")
    if isinstance(source, RowSource):
        return source.fold(partial)
    with blas_threads(1):
        return sum_in_order(map_in_order(lambda block: partial(*block), source))


def map_in_order(
    fn: Callable[[S], T], blocks: Iterable[S], *, threads: int | None = None
) -> Iterator[T]:
    """``fn`` of every block (or item naming one), in order, by ``threads`` threads (default
    :data:`THREADS`), at most two blocks per thread in flight so memory stays bounded.

    numpy releases the GIL in its kernels, so blocks run in parallel; the results come back
    in order, so a fold of them is the same whatever the thread count.
    """
    n = THREADS if threads is None else threads
    if n <= 1:
        yield from map(fn, blocks)
        return
    with ThreadPoolExecutor(max_workers=n) as pool:
        window: deque[Future[T]] = deque()
        for block in blocks:
            window.append(pool.submit(fn, block))
            if len(window) >= 2 * n:
                yield window.popleft().result()
        while window:
            yield window.popleft().result()


def sum_in_order(partials: Iterable[tuple[Any, ...]]) -> tuple[Any, ...]:
    """Element-wise Σ of tuples of partial sums, added in the given order from zeros."""
    totals: list[Any] | None = None
    for parts in partials:
        if totals is None:
            totals = [np.zeros_like(p) if isinstance(p, np.ndarray) else 0.0 for p in parts]
        for i, p in enumerate(parts):
            totals[i] = totals[i] + p
    if totals is None:
        raise ValueError("no rows: the block source yielded nothing.")
    return tuple(totals)
