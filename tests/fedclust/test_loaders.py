"""Tests of fedclust.data.loaders on small files written here and on the shared datasets."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from fedclust.data.loaders import (
    DataWarning,
    builtin,
    load_dataset,
    load_table,
    setting_text,
    shared_datasets_dir,
)
from fedclust.participant.config import DataSource, load_data, load_rows


def _write(path: Path, text: str, *, newline: str = "\n") -> Path:
    path.write_bytes(text.replace("\n", newline).encode())
    return path


# -- CSV -------------------------------------------------------------------------------------
def test_csv_with_header(tmp_path: Path) -> None:
    f = _write(tmp_path / "a.csv", "x,y,label\n1,2,a\n3.5,-4,b\n")
    t = load_table(f)
    assert t.columns == ("x", "y", "label")
    assert t.n_rows == 2
    np.testing.assert_array_equal(t.numeric("y"), [2.0, -4.0])
    assert list(t.strings("label")) == ["a", "b"]
    assert t.numeric_columns() == ("x", "y")


def test_csv_without_header_gets_generated_names(tmp_path: Path) -> None:
    f = _write(tmp_path / "b.csv", "1,2,3\n4,5,6\n")
    t = load_table(f)
    assert t.columns == ("c0", "c1", "c2")
    d = load_dataset(f)
    np.testing.assert_array_equal(d.X, [[1, 2, 3], [4, 5, 6]])
    assert d.y is None and d.groups is None


def test_header_over_numbers_detected_even_with_a_numeric_header_cell(tmp_path: Path) -> None:
    # "2020" would parse as a number, but column 0 is text over numbers: a header.
    f = _write(tmp_path / "c.csv", "age,2020\n30,1\n40,2\n")
    assert load_table(f).columns == ("age", "2020")


def test_semicolon_quoted_crlf_gzip(tmp_path: Path) -> None:
    text = '"age";"job";"balance";"y"\n30;"admin.";100;"no"\n41;"blue-collar";-5;"yes"\n'
    raw = text.replace("\n", "\r\n").encode()
    f = tmp_path / "bank.csv.gz"
    f.write_bytes(gzip.compress(raw))
    d = load_dataset(f, split_by="job", label_column="y")
    assert d.feature_names == ("age", "balance")
    np.testing.assert_array_equal(d.X, [[30, 100], [41, -5]])
    assert d.groups is not None and list(d.groups) == ["admin.", "blue-collar"]
    assert d.y is not None and list(d.y) == [0, 1] and d.label_names == ("no", "yes")


def test_gzip_detected_by_magic_bytes_without_suffix(tmp_path: Path) -> None:
    f = tmp_path / "data.bin"
    f.write_bytes(gzip.compress(b"1;2\n3;4\n"))
    np.testing.assert_array_equal(load_dataset(f).X, [[1, 2], [3, 4]])


def test_quoted_field_with_delimiter_and_blank_lines(tmp_path: Path) -> None:
    f = _write(tmp_path / "q.csv", 'name,v\n"Smith, J",1\n\n"Doe, A",2\n')
    t = load_table(f)
    assert list(t.strings("name")) == ["Smith, J", "Doe, A"]
    assert t.line_numbers == (2, 4)


# -- ARFF ------------------------------------------------------------------------------------
ARFF = """% a comment
@RELATION toy
@ATTRIBUTE x REAL
@ATTRIBUTE 'y coord' NUMERIC
@ATTRIBUTE class {a,b}
%
@DATA
1.0,2.0,a
% comment inside data
3.0,4.0,b
5.0,6.0,a
"""


def test_arff(tmp_path: Path) -> None:
    f = _write(tmp_path / "toy.arff", ARFF)
    t = load_table(f)
    assert t.columns == ("x", "y coord", "class")
    assert t.line_numbers == (8, 10, 11)
    d = load_dataset(f, label_column="class")
    np.testing.assert_array_equal(d.X, [[1, 2], [3, 4], [5, 6]])
    assert d.y is not None and list(d.y) == [0, 1, 0]


def test_arff_detected_by_content(tmp_path: Path) -> None:
    f = _write(tmp_path / "toy.txt", ARFF, newline="\r\n")
    assert load_table(f).columns[0] == "x"


# -- errors ----------------------------------------------------------------------------------
def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="not found"):
        load_table(tmp_path / "nope.csv")


def test_empty_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="empty"):
        load_table(_write(tmp_path / "e.csv", "\n  \n"))


def test_header_only_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no data rows"):
        load_table(_write(tmp_path / "h.csv", "a,b\n"))


def test_ragged_row_names_line(tmp_path: Path) -> None:
    f = _write(tmp_path / "r.csv", "a,b\n1,2\n3\n4,5\n")
    with pytest.raises(ValueError, match=r"line 3 has 1 fields; expected 2"):
        load_table(f)


def test_ragged_arff_row_names_line(tmp_path: Path) -> None:
    f = _write(tmp_path / "r.arff", ARFF.replace("3.0,4.0,b", "3.0,b"))
    with pytest.raises(ValueError, match=r"line 10 has 2 fields"):
        load_table(f)


def test_non_numeric_value_names_column_and_line_not_value(tmp_path: Path) -> None:
    f = _write(tmp_path / "n.csv", "a,b\n1,2\n3,secret\n")
    with pytest.raises(ValueError, match=r"column 'b' .* line 3") as info:
        load_dataset(f, columns=["a", "b"])
    assert "secret" not in str(info.value)


def test_categorical_column_named_is_refused(tmp_path: Path) -> None:
    f = _write(tmp_path / "j.csv", "age,job\n30,admin.\n40,cook\n")
    with pytest.warns(UserWarning, match="left out the non-numeric column.*'job'"):
        assert load_dataset(f).feature_names == ("age",)  # excluded by default
    with pytest.raises(ValueError, match=r"column 'job' .*is not numeric"):
        load_dataset(f, columns=["age", "job"])


def test_missing_column_lists_available(tmp_path: Path) -> None:
    f = _write(tmp_path / "m.csv", "age,job\n30,admin.\n")
    with pytest.raises(ValueError, match="available columns: 'age', 'job'"):
        load_dataset(f, split_by="region")


def test_nan_is_a_missing_value(tmp_path: Path) -> None:
    f = _write(tmp_path / "nan.csv", "a,b\n1,nan\n2,3\n")
    with pytest.raises(ValueError, match=r"column 'b' .* 1 missing value.* line 2"):
        load_dataset(f)
    with pytest.raises(ValueError, match="line 2"):
        load_dataset(f, columns=["b"])
    with pytest.warns(UserWarning, match="left out 1 row"):
        np.testing.assert_array_equal(load_dataset(f, missing="drop").X, [[2.0, 3.0]])


def test_builtin_without_folder_mentions_env_var(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FEDCLUST_DATASETS", str(tmp_path / "absent"))
    assert shared_datasets_dir() is None
    with pytest.raises(FileNotFoundError, match="FEDCLUST_DATASETS"):
        builtin("xclara")


def test_env_var_overrides_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "xclara").mkdir()
    _write(tmp_path / "xclara" / "xclara.arff", ARFF)
    monkeypatch.setenv("FEDCLUST_DATASETS", str(tmp_path))
    assert shared_datasets_dir() == tmp_path
    assert builtin("xclara").X.shape == (3, 2)


def test_unknown_builtin_name() -> None:
    with pytest.raises(ValueError, match="unknown built-in dataset"):
        builtin("iris", datasets_dir=".")


# -- the shared datasets (fixture ``datasets`` from tests/conftest.py skips when absent) -----
def test_the_datasets_fixture_looks_where_the_environment_says(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("FEDCLUST_DATASETS", str(tmp_path))
    assert request.getfixturevalue("datasets") == tmp_path


def test_bank(datasets: Path) -> None:
    d = builtin("bank", datasets_dir=datasets)
    # 43193 = rows left after dropping job or education "unknown" (Stallmann & Wilbik 2022).
    assert d.X.shape == (43193, 7)
    assert d.groups is not None
    names, counts = np.unique(d.groups, return_counts=True)
    assert names.size == 11 and "unknown" not in names
    assert counts.sum() == 43193
    assert d.y is None
    assert d.feature_names[0] == "age"


def test_xclara(datasets: Path) -> None:
    d = builtin("xclara", datasets_dir=datasets)
    assert d.X.shape == (3000, 2)
    assert d.y is not None and np.unique(d.y).size == 3


def test_s_set1(datasets: Path) -> None:
    d = builtin("s-set1", datasets_dir=datasets)
    assert d.X.shape == (5000, 2)
    assert d.y is not None and np.unique(d.y).size == 15


def test_g2(datasets: Path) -> None:
    d = builtin("g2-2-30", datasets_dir=datasets)
    assert d.X.shape == (2048, 2)
    assert d.y is not None
    assert (d.y[:1024] == 0).all() and (d.y[1024:] == 1).all()
    # The two Gaussians are centred at 500 and 600 in every dimension.
    np.testing.assert_allclose(d.X[:1024].mean(axis=0), 500, atol=5)
    np.testing.assert_allclose(d.X[1024:].mean(axis=0), 600, atol=5)


def test_pendigits_and_waveform(datasets: Path) -> None:
    p = builtin("pendigits", datasets_dir=datasets)
    assert p.X.shape == (7494 + 3498, 16)
    assert p.y is not None and np.unique(p.y).size == 10
    w = builtin("waveform", datasets_dir=datasets)
    assert w.X.shape == (5000, 21)
    assert w.y is not None and set(np.unique(w.y)) == {0, 1, 2}


def test_default_folder_is_found(datasets: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FEDCLUST_DATASETS", raising=False)
    found = shared_datasets_dir()
    assert found is not None and found.resolve() == datasets.resolve()


# -- messages name the setting as the caller takes it (issue 23) -------------------------------
def test_setting_text_names_a_flag_or_a_config_key() -> None:
    assert setting_text("missing", "drop", "flag") == "--missing drop"
    assert setting_text("missing", "drop", "config") == '[data] missing = "drop"'
    assert setting_text("columns", None, "flag") == "--columns"
    assert setting_text("columns", None, "config") == "[data] columns"


def test_a_blank_value_names_the_flag_on_the_command_line(tmp_path: Path) -> None:
    f = _write(tmp_path / "blank.csv", "a,b\n1,2\n3,\n")
    with pytest.raises(ValueError, match=r"leave those rows out with --missing drop\.$"):
        load_dataset(f)


def test_a_blank_value_names_the_config_key_for_a_participant(tmp_path: Path) -> None:
    f = _write(tmp_path / "blank.csv", "a,b\n1,2\n3,\n5,6\n")
    with pytest.raises(ValueError) as info:
        load_data(DataSource(path=f))
    assert str(info.value).endswith('leave those rows out with [data] missing = "drop".')
    assert "--missing" not in str(info.value)
    with pytest.warns(DataWarning, match=r'left out 1 row\(s\) .*\(\[data\] missing = "drop"\)'):
        rows = load_rows(DataSource(path=f, missing="drop"))
    np.testing.assert_array_equal(rows.X, [[1.0, 2.0], [5.0, 6.0]])
    np.testing.assert_array_equal(rows.rows, [0, 2])


def test_other_settings_are_named_as_config_keys_too(tmp_path: Path) -> None:
    latin = tmp_path / "latin.csv"
    latin.write_bytes(b"a,b\n1,2\n" + "é".encode("latin-1") + b",3\n")
    with pytest.raises(ValueError, match=r'\[data\] encoding = "latin-1"'):
        load_data(DataSource(path=latin))
    with pytest.raises(ValueError, match=r"--encoding latin-1"):
        load_dataset(latin)
    commas = _write(tmp_path / "commas.csv", "a;b\n1,5;2\n3,5;4\n")
    with pytest.raises(ValueError, match=r'read them with \[data\] decimal = ","'):
        load_data(DataSource(path=commas))


def test_rows_and_ids_survive_dropped_rows_on_both_paths(tmp_path: Path) -> None:
    f = _write(tmp_path / "ids.csv", "id,a,b\nx,1,2\ny,NA,4\nz,5,6\n")
    with pytest.warns(DataWarning, match="--missing drop"):
        exact = load_dataset(f, missing="drop", id_column="id")
    assert exact.feature_names == ("a", "b")
    np.testing.assert_array_equal(exact.rows, [0, 2])
    np.testing.assert_array_equal(exact.ids, ["x", "z"])
    full = _write(tmp_path / "full.csv", "id,a,b\nx,1,2\ny,3,4\n")  # pyarrow's fast path
    fast = load_dataset(full, id_column="id")
    assert fast.feature_names == ("a", "b")
    np.testing.assert_array_equal(fast.rows, [0, 1])
    np.testing.assert_array_equal(fast.ids, ["x", "y"])
