"""CLI additions for results: --version, --out exports, job list, plot without matplotlib."""

from __future__ import annotations

import importlib.util
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pandas as pd
import pytest

import fedclust.cli as cli
import fedclust.client
from fedclust.client import AnalystClient, AnalystConfig
from fedclust.data.federations import build_federation
from fedclust.protocol.wire.messages import JobProgress, JobPublic
from fedclust.simulate import job_spec
from tests.fedclust._results import sample_document


def test_version_prints_the_installed_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.startswith("fedclust ")


def test_simulate_out_names_centers_after_the_file_header(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = np.random.default_rng(0)
    points = np.vstack([rng.normal(0, 0.1, (30, 2)), rng.normal(3, 0.1, (30, 2))])
    pd.DataFrame(points, columns=["height", "weight"]).to_csv(tmp_path / "d.csv", index=False)
    out = tmp_path / "out"
    args = ["simulate", "--data", str(tmp_path / "d.csv"), "--algorithm", "ffcm",
            "--k-range", "2:3", "--seed", "1", "--protection", "none", "--out", str(out)]
    assert cli.main(args) == 0
    table = capsys.readouterr().out
    assert "height" in table and "weight" in table
    centers = pd.read_csv(out / "centers.csv")
    assert centers.columns.tolist() == ["k", "center", "selected", "height", "weight"]
    document = json.loads((out / "result.json").read_text())
    assert document["feature_names"] == ["height", "weight"]
    assert pd.read_csv(out / "sweep.csv")["k"].tolist() == [2, 3]


def _job() -> JobPublic:
    federation = build_federation(dataset="motivational", participants=None, seed=1)
    now = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    return JobPublic(
        id="job-1", state="running", created_at=now, updated_at=now,
        spec=job_spec(federation, algorithm="ffcm", ks=[2, 3]),
        progress=JobProgress(stage="clustering", k=3, round=4),
    )


@pytest.fixture
def coordinator(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The analyst's client talks to a fake coordinator; returns the paths requested."""
    seen: list[str] = []
    job = _job()

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(f"{request.method} {request.url.path}")
        if request.url.path.endswith("/jobs"):
            return httpx.Response(200, json=[job.model_dump(mode="json")])
        if request.url.path.endswith("/jobs/job-1/result"):
            return httpx.Response(200, json=sample_document().model_dump(mode="json"))
        if request.url.path.endswith("/jobs/job-1/disclosures"):
            return httpx.Response(404, json={"detail": "not in this test"})
        return httpx.Response(404, json={"detail": "unknown"})

    def client(config: AnalystConfig, **_: Any) -> AnalystClient:
        return AnalystClient(config, transport=httpx.MockTransport(handle))

    monkeypatch.setattr(fedclust.client, "AnalystClient", client)
    monkeypatch.setenv("FEDCLUST_COORDINATOR_URL", "http://coordinator.test")
    monkeypatch.setenv("FEDCLUST_TOKEN", "secret")
    return seen


def test_job_list_prints_one_line_per_job(
    coordinator: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["job", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["id", "algorithm", "state", "created", "progress"]
    [row] = [line for line in lines if line.startswith("job-1")]
    assert row.split()[:3] == ["job-1", "ffcm", "running"]
    assert "2026-01-02 03:04:05" in row and row.endswith("clustering K=3 round 4")
    assert cli.main(["job", "list", "--json"]) == 0
    assert [j["id"] for j in json.loads(capsys.readouterr().out)] == ["job-1"]
    assert coordinator == ["GET /api/v1/jobs", "GET /api/v1/jobs"]


def test_job_result_out_writes_exports_with_given_feature_names(
    coordinator: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["job", "result", "job-1", "--json", "--feature-names", "a,b",
            "--out", str(tmp_path)]
    assert cli.main(args) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["feature_names"] == ["a", "b"]
    assert json.loads((tmp_path / "result.json").read_text()) == printed
    assert pd.read_csv(tmp_path / "centers.csv").columns.tolist() == [
        "k", "center", "selected", "a", "b",
    ]


def test_plot_without_matplotlib_says_how_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec",
        lambda name, *a: None if name == "matplotlib" else real(name, *a),
    )
    result = tmp_path / "result.json"
    result.write_text(sample_document().model_dump_json())
    assert cli.main(["plot", str(result), "--out", str(tmp_path / "p")]) == 2
    assert capsys.readouterr().err.strip() == (
        'fedclust plot needs matplotlib: pip install "fedclust[plot]"'
    )
    assert not (tmp_path / "p").exists()


def test_simulate_without_seed_records_the_drawn_one_and_it_replays_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The data split (a Dirichlet split of the garst grid) and the sweep both draw from it.
    base = ["simulate", "--dataset", "garst-grid", "--participants", "3", "--split",
            "dirichlet", "--algorithm", "fkm", "--k-range", "3:4", "--protection", "none",
            "--json"]
    assert cli.main(base) == 0
    first = json.loads(capsys.readouterr().out)
    seed = first["seed"]
    assert isinstance(seed, int) and 0 <= seed < 2**32
    assert cli.main([*base, "--seed", str(seed)]) == 0
    assert json.loads(capsys.readouterr().out) == first
    assert cli.main([*base, "--out", str(tmp_path / "out")]) == 0
    another = json.loads(capsys.readouterr().out)
    exported = json.loads((tmp_path / "out" / "result.json").read_text())
    assert exported["seed"] == another["seed"] != seed  # a fresh draw, recorded in the export


def test_job_submit_feature_names_travel_in_the_job() -> None:
    from fedclust.cli import _parser
    from fedclust.cli.job import _job_from_flags

    flags = ["job", "submit", "--participants", "a,b,c", "--algorithm", "fkm", "--k", "3"]
    args = _parser().parse_args([*flags, "--feature-names", "sepal,petal"])
    assert _job_from_flags(args, args.participants).feature_names == ["sepal", "petal"]
    args = _parser().parse_args(flags)
    assert _job_from_flags(args, args.participants).feature_names is None
    args = _parser().parse_args([*flags, "--feature-names", "a,a"])
    with pytest.raises(ValueError, match="feature_names must be distinct"):
        _job_from_flags(args, args.participants)


def test_job_submit_refuses_a_preset_the_algorithm_lacks_as_simulate_does(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from fedclust.cli import _parser
    from fedclust.cli.job import _job_from_flags

    args = _parser().parse_args(["job", "submit", "--participants", "a,b,c", "--algorithm",
                                 "fkm", "--k", "3", "--preset", "paper"])
    with pytest.raises(ValueError) as refused:
        _job_from_flags(args, args.participants)
    message = str(refused.value)
    assert message == "--preset 'paper' is not one of fkm's presets (none)."
    assert cli.main(["simulate", "--dataset", "motivational", "--algorithm", "fkm", "--k", "2",
                     "--preset", "paper"]) != 0
    assert capsys.readouterr().err.splitlines()[-1].endswith(f"error: {message}")
