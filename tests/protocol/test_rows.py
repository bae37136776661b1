"""Block-folded statistics: the same bits however the rows are chunked (protocol.maths.rows)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import nullcontext
from typing import Any

import numpy as np
import pytest
from threadpoolctl import threadpool_info

from fedclust.core.validation import FloatArray
from fedclust.protocol.maths import exact_fcm, federated_kmeans, standardise, validity
from fedclust.protocol.maths._fuzzy import Centers, membership_sums, objective
from fedclust.protocol.maths.fcm import fcm
from fedclust.protocol.maths.kfed import pruned_sums_block
from fedclust.protocol.maths.rows import (
    BLOCK_ROWS,
    ChunkedRows,
    RowSource,
    as_rows,
    blas_threads,
    chunk_rows,
    fold,
    pin_blas_threads,
    stream_blocks,
)

N = 3 * BLOCK_ROWS + 123
# 1 row, sizes that do not divide N or BLOCK_ROWS, one block, several blocks, all rows.
CHUNKS = (1, 999, BLOCK_ROWS - 1, BLOCK_ROWS, 2 * BLOCK_ROWS + 17, N)


def _data() -> tuple[FloatArray, FloatArray]:
    rng = np.random.default_rng(7)
    means = np.array([[0.0, 0.0, 0.0], [6.0, 0.0, 1.0], [0.0, 5.0, -3.0], [4.0, 4.0, 4.0]])
    X = means[rng.integers(0, 4, size=N)] + rng.standard_normal((N, 3))
    C = means + 0.5 * rng.standard_normal(means.shape)
    return X, C


def _chunked(X: FloatArray, size: int) -> ChunkedRows:
    def read() -> Iterator[FloatArray]:
        for start in range(0, X.shape[0], size):
            yield X[start : start + size].copy()  # fresh arrays, as a file reader gives

    return ChunkedRows(read, n_rows=X.shape[0], n_features=X.shape[1])


def _flat(value: Any) -> list[FloatArray]:
    if hasattr(value, "__dataclass_fields__"):
        return [np.asarray(getattr(value, f)) for f in value.__dataclass_fields__]
    return [np.asarray(v) for v in (value if isinstance(value, tuple) else (value,))]


STATISTICS: dict[str, Callable[[RowSource, FloatArray], Any]] = {
    "fcm sums": lambda r, C: exact_fcm.participant_sums(r, C, m=2.0),
    "fcm sums m=1.7": lambda r, C: exact_fcm.participant_sums(r, C, m=1.7),
    "objective": lambda r, C: objective(r, C, 2.0),
    "membership sums": lambda r, C: membership_sums(r, C, 2.0),
    "fuzzy db q=1": lambda r, C: validity.participant_fuzzy_db_sums(r, C, m=2.0, q=1.0),
    "fuzzy db q=2": lambda r, C: validity.participant_fuzzy_db_sums(r, C, m=2.0, q=2.0),
    "fuzzy db q=3": lambda r, C: validity.participant_fuzzy_db_sums(r, C, m=1.5, q=3.0),
    "silhouette": lambda r, C: validity.participant_silhouette_sums(r, C),
    "moments": lambda r, C: standardise.participant_moments(r),
    "shifted moments": lambda r, C: standardise.participant_moments(r, shift=C[1]),
    "k-means step": lambda r, C: federated_kmeans.participant_step(r, C, p=2),
    "k-FED pruning": lambda r, C: fold(r, lambda xb, nb: pruned_sums_block(xb, nb, Centers.of(C))),
}


@pytest.mark.parametrize("name", sorted(STATISTICS))
@pytest.mark.parametrize("size", CHUNKS)
def test_chunked_equals_unchunked_bit_for_bit(name: str, size: int) -> None:
    X, C = _data()
    statistic = STATISTICS[name]
    whole = _flat(statistic(as_rows(X), C))
    chunked = _flat(statistic(_chunked(X, size), C))
    assert len(whole) == len(chunked) > 0
    for a, b in zip(whole, chunked, strict=True):
        assert a.shape == b.shape
        assert np.array_equal(a, b), f"{name} differs with chunks of {size} rows"


def test_block_fold_matches_the_dense_formulas() -> None:
    # The fold changes only the summation order: the dense sums agree to rounding.
    X, C = _data()
    sums = exact_fcm.participant_sums(X, C, m=2.0)
    d2 = ((X[:, None, :] - C[None, :, :]) ** 2).sum(axis=2)
    U = (1.0 / d2) / (1.0 / d2).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(sums.u_sum, (U**2).sum(axis=0), rtol=1e-12)
    np.testing.assert_allclose(sums.weighted_sum, (U**2).T @ X, rtol=1e-12)
    moments = standardise.participant_moments(X)
    np.testing.assert_allclose(moments.sum_sq, (X**2).sum(axis=0), rtol=1e-12)


def test_stream_blocks_regroups_chunks_into_the_same_blocks() -> None:
    X, _ = _data()
    chunks = [X[:5], X[5:5000], X[5000:5001], X[5001:]]
    streamed = list(stream_blocks(chunks))
    direct = list(as_rows(X))
    assert len(streamed) == len(direct) == 4
    for (xa, na), (xb, nb) in zip(streamed, direct, strict=True):
        assert np.array_equal(xa, xb)
        assert np.array_equal(na, nb)


def test_fcm_on_a_chunked_source_equals_fcm_in_memory() -> None:
    X, C = _data()
    a = fcm(X, 4, init=C, tol=0.0, max_iter=3)
    b = fcm(_chunked(X, 1000), 4, init=C, tol=0.0, max_iter=3)
    assert np.array_equal(a.centers, b.centers)


def test_chunk_rows_follows_the_memory_budget() -> None:
    assert chunk_rows(16, budget_bytes=256 * 2**20) == 2**21  # 256 MiB of 16 float64 columns
    assert chunk_rows(16, budget_bytes=1) == BLOCK_ROWS  # never less than one block
    assert chunk_rows(3, budget_bytes=10 * BLOCK_ROWS * 24 + 5) == 10 * BLOCK_ROWS
    with pytest.raises(ValueError, match="budget_bytes must be positive"):
        chunk_rows(3, budget_bytes=0)


def test_a_source_with_the_wrong_row_count_is_refused() -> None:
    X, C = _data()
    short = ChunkedRows(lambda: [X[:100]], n_rows=200, n_features=3, name="data.parquet")
    with pytest.raises(ValueError, match=r"data\.parquet held 100 rows; expected 200"):
        exact_fcm.participant_sums(short, C, m=2.0)
    long = ChunkedRows(lambda: [X[:5000]], n_rows=4096, n_features=3, name="data.csv")
    with pytest.raises(ValueError, match=r"data\.csv holds more than the 4096 rows expected"):
        validity.participant_silhouette_sums(long, C)


def test_a_bad_chunk_is_named() -> None:
    X, C = _data()
    bad = X[:10].copy()
    bad[3, 1] = np.nan
    source = ChunkedRows(lambda: [X[:10], bad], n_rows=20, n_features=3)
    with pytest.raises(ValueError, match="X chunk 1 contains NaN or infinity"):
        exact_fcm.participant_sums(source, C, m=2.0)


def test_fold_refuses_a_bare_array() -> None:
    X, _ = _data()
    with pytest.raises(TypeError, match="not a bare array"):
        fold(X, lambda xb, nb: (xb.sum(),))


def test_pinned_blas_makes_the_per_statistic_limit_free() -> None:
    pin_blas_threads(1)  # what an agent does at start-up (process-wide, like the agents' tests)
    assert isinstance(blas_threads(1), nullcontext)
    blas = [lib for lib in threadpool_info() if lib["user_api"] == "blas"]
    assert blas and all(lib["num_threads"] == 1 for lib in blas)
    limiter = blas_threads(2)  # another count still limits (and restores on exit)
    assert not isinstance(limiter, nullcontext)
    with limiter:
        pass
    assert all(lib["num_threads"] == 1 for lib in threadpool_info() if lib["user_api"] == "blas")
