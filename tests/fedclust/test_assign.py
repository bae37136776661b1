"""``fedclust participant assign``: one GET leaves, the labels are the estimator's.

A federation runs in process (coordinator, counting service and real agents over ASGI
transports, as :mod:`fedclust.inprocess`); after the job, a participant labels its rows through
a transport that records every request it makes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pandas as pd
import pytest

import fedclust.assign as assign_module
from fedclust import FederatedFuzzyCMeans, FederatedKMeans
from fedclust.asgi import InProcessApp
from fedclust.assign import assign_job, fetch_result, labels_frame
from fedclust.cli import main
from fedclust.client import AnalystClient, AnalystConfig, ApiError
from fedclust.config_files import FederationFiles, write_federation
from fedclust.inprocess import serving
from fedclust.participant.config import DataSource, ParticipantConfig
from fedclust.participant.policy import PROTECTIONS
from fedclust.protocol.wire.assignment import released_centers, sweep_entry
from fedclust.protocol.wire.messages import JobCreate

IDS = ("org-a", "org-b", "org-c")
SEED = 4


def _parts() -> list[np.ndarray]:
    """Three organisations' rows of two blobs, the second feature on a larger scale."""
    rng = np.random.default_rng(SEED)
    return [
        np.vstack([rng.normal(size=(15 + i, 2)), rng.normal(size=(12, 2)) + 4.0])
        * np.array([1.0, 30.0])
        for i in range(3)
    ]


class Recorder(httpx.BaseTransport):
    """A wire watcher: every request passes through, and is kept."""

    def __init__(self, inner: httpx.BaseTransport) -> None:
        self.inner = inner
        self.requests: list[httpx.Request] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        request.read()
        self.requests.append(request)
        return self.inner.handle_request(request)


@dataclasses.dataclass
class Service:
    files: FederationFiles
    coordinator: InProcessApp
    jobs: dict[str, str]  # algorithm → finished job id


@contextmanager
def _federation(root: Path, parts: list[np.ndarray], specs: dict[str, dict[str, Any]]
                ) -> Iterator[Service]:
    """Run each spec to success through the real apps and agents; keep the services up."""
    shares = {}
    for pid, X in zip(IDS, parts, strict=True):
        np.save(root / f"{pid}.npy", X)
        shares[pid] = f"{pid}.npy"
    files = write_federation(
        root, data=shares, coordinator_port=8700, counting_port=8701,
        protections=sorted(PROTECTIONS),  # the jobs below are unprotected
    )
    with serving(files, poll_wait=0.2) as coordinator:
        config = AnalystConfig(coordinator_url=files.coordinator_url, token=files.analyst_token)
        jobs = {}
        with AnalystClient(config, transport=coordinator.transport()) as client:
            client.wait_enrolled(list(IDS), timeout=60)
            for name, spec in specs.items():
                job = client.submit(JobCreate(participants=list(IDS), **spec))
                job = client.follow(job.id, poll=0.05, timeout=300)
                assert job.state == "succeeded", job.error
                jobs[name] = job.id
        yield Service(files, coordinator, jobs)


SPECS: dict[str, dict[str, Any]] = {
    "ffcm": {"algorithm": "ffcm", "k": 2, "seed": SEED, "standardise": True,
             "protection": "none"},
    "fkm": {"algorithm": "fkm", "k_range": (2, 3), "seed": SEED, "protection": "none"},
}


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    with _federation(tmp_path_factory.mktemp("assign"), _parts(), SPECS) as running:
        yield running


def _config(service: Service, index: int) -> ParticipantConfig:
    return ParticipantConfig.from_file(service.files.participants[IDS[index]])


def test_only_one_bodyless_get_leaves(service: Service) -> None:
    recorder = Recorder(service.coordinator.transport())
    job_id = service.jobs["ffcm"]
    rows = assign_job(_config(service, 0), job_id, transport=recorder)
    assert len(rows.assignment.labels) == len(_parts()[0])
    assert [(r.method, r.url.path) for r in recorder.requests] == [
        ("GET", f"/api/v1/participants/jobs/{job_id}/result")
    ]
    (request,) = recorder.requests
    assert request.content == b"" and "content-length" not in request.headers
    assert request.url.query == b""
    assert request.headers["authorization"] == f"Bearer {_config(service, 0).token}"


@pytest.mark.parametrize("index", range(3))
def test_standardised_labels_equal_the_estimators(service: Service, index: int) -> None:
    parts = _parts()
    estimator = FederatedFuzzyCMeans(
        2, protection="none", standardise=True, random_state=SEED
    ).fit(parts)
    fetched = fetch_result(_config(service, index), service.jobs["ffcm"],
                           transport=service.coordinator.transport())
    np.testing.assert_array_equal(
        np.array(fetched.result.sweep[0].centers), estimator.cluster_centers_
    )
    assert fetched.m == 2.0 and fetched.result.standardised
    rows = assign_job(_config(service, index), service.jobs["ffcm"],
                      transport=service.coordinator.transport())
    np.testing.assert_array_equal(rows.assignment.labels, estimator.predict(parts[index]))
    np.testing.assert_allclose(
        rows.assignment.memberships, estimator.predict_proba(parts[index]), rtol=0, atol=1e-12
    )


def test_kmeans_sweep_labels_with_the_selected_or_asked_k(service: Service) -> None:
    parts = _parts()
    job_id = service.jobs["fkm"]
    transport = service.coordinator.transport()
    selected = assign_job(_config(service, 1), job_id, transport=transport)
    estimator = FederatedKMeans(
        k_range=(2, 3), protection="none", random_state=SEED
    ).fit(parts)
    assert selected.k == estimator.n_clusters_
    np.testing.assert_array_equal(selected.assignment.labels, estimator.predict(parts[1]))
    np.testing.assert_array_equal(
        selected.assignment.memberships, estimator.predict_proba(parts[1])
    )
    three = assign_job(_config(service, 1), job_id, k=3, transport=transport)
    assert three.k == 3 and three.assignment.memberships.shape == (len(parts[1]), 3)
    with pytest.raises(ValueError, match="no sweep entry for K=5; it has K=2, 3"):
        assign_job(_config(service, 1), job_id, k=5, transport=transport)


def test_the_command_writes_labels_csv(
    service: Service, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    recorder = Recorder(service.coordinator.transport())
    original = fetch_result

    def watched(config: ParticipantConfig, job_id: str, *, transport: Any = None) -> Any:
        return original(config, job_id, transport=recorder)

    monkeypatch.setattr(assign_module, "fetch_result", watched)
    out = tmp_path / "out" / "labels.csv"
    job_id = service.jobs["ffcm"]
    status = main([
        "participant", "assign", "--config", str(service.files.participants[IDS[2]]),
        "--job", job_id, "--out", str(out),
    ])
    assert status == 0, capsys.readouterr().err
    frame = pd.read_csv(out)
    assert list(frame.columns) == ["row", "label", "membership_0", "membership_1"]
    assert [(r.method, r.content) for r in recorder.requests] == [("GET", b"")]
    monkeypatch.undo()
    expected = labels_frame(
        assign_job(_config(service, 2), job_id, transport=service.coordinator.transport())
    )
    pd.testing.assert_frame_equal(frame, expected, check_exact=True)


def test_errors_are_one_line(
    service: Service, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    transport = service.coordinator.transport()
    config = _config(service, 0)
    with pytest.raises(ApiError, match="HTTP 404: job 'no-such-job' does not exist"):
        assign_job(config, "no-such-job", transport=transport)
    elsewhere = dataclasses.replace(config, state_dir=tmp_path / "other-state")
    with pytest.raises(ValueError, match=r"standardised the data, but .* holds no saved"):
        assign_job(elsewhere, service.jobs["ffcm"], transport=transport)
    with pytest.raises(ValueError, match="--job must be 1-64 characters"):
        assign_job(config, "../jobs", transport=transport)

    def refused(config: ParticipantConfig, job_id: str, *, transport: Any = None) -> Any:
        return fetch_result(config, job_id, transport=service.coordinator.transport())

    monkeypatch.setattr(assign_module, "fetch_result", refused)
    status = main([
        "participant", "assign", "--config", str(service.files.participants[IDS[0]]),
        "--job", "no-such-job", "--out", str(tmp_path / "labels.csv"),
    ])
    err = capsys.readouterr().err
    assert status == 2
    assert err.strip() == (
        "fedclust participant assign: error: the coordinator answered HTTP 404: "
        "job 'no-such-job' does not exist"
    )
    assert not (tmp_path / "labels.csv").exists()


def _csv_with_blanks(path: Path) -> pd.DataFrame:
    """Organisation 0's rows as a CSV with an id column; every third row has a blank."""
    X = _parts()[0]
    frame = pd.DataFrame({"id": [f"p{i:03d}" for i in range(len(X))], "a": X[:, 0],
                          "b": X[:, 1]})
    frame.loc[frame.index % 3 == 1, "b"] = np.nan
    frame.to_csv(path, index=False, float_format="%.17g")
    return frame


def test_rows_left_out_keep_the_others_row_numbers_and_ids(
    service: Service, tmp_path: Path
) -> None:
    path = tmp_path / "blanks.csv"
    written = _csv_with_blanks(path)
    config = dataclasses.replace(
        _config(service, 0), data=DataSource(path=path, columns=("a", "b"), missing="drop")
    )
    job_id = service.jobs["fkm"]
    transport = service.coordinator.transport()
    with pytest.warns(UserWarning, match=r'left out \d+ row\(s\).*\[data\] missing = "drop"'):
        rows = assign_job(config, job_id, id_column="id", transport=transport)
    frame = labels_frame(rows)
    assert list(frame.columns)[:3] == ["row", "id", "label"]
    original = pd.read_csv(path)
    complete = original.dropna()
    assert len(frame) == len(complete) < len(original)
    doc = fetch_result(config, job_id, transport=transport).result
    centers, _ = released_centers(sweep_entry(doc, rows.k))
    # Joined on the row number: every label is the nearest center of that very row.
    by_row = frame.merge(original, left_on="row", right_index=True, suffixes=("", "_file"))
    assert (by_row["id"] == by_row["id_file"]).all()
    X = by_row[["a", "b"]].to_numpy()
    nearest = np.argmin(((X[:, None, :] - centers[None]) ** 2).sum(axis=2), axis=1)
    np.testing.assert_array_equal(by_row["label"].to_numpy(), nearest)
    # Joined on the id column: the same rows.
    by_id = frame.merge(written, on="id", validate="one_to_one")
    np.testing.assert_array_equal(by_id["row"].to_numpy(), complete.index.to_numpy())
    np.testing.assert_array_equal(by_id[["a", "b"]].to_numpy(), X)
    with pytest.raises(ValueError, match="clash with the output's own columns"):
        assign_job(config, job_id, id_column="label", transport=transport)


def test_the_command_takes_id_column_and_names_what_it_needs(
    service: Service, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    def in_process(config: ParticipantConfig, job_id: str, *, transport: Any = None) -> Any:
        return fetch_result(config, job_id, transport=service.coordinator.transport())

    monkeypatch.setattr(assign_module, "fetch_result", in_process)
    out = tmp_path / "labels.csv"
    status = main([
        "participant", "assign", "--config", str(service.files.participants[IDS[0]]),
        "--job", service.jobs["fkm"], "--out", str(out), "--id-column", "id",
    ])
    assert status == 2
    assert capsys.readouterr().err.strip() == (
        "fedclust participant assign: error: --id-column needs a CSV, ARFF or Parquet file; "
        f"{IDS[0]}.npy is .npy."
    )
    assert not out.exists()
