"""Read tabular data files (CSV, gzip-compressed CSV, ARFF) and the shared reference datasets.

:func:`load_dataset` picks numeric feature columns, an optional label column and an optional
grouping column (one participant per group, e.g. the bank data's ``job``). It streams CSV
through pyarrow's reader into one float64 matrix (peak memory below twice the matrix); a file
that reader cannot take as it is (ragged rows, a missing or non-numeric cell in a chosen
column, ARFF) goes through :func:`load_table`, the exact
line-by-line parser into a :class:`Table` of raw strings, which also produces the error
messages. :func:`builtin` loads the papers' datasets from the shared folder by name.

Messy files get one-line errors and warnings (:class:`DataWarning`) that name the file, the
column and the line, never the offending value (a data file may hold personal data), and say
what to do: a missing value (blank, ``NA``, ``NaN``, ``?``) fails unless ``missing="drop"``
leaves its rows out; a column of text is left out with a warning; decimal commas need
``decimal=","``; a file not in UTF-8 needs its ``encoding``; a constant column is warned of.
Each message names the setting as its caller does (``naming``, :func:`setting_text`): the
command line's ``--missing drop`` or a participant config's ``[data] missing = "drop"``.
Every loaded row keeps its index among the file's data rows (``LoadedData.rows``), so rows
left out do not shift the others.
"""

from __future__ import annotations

import csv
import gzip
import io
import os
import re
import warnings
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
from numpy.typing import NDArray

from fedclust.core.validation import FloatArray

__all__ = [
    "BUILTIN_NAMES",
    "DataWarning",
    "LoadedData",
    "Missing",
    "Naming",
    "Table",
    "builtin",
    "load_dataset",
    "load_table",
    "setting_text",
    "shared_dataset_file",
    "shared_datasets_dir",
]

DATASETS_ENV = "FEDCLUST_DATASETS"
_GZIP_MAGIC = b"\x1f\x8b"
_DELIMITERS = (",", ";", "\t")
#: Cells that stand for a missing value (compared case-insensitively, stripped).
MISSING_CELLS = frozenset({"", "na", "n/a", "nan", "null", "none", "?"})
_DECIMAL_COMMA = re.compile(r"[+-]?(\d+,\d*|,\d+)([eE][+-]?\d+)?")
Missing = Literal["fail", "drop"]
#: How the caller names the reading settings in messages: "flag" (the command line's
#: ``--missing drop``) or "config" (a participant config's ``[data] missing = "drop"``).
Naming = Literal["flag", "config"]


def setting_text(setting: str, value: str | None, naming: Naming) -> str:
    """How a user gives the reading setting ``setting`` (missing, decimal, encoding, columns)
    the value ``value`` where the caller takes it: ``--missing drop`` or
    ``[data] missing = "drop"``; ``value`` None names the setting alone."""
    if naming == "flag":
        flag = "--" + setting.replace("_", "-")
        return flag if value is None else f"{flag} {value}"
    key = f"[data] {setting}"
    return key if value is None else f'{key} = "{value}"'


class DataWarning(UserWarning):
    """Something about a data file the analyst should know (a column left out or constant,
    rows dropped); the CLI prints each as one line."""


@dataclass(frozen=True)
class Table:
    """A parsed data file: column names and the raw string cells, column by column.

    ``cells[j][i]`` is the text of row ``i`` in column ``j``; ``line_numbers[i]`` is the
    1-based line of the file where row ``i`` starts (used in error messages).
    """

    columns: tuple[str, ...]
    cells: tuple[tuple[str, ...], ...]
    line_numbers: tuple[int, ...]
    source: str = "<table>"

    @property
    def n_rows(self) -> int:
        return len(self.line_numbers)

    def _index(self, name: str) -> int:
        try:
            return self.columns.index(name)
        except ValueError:
            raise ValueError(
                f"{self.source} has no column {name!r}; available columns: "
                f"{', '.join(repr(c) for c in self.columns)}."
            ) from None

    def strings(self, name: str) -> NDArray[np.str_]:
        """The raw text of one column (surrounding whitespace removed), e.g. a categorical one."""
        return np.array([v.strip() for v in self.cells[self._index(name)]], dtype=np.str_)

    def is_numeric(self, name: str) -> bool:
        """True when every cell of the column is a finite number."""
        return _first_bad(self.cells[self._index(name)]) is None

    def numeric(self, name: str) -> FloatArray:
        """One column as float64; ValueError naming the column and line if a cell is no number."""
        col = self.cells[self._index(name)]
        bad = _first_bad(col)
        if bad is not None:
            raise ValueError(
                f"column {name!r} of {self.source} is not numeric: the value on line "
                f"{self.line_numbers[bad]} is not a finite number."
            )
        return np.array([float(v) for v in col], dtype=np.float64)

    def numeric_columns(self) -> tuple[str, ...]:
        """Names of the columns whose every cell is a finite number, in file order."""
        return tuple(c for c in self.columns if self.is_numeric(c))

    def missing(self, name: str) -> NDArray[np.bool_]:
        """Which cells of a column stand for a missing value (:data:`MISSING_CELLS`)."""
        return np.array(
            [v.strip().lower() in MISSING_CELLS for v in self.cells[self._index(name)]],
            dtype=np.bool_,
        )

    def numbers_but_missing(self, name: str) -> bool:
        """True when every cell that is not missing is a finite number (and some are)."""
        col = self.cells[self._index(name)]
        present = [v for v, gone in zip(col, self.missing(name), strict=True) if not gone]
        return bool(present) and _first_bad(present) is None

    def decimal_commas(self, name: str) -> bool:
        """True when the column's cells that are not missing all look like decimal-comma
        numbers (``3,14``)."""
        col = self.cells[self._index(name)]
        present = [v.strip() for v, gone in zip(col, self.missing(name), strict=True) if not gone]
        return bool(present) and all(_DECIMAL_COMMA.fullmatch(v) for v in present)


@dataclass(frozen=True)
class LoadedData:
    """A dataset ready for clustering.

    Attributes:
        X: float64 features, shape (n_samples, n_features).
        y: integer labels (evaluation only; never used to cluster) or None. Integer label
            values are kept; other labels are coded 0..L-1 in sorted order of ``label_names``.
        groups: the raw text of the grouping column (one participant per distinct value) or None.
        feature_names: the columns of X.
        label_names: for coded labels, the original value of each code; else empty.
        rows: each row's 0-based index among the file's data rows (the header and blank
            lines, holding nothing but spaces or delimiters, not counted; rows left out
            counted), or None for data not read from one file.
        ids: the raw text of the ``id_column`` asked for, or None.
    """

    X: FloatArray
    y: NDArray[np.int64] | None = None
    groups: NDArray[np.str_] | None = None
    feature_names: tuple[str, ...] = ()
    label_names: tuple[str, ...] = ()
    rows: NDArray[np.int64] | None = None
    ids: NDArray[np.str_] | None = None


def _is_number(text: str) -> bool:
    try:
        return bool(np.isfinite(float(text)))
    except ValueError:
        return False


def _first_bad(col: Sequence[str]) -> int | None:
    """Index of the first cell that is not a finite number, or None."""
    try:
        arr = np.array(col, dtype=np.float64)  # fast path: numpy parses the strings
    except ValueError:
        pass
    else:
        if np.isfinite(arr).all():
            return None
    for i, v in enumerate(col):
        if not _is_number(v):
            return i
    return None  # pragma: no cover - the fast path failed, so some cell is bad


# -- reading ---------------------------------------------------------------------------------
def _read_text(path: Path, encoding: str = "utf-8", naming: Naming = "flag") -> str:
    if not path.exists():
        raise FileNotFoundError(f"data file not found: {path}")
    if not path.is_file():
        raise ValueError(f"{path} is not a file.")
    raw = path.read_bytes()
    if path.suffix.lower() == ".gz" or raw[:2] == _GZIP_MAGIC:
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            raise ValueError(f"{path} is not a valid gzip file.") from exc
    codec = "utf-8-sig" if _is_utf8(encoding) else encoding
    try:
        return raw.decode(codec)
    except LookupError:
        raise ValueError(f"unknown text encoding {encoding!r} (e.g. utf-8, latin-1).") from None
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        hint = (
            f"give its encoding, e.g. {setting_text('encoding', 'latin-1', naming)}"
            if _is_utf8(encoding)
            else f"give the file's encoding with {setting_text('encoding', None, naming)}"
        )
        raise ValueError(f"{path} is not {encoding} text (line {line}): {hint}.") from None


def _is_utf8(encoding: str) -> bool:
    return encoding.lower().replace("_", "-") in ("utf-8", "utf8", "utf-8-sig")


def _sniff_delimiter(text: str) -> str:
    """The most frequent of ',', ';' and TAB on the first non-blank line (',' on a tie)."""
    first = next((ln for ln in text.splitlines() if ln.strip()), "")
    counts = [first.count(d) for d in _DELIMITERS]
    return _DELIMITERS[int(np.argmax(counts))] if max(counts) > 0 else ","


def _is_arff(path: Path, text: str) -> bool:
    if path.suffix.lower() == ".arff" or path.name.lower().endswith(".arff.gz"):
        return True
    for line in text.splitlines():
        s = line.strip()
        if s and not s.startswith("%"):
            return s.lower().startswith("@relation")
    return False


def _records(text: str, delimiter: str, first_line: int) -> list[tuple[int, list[str]]]:
    """(starting line, fields) of each non-blank record; handles quotes, CRLF, quoted newlines."""
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, skipinitialspace=True)
    out: list[tuple[int, list[str]]] = []
    start = 1
    try:
        for fields in reader:
            if any(f.strip() for f in fields):
                out.append((start + first_line - 1, fields))
            start = reader.line_num + 1
    except csv.Error as exc:
        line = reader.line_num + first_line - 1
        raise ValueError(f"unreadable CSV text near line {line}.") from exc
    return out


def _header_row(first: list[str], second: list[str] | None) -> bool:
    """The first row is a header when none of its cells is a number, or when some column is
    text in the first row and a number in the second (a header over numeric data)."""
    numeric_first = [_is_number(f) for f in first]
    if not any(numeric_first):
        return True
    if second is None:
        return False
    return any(not a and _is_number(b) for a, b in zip(numeric_first, second, strict=False))


def _build(
    source: str, names: list[str], records: list[tuple[int, list[str]]], width_from: str
) -> Table:
    width = len(names)
    for line, fields in records:
        if len(fields) != width:
            raise ValueError(
                f"{source}: line {line} has {len(fields)} fields; expected {width} ({width_from})."
            )
    if not records:
        raise ValueError(f"{source} contains no data rows.")
    if len(set(names)) != width:
        raise ValueError(f"{source}: column names are not unique.")
    cells = tuple(zip(*(fields for _, fields in records), strict=True))
    return Table(
        columns=tuple(names),
        cells=cells,
        line_numbers=tuple(line for line, _ in records),
        source=source,
    )


def _parse_csv(source: str, text: str, header: bool | None) -> Table:
    records = _records(text, _sniff_delimiter(text), 1)
    if not records:
        raise ValueError(f"{source} is empty.")
    first_line, first = records[0]
    second = records[1][1] if len(records) > 1 else None
    if header is None:
        header = _header_row(first, second)
    if header:
        names = [f.strip() for f in first]
        body = records[1:]
    else:
        names = [f"c{j}" for j in range(len(first))]
        body = records
    return _build(source, names, body, f"as on line {first_line}")


_ATTRIBUTE = re.compile(r"""@attribute\s+('[^']*'|"[^"]*"|\S+)\s+(.+)$""", re.IGNORECASE)


def _parse_arff(source: str, text: str) -> Table:
    names: list[str] = []
    lines = text.splitlines()
    data_at = None
    for i, line in enumerate(lines):
        s = line.strip()
        if not s or s.startswith("%"):
            continue
        low = s.lower()
        if low.startswith("@attribute"):
            m = _ATTRIBUTE.match(s)
            if m is None:
                raise ValueError(f"{source}: malformed @attribute on line {i + 1}.")
            names.append(m.group(1).strip("'\""))
        elif low.startswith("@data"):
            data_at = i + 1
            break
        elif not low.startswith("@relation"):
            raise ValueError(f"{source}: unexpected header text on line {i + 1}.")
    if data_at is None:
        raise ValueError(f"{source}: ARFF file has no @data section.")
    if not names:
        raise ValueError(f"{source}: ARFF file declares no @attribute.")
    # '%' comment lines inside @data become blank lines, which keeps line numbers exact.
    body = "\n".join("" if ln.lstrip().startswith("%") else ln for ln in lines[data_at:])
    if body.lstrip().startswith("{"):
        raise ValueError(f"{source}: sparse ARFF data is not supported.")
    records = _records(body, ",", data_at + 1)
    return _build(source, names, records, "one per @attribute")


def load_table(
    path: str | os.PathLike[str],
    *,
    header: bool | None = None,
    encoding: str = "utf-8",
    decimal: Literal[".", ","] = ".",
    naming: Naming = "flag",
) -> Table:
    """Parse a CSV or ARFF file (optionally gzip-compressed) into a :class:`Table`.

    CSV: the delimiter is sniffed (',', ';' or TAB); quoted fields and CRLF line ends are
    handled; blank lines are skipped. ``header=None`` detects a header row (see
    ``_header_row``); without one the columns are named ``c0 .. c{n-1}``. ARFF: column names
    from the ``@attribute`` lines, rows after ``@data``, ``%`` comments skipped; nominal
    attributes (such as a class column, usually last) are kept as text. ``encoding``: the
    file's text encoding; ``decimal=","`` reads ``3,14`` as 3.14 (the file's delimiter must
    then be ';' or TAB). ``naming``: how messages name these settings (:func:`setting_text`).

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: the file is empty, has no data rows, is not text in ``encoding``, or a row
            has the wrong number of fields (the message names the line).
    """
    p = Path(path)
    text = _read_text(p, encoding, naming)
    if not text.strip():
        raise ValueError(f"{p} is empty.")
    table = _parse_arff(str(p), text) if _is_arff(p, text) else _parse_csv(str(p), text, header)
    if decimal == ",":
        if not _is_arff(p, text) and _sniff_delimiter(text) == ",":
            raise ValueError(
                f"{p}: {setting_text('decimal', ',', naming)} needs a file whose fields are "
                "separated by ';' or TAB, not ','."
            )
        table = _with_decimal_points(table)
    return table


def _with_decimal_points(table: Table) -> Table:
    """``table`` with every decimal-comma number (``3,14``) written with a point."""
    cells = tuple(
        tuple(v.replace(",", ".") if _DECIMAL_COMMA.fullmatch(v.strip()) else v for v in col)
        for col in table.cells
    )
    return Table(table.columns, cells, table.line_numbers, table.source)


# -- selecting features ----------------------------------------------------------------------
def _encode_labels(values: NDArray[np.str_]) -> tuple[NDArray[np.int64], tuple[str, ...]]:
    """Integer labels stay as they are; any other labels are coded in sorted order."""
    try:
        as_float = np.array(values, dtype=np.float64)
    except ValueError:
        as_float = None
    if as_float is not None and np.isfinite(as_float).all() and (as_float % 1 == 0).all():
        return as_float.astype(np.int64), ()
    names, codes = np.unique(values, return_inverse=True)
    return codes.astype(np.int64), tuple(str(n) for n in names)


def _feature_columns(
    table: Table, *, skip: set[str | None], naming: Naming
) -> tuple[str, ...]:
    """The numeric columns (missing values allowed) except ``skip``; a text column is left
    out with a :class:`DataWarning`, decimal commas or no numeric column are errors."""
    candidates = [c for c in table.columns if c not in skip]
    chosen = tuple(c for c in candidates if table.numbers_but_missing(c))
    commas = [c for c in candidates if c not in chosen and table.decimal_commas(c)]
    if commas:
        raise ValueError(
            f"{table.source}: column {commas[0]!r} holds numbers with decimal commas: "
            f"read them with {setting_text('decimal', ',', naming)}"
        )
    if not chosen:
        raise ValueError(
            f"{table.source} has no numeric feature columns (every column holds text): name "
            f"the feature columns with {setting_text('columns', None, naming)} to see which "
            "value is not a number."
        )
    text = [c for c in candidates if c not in chosen]
    if text:
        _warn_text_columns(table.source, text, naming)
    return chosen


def _warn_text_columns(source: str, names: Sequence[str], naming: Naming) -> None:
    warnings.warn(
        f"{source}: left out the non-numeric column(s) {', '.join(repr(c) for c in names)} "
        f"(name the features with {setting_text('columns', None, naming)} to choose them "
        "yourself).",
        DataWarning, stacklevel=4,
    )


def _from_table(
    table: Table,
    *,
    columns: Sequence[str] | None,
    split_by: str | None,
    label_column: str | None,
    keep: NDArray[np.bool_] | None = None,
    missing: Missing = "fail",
    id_column: str | None = None,
    naming: Naming = "flag",
) -> LoadedData:
    for special in (split_by, label_column, id_column):
        if special is not None:
            table._index(special)  # ValueError listing the available columns
    if columns is None:
        chosen = _feature_columns(table, skip={split_by, label_column, id_column}, naming=naming)
    else:
        chosen = tuple(columns)
        if not chosen:
            raise ValueError("columns must name at least one column; got an empty sequence.")
        for c in chosen:
            table._index(c)
    holes = {
        c: gone for c in chosen
        if (gone := table.missing(c)).any() and table.numbers_but_missing(c)
    }
    if holes and missing == "fail":
        name, gone = next(iter(holes.items()))
        raise ValueError(
            f"column {name!r} of {table.source} has {int(gone.sum())} missing value(s) "
            f"(blank, NA or NaN; the first on line {table.line_numbers[int(np.argmax(gone))]}):"
            " fill them in, or leave those rows out with "
            f"{setting_text('missing', 'drop', naming)}."
        )
    rows = np.arange(table.n_rows, dtype=np.int64)
    complete = np.ones(table.n_rows, dtype=np.bool_)
    for gone in holes.values():
        complete &= ~gone
    if not complete.all():
        if not complete.any():
            raise ValueError(f"{table.source}: every row has a missing value.")
        warnings.warn(
            f"{table.source}: left out {int((~complete).sum())} row(s) with a missing value "
            f"({setting_text('missing', 'drop', naming)}).", DataWarning, stacklevel=3,
        )
        rows = rows[complete]
        table = Table(
            table.columns,
            tuple(tuple(v for v, ok in zip(col, complete, strict=True) if ok)
                  for col in table.cells),
            tuple(n for n, ok in zip(table.line_numbers, complete, strict=True) if ok),
            table.source,
        )
        keep = None if keep is None else keep[complete]
    X = np.column_stack([table.numeric(c) for c in chosen])
    y = label_names = None
    if label_column is not None:
        y, label_names = _encode_labels(table.strings(label_column))
    groups = table.strings(split_by) if split_by is not None else None
    ids = table.strings(id_column) if id_column is not None else None
    if keep is not None:
        X = X[keep]
        y = y[keep] if y is not None else None
        groups = groups[keep] if groups is not None else None
        ids = ids[keep] if ids is not None else None
        rows = rows[keep]
    return LoadedData(
        X=np.ascontiguousarray(X),
        y=y,
        groups=groups,
        feature_names=chosen,
        label_names=label_names or (),
        rows=rows,
        ids=ids,
    )


# -- the fast path: pyarrow -------------------------------------------------------------------
_PREFIX_BYTES = 1 << 16


def _open(path: Path) -> Any:
    """A binary stream of the file's (decompressed) bytes."""
    with path.open("rb") as f:
        gz = f.read(2) == _GZIP_MAGIC
    return gzip.open(path, "rb") if gz or path.suffix.lower() == ".gz" else path.open("rb")


def _prefix_text(path: Path) -> str | None:
    """The first complete lines of the file (at most 64 KiB), or None when unreadable."""
    try:
        with _open(path) as f:
            raw: bytes = f.read(_PREFIX_BYTES)
    except (OSError, EOFError):
        return None
    if len(raw) == _PREFIX_BYTES:
        raw = raw[: raw.rfind(b"\n") + 1]
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError:  # the exact parser names the line
        return None


def csv_layout(path: Path) -> tuple[str, tuple[str, ...], bool] | None:
    """(delimiter, column names, whether a header row comes first) of a CSV file, from its
    first lines as :func:`load_table` reads them; None for ARFF or text that starts blank."""
    text = _prefix_text(path)
    if text is None or not text.split("\n", 1)[0].strip() or _is_arff(path, text):
        return None
    delimiter = _sniff_delimiter(text)
    try:
        records = _records(text, delimiter, 1)[:2]
    except ValueError:
        return None
    if len(records) < 2:
        return None
    first = records[0][1]
    header = _header_row(first, records[1][1])
    names = [f.strip() for f in first] if header else [f"c{j}" for j in range(len(first))]
    return delimiter, tuple(names), header


_BLOCK_BYTES = 2**20  # pyarrow reads ahead dozens of blocks: keep them small


def _arrow_batches(
    path: Path, layout: tuple[str, tuple[str, ...], bool], types: dict[str, pa.DataType]
) -> Generator[pa.RecordBatch, None, None]:
    """The file's record batches, ``_BLOCK_BYTES`` of text at a time, with ``types`` forced."""
    delimiter, names, header = layout
    read = pa_csv.ReadOptions(
        column_names=list(names), skip_rows=1 if header else 0, block_size=_BLOCK_BYTES,
    )
    with _open(path) as f, pa_csv.open_csv(
        f, read_options=read, parse_options=pa_csv.ParseOptions(delimiter=delimiter),
        convert_options=pa_csv.ConvertOptions(column_types=types),
    ) as reader:
        yield from reader


def _row_estimate(path: Path) -> int:
    """Generously more rows than the file holds, from its size and its first lines."""
    text = _prefix_text(path) or ""
    per_row = max(1.0, len(text.encode()) / max(1, text.count("\n")))
    expansion = 1.1 if path.suffix.lower() != ".gz" else 12.0
    return int(path.stat().st_size * expansion / per_row) + 1024


def _is_number_type(t: pa.DataType) -> bool:
    return bool(pa.types.is_integer(t) or pa.types.is_floating(t))


def _arrow_strings(column: pa.Array) -> list[str] | None:
    """The stripped text of a column; None when a cell is still quoted (a space before the
    quote, which the exact parser skips and pyarrow keeps)."""
    cells = [str(v).strip() for v in column.to_pylist()]
    return None if any(c.startswith('"') for c in cells) else cells


def _looks_decimal_comma(column: pa.Array) -> bool:
    cells = [str(v).strip() for v in column.to_pylist() if v is not None]
    return bool(cells) and all(_DECIMAL_COMMA.fullmatch(c) for c in cells)


def _fast_dataset(
    path: Path,
    *,
    columns: Sequence[str] | None,
    split_by: str | None,
    label_column: str | None,
    id_column: str | None = None,
    naming: Naming = "flag",
) -> LoadedData | None:
    """:func:`load_dataset` through pyarrow's streaming reader, or None where the exact parser
    must answer (ARFF, ragged rows, a missing or non-numeric value, quoting pyarrow reads
    differently). Memory: the matrix, grown in place, and pyarrow's few blocks of text."""
    if not path.is_file():
        return None
    layout = csv_layout(path)
    if layout is None:
        return None
    names = layout[1]
    text_columns = [c for c in (split_by, label_column, id_column) if c is not None]
    wanted = text_columns + list(columns or ())
    if len(set(names)) != len(names) or any(c not in names for c in wanted):
        return None
    if columns is not None and not columns:
        return None
    try:
        peek = _arrow_batches(path, layout, {})
        first = next(peek, None)  # the types pyarrow infers from the first block
        peek.close()
        if first is None:
            return None
        numeric = {n for n in names if _is_number_type(first.schema.field(n).type)}
        skip = {split_by, label_column, id_column}
        chosen = [n for n in names if n in numeric and n not in skip] if columns is None else list(
            columns
        )
        if not chosen or any(n not in numeric for n in chosen):
            return None
        left_out = [n for n in names if n not in numeric and n not in skip] * (columns is None)
        if any(_looks_decimal_comma(first.column(n)) for n in left_out):
            return None  # the exact parser says how to read them
        types = {n: pa.float64() for n in chosen} | {n: pa.string() for n in text_columns}
        # Room for the estimated rows: pages never written are never resident, and
        # ndarray.resize moves a large block with mremap, not by copying it.
        X = np.empty((_row_estimate(path), len(chosen)))
        n = 0
        text: dict[str, list[str]] = {n: [] for n in text_columns}
        for batch in _arrow_batches(path, layout, types):
            stop = n + batch.num_rows
            if stop > X.shape[0]:
                X.resize((max(2 * X.shape[0], stop), len(chosen)), refcheck=False)
            for j, name in enumerate(chosen):
                column = batch.column(name)
                if column.null_count:
                    return None
                X[n:stop, j] = column.to_numpy()
            if not np.isfinite(X[n:stop]).all():
                return None
            n = stop
            for name in text_columns:
                cells = _arrow_strings(batch.column(name))
                if cells is None:
                    return None
                text[name] += cells
    except (pa.ArrowInvalid, OSError, EOFError, UnicodeDecodeError):
        return None
    if n == 0:
        return None
    X.resize((n, len(chosen)), refcheck=False)
    y = label_names = groups = None
    if label_column is not None:
        y, label_names = _encode_labels(np.array(text[label_column], dtype=np.str_))
    if split_by is not None:
        groups = np.array(text[split_by], dtype=np.str_)
    if left_out:
        _warn_text_columns(str(path), left_out, naming)
    ids = np.array(text[id_column], dtype=np.str_) if id_column is not None else None
    return LoadedData(
        X=X, y=y, groups=groups, feature_names=tuple(chosen), label_names=label_names or (),
        rows=np.arange(n, dtype=np.int64), ids=ids,
    )


def load_dataset(
    path: str | os.PathLike[str],
    *,
    columns: Sequence[str] | None = None,
    split_by: str | None = None,
    label_column: str | None = None,
    missing: Missing = "fail",
    decimal: Literal[".", ","] = ".",
    encoding: str = "utf-8",
    id_column: str | None = None,
    naming: Naming = "flag",
) -> LoadedData:
    """Load features, optional labels and optional participant groups from a data file.

    Args:
        path: a CSV or ARFF file, optionally gzip-compressed (see :func:`load_table`).
        columns: the feature columns. Default: every column whose cells are all numbers,
            except ``split_by`` and ``label_column``; categorical columns are left out.
            A named column must be numeric.
        split_by: a column whose distinct values define the participants (kept as text).
        label_column: a column of true labels, for evaluation only.
        missing: "fail" on a missing value in a feature column, or "drop" its rows.
        decimal: "," for numbers written ``3,14`` (see :func:`load_table`).
        encoding: the file's text encoding.
        id_column: a column of row identifiers, kept as text in ``ids`` (never a feature).
        naming: how messages name these settings: "flag" (``--missing drop``) or "config"
            (``[data] missing = "drop"``), see :func:`setting_text`.

    Every row keeps its index among the file's data rows in ``rows``.

    Raises:
        ValueError: a named column does not exist (the message lists the available ones),
            a chosen column holds a value that is not a number or is missing (column and
            line named), or the file is not text in ``encoding``.

    Warns:
        DataWarning: a text column left out, rows with a missing value dropped, a constant
            feature column.
    """
    fast = None
    if decimal == "." and _is_utf8(encoding):
        fast = _fast_dataset(
            Path(path), columns=columns, split_by=split_by, label_column=label_column,
            id_column=id_column, naming=naming,
        )
    if fast is None:
        table = load_table(path, encoding=encoding, decimal=decimal, naming=naming)
        fast = _from_table(
            table, columns=columns, split_by=split_by, label_column=label_column,
            missing=missing, id_column=id_column, naming=naming,
        )
    constant = [n for n, j in zip(fast.feature_names, range(fast.X.shape[1]), strict=True)
                if fast.X.shape[0] > 1 and np.ptp(fast.X[:, j]) == 0]
    if constant:
        warnings.warn(
            f"{path}: the column(s) {', '.join(repr(c) for c in constant)} hold one value "
            "only and cannot separate clusters (leave them out with "
            f"{setting_text('columns', None, naming)}).",
            DataWarning, stacklevel=2,
        )
    return fast


# -- the shared reference datasets -----------------------------------------------------------
BUILTIN_NAMES = ("xclara", "s-set1", "g2-D-S", "pendigits", "waveform", "bank", "digits")

#: Numeric columns of the UCI bank data clustered by default. Stallmann & Wilbik (2022, §3.3)
#: do not list their columns in the part of the paper we could read; these are all seven
#: numeric attributes of bank-full.csv.
BANK_COLUMNS = ("age", "balance", "day", "duration", "campaign", "pdays", "previous")


def shared_datasets_dir() -> Path | None:
    """The shared datasets folder: ``$FEDCLUST_DATASETS`` if set, else ``../shared/datasets``
    relative to the project root; None when that folder does not exist."""
    env = os.environ.get(DATASETS_ENV)
    root = Path(__file__).resolve().parents[1]
    p = Path(env) if env else root.parent / "shared" / "datasets"
    return p if p.is_dir() else None


def shared_dataset_file(
    relative: str, datasets_dir: str | os.PathLike[str] | None = None
) -> Path:
    """The file ``relative`` of the shared datasets folder (``datasets_dir``, else
    :func:`shared_datasets_dir`); FileNotFoundError naming FEDCLUST_DATASETS when missing."""
    base = Path(datasets_dir) if datasets_dir is not None else shared_datasets_dir()
    if base is None or not base.is_dir():
        raise FileNotFoundError(
            "the shared datasets folder was not found; set the environment variable "
            f"{DATASETS_ENV} to its location (default: ../shared/datasets next to the project)."
        )
    f = base / relative
    if not f.is_file():
        raise FileNotFoundError(
            f"{f} is missing from the shared datasets folder (set {DATASETS_ENV} to use another)."
        )
    return f


def _last_column_labelled(f: Path, header: bool | None = False) -> LoadedData:
    table = load_table(f, header=header)
    label = table.columns[-1]
    return _from_table(table, columns=table.columns[:-1], split_by=None, label_column=label)


def _concat(parts: Sequence[LoadedData]) -> LoadedData:
    ys: list[Any] = [p.y for p in parts]
    return LoadedData(
        X=np.concatenate([p.X for p in parts]),
        y=np.concatenate(ys) if all(y is not None for y in ys) else None,
        feature_names=parts[0].feature_names,
        label_names=parts[0].label_names,
    )


_G2 = re.compile(r"g2-(\d+)-(\d+)")


def builtin(name: str, *, datasets_dir: str | os.PathLike[str] | None = None) -> LoadedData:
    """Load one of the papers' reference datasets from the shared folder by name.

    Names: ``"xclara"`` (3000 x 2, 3 classes), ``"s-set1"`` (5000 x 2, 15 classes),
    ``"g2-D-S"`` such as ``"g2-2-30"`` (2048 x D; rows 0-1023 label 0, the rest label 1),
    ``"pendigits"`` (training and test files together, 10992 x 16, 10 classes),
    ``"waveform"`` (5000 x 21, 3 classes), ``"digits"`` (scikit-learn's 1797 x 64 digits)
    and ``"bank"``: UCI bank marketing with the rows whose ``job`` or ``education`` is
    ``"unknown"`` dropped (43193 rows, Stallmann & Wilbik 2022), features
    :data:`BANK_COLUMNS`, no labels, and ``groups`` = ``job`` (11 groups).

    Raises:
        FileNotFoundError: the shared folder or the file is missing (names FEDCLUST_DATASETS).
        ValueError: an unknown name.
    """
    m = _G2.fullmatch(name)
    if m is not None:
        f = shared_dataset_file(f"g2/{name}.csv.gz", datasets_dir)
        data = load_dataset(f)
        y = (np.arange(data.X.shape[0]) >= 1024).astype(np.int64)
        return LoadedData(X=data.X, y=y, feature_names=data.feature_names)
    if name == "xclara":
        return _last_column_labelled(shared_dataset_file("xclara/xclara.arff", datasets_dir))
    if name == "s-set1":
        return _last_column_labelled(shared_dataset_file("s-set1/s-set1.arff", datasets_dir))
    if name == "pendigits":
        return _concat([
            _last_column_labelled(shared_dataset_file(f"pendigits/pendigits.{ext}", datasets_dir))
            for ext in ("tra", "tes")
        ])
    if name == "waveform":
        return _last_column_labelled(shared_dataset_file("waveform/waveform.data", datasets_dir))
    if name == "digits":
        return _last_column_labelled(
            shared_dataset_file("sklearn_digits/digits.csv.gz", datasets_dir), header=None
        )
    if name == "bank":
        table = load_table(shared_dataset_file("bank/bank-full.csv.gz", datasets_dir))
        keep = (table.strings("job") != "unknown") & (table.strings("education") != "unknown")
        return _from_table(
            table, columns=BANK_COLUMNS, split_by="job", label_column=None, keep=keep
        )
    raise ValueError(
        f"unknown built-in dataset {name!r}; choose one of {', '.join(BUILTIN_NAMES)} "
        "(g2-D-S with D and S numbers, e.g. 'g2-2-30')."
    )
