"""Messy data and wrong flags: one line on stderr that names the file, column, participant or
flag and what to do, with exit status 2 (issue 12's table, row by row)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedclust.cli import main

ROWS = np.random.default_rng(0).normal(size=(40, 3))


def _csv(path: Path, header: str, rows: list[str], *, encoding: str = "utf-8") -> Path:
    path.write_bytes(("\n".join([header, *rows]) + "\n").encode(encoding))
    return path


def _cells(r: np.ndarray, sep: str = ",") -> str:
    return sep.join(f"{v:.4f}" for v in r)


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        status = main([
            "simulate", "--algorithm", "ffcm", "--protection", "none", "--seed", "1", *argv
        ])
    except SystemExit as exit_:  # argparse's errors
        status = int(exit_.code or 0)
    out, err = capsys.readouterr()
    # Progress lines on stderr (off a terminal; tests/fedclust/test_progress.py) are left out.
    err = "".join(line for line in err.splitlines(keepends=True) if ": progress: " not in line)
    return status, out, err


def _one_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """The single stderr line of a run that must fail with status 2."""
    status, out, err = _run(capsys, *argv)
    lines = err.splitlines()
    assert status == 2 and out == "" and len(lines) == 1, (status, out, err)
    assert lines[0].startswith("fedclust simulate: error: ")
    return lines[0].removeprefix("fedclust simulate: error: ")


def test_blanks_and_na_name_the_column_and_line_and_offer_missing_drop(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [_cells(r) for r in ROWS]
    rows[3] = rows[3].replace(rows[3].split(",")[1], "", 1)  # a blank in column b (line 5)
    rows[6] = ",".join([*rows[6].split(",")[:2], "NA"])  # NA in column c (line 8)
    data = _csv(tmp_path / "blanks.csv", "a,b,c", rows)
    assert _one_error(capsys, "--data", str(data), "--k", "2") == (
        f"column 'b' of {data} has 1 missing value(s) (blank, NA or NaN; the first on line 5):"
        " fill them in, or leave those rows out with --missing drop."
    )
    status, out, err = _run(capsys, "--data", str(data), "--k", "2", "--missing", "drop")
    assert status == 0
    assert err.splitlines() == [
        f"fedclust simulate: warning: {data}: left out 2 row(s) with a missing value "
        "(--missing drop)."
    ]
    table = [line.split() for line in out.splitlines()]
    assert ["center", "a", "b", "c"] in table  # all three features kept


def test_a_text_column_is_left_out_with_a_warning_and_the_features_are_listed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _csv(tmp_path / "text.csv", "a,b,name", [
        f"{_cells(r[:2])},row{i}" for i, r in enumerate(ROWS)
    ])
    status, out, err = _run(capsys, "--data", str(data), "--k", "2")
    assert status == 0
    assert err.splitlines() == [
        f"fedclust simulate: warning: {data}: left out the non-numeric column(s) 'name' "
        "(name the features with --columns to choose them yourself)."
    ]
    assert ["center", "a", "b"] in [line.split() for line in out.splitlines()]
    assert "name" not in out


def test_decimal_commas_are_named_and_read_with_decimal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _csv(tmp_path / "semi.csv", "a;b;c", [
        _cells(r, ";").replace(".", ",") for r in ROWS
    ])
    assert _one_error(capsys, "--data", str(data), "--k", "2") == (
        f"{data}: column 'a' holds numbers with decimal commas: read them with --decimal ,"
    )
    status, out, _ = _run(capsys, "--data", str(data), "--k", "2", "--decimal", ",")
    points = _csv(tmp_path / "points.csv", "a,b,c", [_cells(r) for r in ROWS])
    _, reference, _ = _run(capsys, "--data", str(points), "--k", "2")
    assert status == 0
    assert out.split("\n", 1)[1] == reference.split("\n", 1)[1]  # after the title line


def test_latin1_asks_for_the_encoding(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = _csv(
        tmp_path / "latin1.csv", "größe,b,c", [_cells(r) for r in ROWS], encoding="latin-1"
    )
    assert _one_error(capsys, "--data", str(data), "--k", "2") == (
        f"{data} is not utf-8 text (line 1): give its encoding, e.g. --encoding latin-1."
    )
    status, out, _ = _run(capsys, "--data", str(data), "--k", "2", "--encoding", "latin-1")
    assert status == 0 and "größe" in out


def test_a_constant_column_is_warned_of(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = _csv(tmp_path / "const.csv", "a,b,c", [f"{_cells(r[:2])},1.0" for r in ROWS])
    status, _, err = _run(capsys, "--data", str(data), "--k", "2")
    assert status == 0
    assert err.splitlines() == [
        f"fedclust simulate: warning: {data}: the column(s) 'c' hold one value only and "
        "cannot separate clusters (leave them out with --columns)."
    ]


def test_participant_counts_are_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tiny = _csv(tmp_path / "tiny.csv", "a,b", [_cells(r[:2]) for r in ROWS[:4]])
    assert _one_error(capsys, "--data", str(tiny), "--participants", "10", "--k", "2") == (
        f"{tiny} has 4 rows, fewer than 10 participants: give --participants 4 or fewer."
    )
    assert _one_error(capsys, "--dataset", "motivational", "--participants", "0", "--k", "2") == (
        "--participants must be at least 1; got 0."
    )


def test_k_larger_than_a_participants_rows_names_the_participant(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tiny = _csv(tmp_path / "tiny.csv", "a,b", [_cells(r[:2]) for r in ROWS[:12]])
    message = _one_error(
        capsys, "--data", str(tiny), "--participants", "3", "--k", "5", "--algorithm", "fedfcm"
    )
    assert message.startswith("participant 'participant-0' declares row_bound=")
    assert "lower it (--k/--k-range) to at most" in message
    # ffcm, K = 400 on 300 rows: refused up front by the declared size rule, not after a
    # secure sum in which no masked input arrived.
    rows = np.random.default_rng(1).normal(size=(300, 2))
    many = _csv(tmp_path / "r300.csv", "a,b", [_cells(r) for r in rows])
    message = _one_error(capsys, "--data", str(many), "--k", "400", "--protection", "masking")
    assert message.startswith("participant 'participant-0' declares row_bound=128")
    assert "exact-FCM size rule" in message and message.endswith(
        "lower k to at most 43, or leave the participant out."
    )


@pytest.mark.parametrize(("flags", "expected"), [
    (["--k", "1"], "invalid job: --k must be greater than or equal to 2"),
    (["--k", "2", "--m", "1"], "invalid job: --m must be greater than 1"),
    (["--k", "2", "--gamma", "2"], "invalid job: --gamma must be less than or equal to 1"),
    (["--k", "3", "--algorithm", "kfed", "--protection", "masking"],
     "--algorithm kfed sends each participant's local centers by design and runs only with "
     "--protection none, not masking (the default is masking)."),
    (["--k-range", "2:x"],
     "argument --k-range: expected A:B with integers A <= B, e.g. 2:8; got '2:x' "
     "(see fedclust simulate --help)"),
])
def test_bad_flags_get_one_line_naming_the_flag(
    capsys: pytest.CaptureFixture[str], flags: list[str], expected: str
) -> None:
    assert _one_error(capsys, "--dataset", "motivational", *flags) == expected
