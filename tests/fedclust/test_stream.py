"""The pyarrow loader path and the chunked Parquet/CSV sources (fedclust.data)."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fedclust.core.validation import FloatArray
from fedclust.data.loaders import _fast_dataset, _from_table, load_dataset, load_table
from fedclust.data.stream import csv_rows, parquet_rows
from fedclust.protocol.maths import exact_fcm, standardise, validity
from fedclust.protocol.maths.rows import BLOCK_ROWS, as_rows

N = 2 * BLOCK_ROWS + 333


def _frame() -> tuple[pd.DataFrame, FloatArray]:
    rng = np.random.default_rng(11)
    X = rng.standard_normal((N, 3)) * [1.0, 10.0, 0.1] + [0.0, 5.0, -2.0]
    frame = pd.DataFrame({
        "a": X[:, 0], "site": rng.choice(["north", "south"], size=N), "b": X[:, 1],
        "count": rng.integers(0, 9, size=N), "c": X[:, 2],
    })
    return frame, X


def _exact(path: Path, **kw: object) -> object:
    return _from_table(load_table(path), **kw)  # type: ignore[arg-type]


# -- the pyarrow path of load_dataset --------------------------------------------------------
def test_pandas_written_csv_is_read_exactly_by_the_fast_path(tmp_path: Path) -> None:
    frame, X = _frame()
    f = tmp_path / "p.csv"
    frame.to_csv(f, index=False, float_format="%.17g")
    fast = _fast_dataset(f, columns=None, split_by="site", label_column=None)
    assert fast is not None  # pyarrow, not the line parser, read it
    assert fast.feature_names == ("a", "b", "count", "c")
    np.testing.assert_array_equal(fast.X[:, [0, 1, 3]], X)
    exact = _exact(f, columns=None, split_by="site", label_column=None)
    np.testing.assert_array_equal(fast.X, exact.X)  # type: ignore[attr-defined]
    assert fast.groups is not None and list(fast.groups[:5]) == list(frame["site"][:5])


def test_the_matrix_grows_when_the_row_estimate_is_short(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import fedclust.data.loaders as loaders

    frame, X = _frame()
    f = tmp_path / "g.csv"
    frame.to_csv(f, index=False, float_format="%.17g")
    monkeypatch.setattr(loaders, "_row_estimate", lambda path: 10)
    data = loaders._fast_dataset(f, columns=["a", "b", "c"], split_by=None, label_column=None)
    assert data is not None  # read by pyarrow, growing the matrix from 10 rows
    np.testing.assert_array_equal(data.X, X)
    assert data.X.flags.c_contiguous and data.X.shape == X.shape


def test_fast_path_matches_the_exact_parser_on_awkward_text(tmp_path: Path) -> None:
    # semicolons, quotes, CRLF, gzip, spaces after delimiters, a categorical label
    text = '"x";"job";"y";"lab"\r\n1;"a b";2.5;"no"\r\n3;"c";-4e3;"yes"\r\n5;"c"; 6;"no"\r\n'
    f = tmp_path / "w.csv.gz"
    f.write_bytes(gzip.compress(text.encode()))
    fast = _fast_dataset(f, columns=None, split_by="job", label_column="lab")
    assert fast is not None
    exact = load_table(f)
    ref = _from_table(exact, columns=None, split_by="job", label_column="lab")
    np.testing.assert_array_equal(fast.X, ref.X)
    assert fast.feature_names == ref.feature_names == ("x", "y")
    assert fast.y is not None and ref.y is not None
    assert list(fast.y) == list(ref.y) and fast.label_names == ref.label_names
    assert fast.groups is not None and list(fast.groups) == ["a b", "c", "c"]


def test_a_space_before_a_quote_falls_back_to_the_exact_parser(tmp_path: Path) -> None:
    f = tmp_path / "s.csv"
    f.write_text('x,job\n1, "a, b"\n2,c\n')
    assert _fast_dataset(f, columns=None, split_by="job", label_column=None) is None
    data = load_dataset(f, split_by="job")
    assert data.groups is not None and list(data.groups) == ["a, b", "c"]


def test_irregular_files_fall_back_to_the_exact_messages(tmp_path: Path) -> None:
    ragged = tmp_path / "r.csv"
    ragged.write_text("a,b\n1,2\n3\n4,5\n")
    assert _fast_dataset(ragged, columns=None, split_by=None, label_column=None) is None
    with pytest.raises(ValueError, match=r"line 3 has 1 fields; expected 2"):
        load_dataset(ragged)
    text = tmp_path / "t.csv"
    text.write_text("a,b\n1,2\n3,secret\n")
    with pytest.raises(ValueError, match=r"column 'b' .* line 3") as info:
        load_dataset(text, columns=["a", "b"])
    assert "secret" not in str(info.value)


# -- chunked sources ---------------------------------------------------------------------------
def _statistics(rows: object, C: FloatArray) -> list[FloatArray]:
    s = exact_fcm.participant_sums(rows, C, m=2.0)  # type: ignore[arg-type]
    db = validity.participant_fuzzy_db_sums(rows, C, m=2.0, q=1.0)  # type: ignore[arg-type]
    mo = standardise.participant_moments(rows)  # type: ignore[arg-type]
    sil = validity.participant_silhouette_sums(rows, C)  # type: ignore[arg-type]
    return [s.u_sum, s.weighted_sum, db.spread, db.membership, mo.sum, mo.sum_sq,
            np.array(sil.total)]


@pytest.mark.parametrize("row_group", [1000, BLOCK_ROWS, N])
def test_parquet_rows_give_the_in_memory_statistics(tmp_path: Path, row_group: int) -> None:
    frame, X = _frame()
    f = tmp_path / "d.parquet"
    pq.write_table(pa.Table.from_pandas(frame), f, row_group_size=row_group)
    rows = parquet_rows(f, columns=["a", "b", "c"], budget_bytes=1)  # one block per chunk
    assert (rows.n_rows, rows.n_features) == X.shape
    C = X[:4] + 0.1
    for a, b in zip(_statistics(rows, C), _statistics(as_rows(X), C), strict=True):
        assert np.array_equal(a, b)
    np.testing.assert_array_equal(rows.in_memory().X, X)


def test_csv_rows_give_the_in_memory_statistics(tmp_path: Path) -> None:
    frame, X = _frame()
    f = tmp_path / "d.csv"
    frame.to_csv(f, index=False, float_format="%.17g")
    rows = csv_rows(f, columns=["a", "b", "c"], budget_bytes=1)  # 1 MiB text blocks
    assert (rows.n_rows, rows.n_features) == X.shape
    C = X[:4] + 0.1
    for a, b in zip(_statistics(rows, C), _statistics(as_rows(X), C), strict=True):
        assert np.array_equal(a, b)


def test_default_columns_are_the_numeric_ones(tmp_path: Path) -> None:
    frame, _ = _frame()
    f = tmp_path / "d.parquet"
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), f)
    assert parquet_rows(f).n_features == 4  # a, b, count, c; not site


def test_stream_errors_name_the_file_and_column(tmp_path: Path) -> None:
    frame, _ = _frame()
    f = tmp_path / "d.parquet"
    pq.write_table(pa.Table.from_pandas(frame), f)
    with pytest.raises(ValueError, match="has no column 'z'; available columns: 'a'"):
        parquet_rows(f, columns=["a", "z"])
    with pytest.raises(ValueError, match=r"column 'site' of data file .* is not numeric"):
        parquet_rows(f, columns=["site"])
    g = tmp_path / "nan.csv"
    g.write_text("a,b\n1,2\n3,nan\n")
    rows = csv_rows(g)
    with pytest.raises(ValueError, match=r"column 'b' of data file .*nan\.csv has missing values"):
        standardise.participant_moments(rows)


def test_a_participant_streams_its_parquet_table(tmp_path: Path) -> None:
    from fedclust.participant.local import LocalParticipant

    frame, X = _frame()
    f = tmp_path / "d.parquet"
    pq.write_table(pa.Table.from_pandas(frame), f, row_group_size=1000)
    streamed = LocalParticipant(parquet_rows(f, columns=["a", "b", "c"]), name="s")
    loaded = LocalParticipant(X, name="m")
    assert streamed.declaration == loaded.declaration
    C = X[:3] + 0.2
    a, b = (p.statistic("fcm_sums", C, {"m": 2.0}) for p in (streamed, loaded))
    assert np.array_equal(a["u_sum"], b["u_sum"])
    assert np.array_equal(a["weighted_sum"], b["weighted_sum"])
    assert streamed.statistic("silhouette_sums", C) == loaded.statistic("silhouette_sums", C)
    fa, fb = streamed.local_fcm(C, m=2.0, tol=0.0, max_iter=2), loaded.local_fcm(
        C, m=2.0, tol=0.0, max_iter=2
    )
    assert np.array_equal(fa.centers, fb.centers)
