"""``fedclust simulate --init PATH``: the analyst's initial centers from a CSV or .npy file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fedclust.cli import main

BASE = ["simulate", "--dataset", "motivational", "--participants", "3", "--json"]


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main([*BASE, *args]) == 0
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    return doc


def _error(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main([*BASE, *args]) == 2
    lines = capsys.readouterr().err.splitlines()
    (error,) = [line for line in lines if line.startswith("fedclust simulate: error:")]
    return error


@pytest.mark.parametrize("algorithm", ["ffcm", "fkm"])
def test_init_at_a_seeded_runs_centers_converges_at_once(
    algorithm: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seeded = _run(capsys, "--algorithm", algorithm, "--k", "3", "--seed", "2")
    centers = np.array(seeded["sweep"][0]["centers"])
    assert seeded["sweep"][0]["rounds"] > 2  # (the seed also draws the data: kept)
    np.save(tmp_path / "centers.npy", centers)
    (tmp_path / "centers.csv").write_text(
        "x0,x1\n" + "\n".join(",".join(repr(float(v)) for v in row) for row in centers) + "\n"
    )
    runs = [
        _run(capsys, "--algorithm", algorithm, "--k", "3", "--seed", "2", "--init",
             str(tmp_path / name))
        for name in ("centers.npy", "centers.csv")
    ]
    for doc in runs:
        (entry,) = doc["sweep"]
        assert entry["rounds"] <= 2 and entry["stop_reason"] == "converged"
        np.testing.assert_allclose(entry["centers"], centers, atol=1e-3)
    assert runs[0]["sweep"] == runs[1]["sweep"]  # the same centers from either file


def test_bad_init_files_are_clear_errors_naming_init(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    three = tmp_path / "three.csv"
    three.write_text("0.1,0.1\n0.5,0.5\n0.9,0.9\n")
    wide = tmp_path / "wide.npy"
    np.save(wide, np.zeros((3, 4)))
    bad = tmp_path / "bad.csv"
    bad.write_text("0.1,0.1\n0.5,oops\n0.9,0.9\n")
    cases = {
        ("--algorithm", "ffcm", "--k-range", "2:4", "--init", str(three)):
            "--init gives the K initial centers of a single --k; it does not apply with "
            "--k-range",
        ("--algorithm", "kfed", "--protection", "none", "--k", "3", "--init", str(three)):
            "--init does not apply to --algorithm kfed",
        ("--algorithm", "ffcm", "--k", "2", "--init", str(three)):
            "--init: " + str(three) + " holds an array of shape (3, 2); --k 2 over data of 2 "
            "features needs 2 rows of 2 values",
        ("--algorithm", "fedfcm", "--k", "3", "--init", str(wide)):
            "holds an array of shape (3, 4)",
        ("--algorithm", "ffcm", "--k", "3", "--init", str(bad)):
            "--init: cannot read " + str(bad),
        ("--algorithm", "ffcm", "--k", "3", "--init", str(tmp_path / "absent.csv")):
            "--init: cannot read",
    }
    for args, message in cases.items():
        assert message in _error(capsys, *args)


def test_init_is_a_sweep_flag(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "c.csv"
    path.write_text("0,0\n1,1\n")
    assert main(["simulate", "--dataset", "digits", "--algorithm", "fed-distill",
                 "--init", str(path)]) == 2
    assert "--init does not apply to --algorithm fed-distill" in capsys.readouterr().err
