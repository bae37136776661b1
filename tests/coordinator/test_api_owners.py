"""Jobs belong to the analyst who created them; an admin sees every job (issue 11)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from fedclust.coordinator.app import create_app
from fedclust.coordinator.db import MIGRATIONS, Database
from fedclust.coordinator.settings import AnalystCredential, CoordinatorSettings
from fedclust.crypto.tokens import token_sha256
from fedclust.protocol.wire.messages import JobCreate
from tests.coordinator._service import (
    ANALYST,
    API,
    NAMES,
    FakeCounting,
    auth,
    enrol,
    settings,
)

BOB = auth("bob-secret-token")
ROOT = auth("root-secret-token")
SPEC = {"algorithm": "fedfcm", "participants": list(NAMES), "k": 3, "protection": "none"}


def owners_settings(tmp_path: Path) -> CoordinatorSettings:
    """alice (the shared tests' analyst), bob (analyst) and root (admin)."""
    base = settings(tmp_path)
    return dataclasses.replace(base, analysts=(
        *base.analysts,
        AnalystCredential("bob", token_sha256("bob-secret-token")),
        AnalystCredential("root", token_sha256("root-secret-token"), role="admin"),
    ))


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    app = create_app(owners_settings(tmp_path), counting_transport=FakeCounting().transport())
    with TestClient(app) as c:
        for name in NAMES:
            enrol(c, name)
        yield c


def create(client: TestClient, headers: dict[str, str]) -> dict[str, Any]:
    response = client.post(f"{API}/jobs", json=SPEC, headers=headers)
    assert response.status_code == 201, response.text
    job: dict[str, Any] = response.json()
    return job


def listed(client: TestClient, headers: dict[str, str]) -> list[str]:
    return [j["id"] for j in client.get(f"{API}/jobs", headers=headers).json()]


def test_a_job_records_its_owner(client: TestClient) -> None:
    job = create(client, ANALYST)
    assert job["owner"] == "alice"
    assert client.get(f"{API}/jobs/{job['id']}", headers=ANALYST).json()["owner"] == "alice"


@pytest.mark.parametrize(
    ("method", "suffix"),
    [("GET", ""), ("GET", "/result"), ("GET", "/result/sweep.csv"), ("GET", "/disclosures"),
     ("GET", "/history"), ("POST", "/cancel")],
)
def test_another_analyst_gets_404(client: TestClient, method: str, suffix: str) -> None:
    job = create(client, ANALYST)
    response = client.request(method, f"{API}/jobs/{job['id']}{suffix}", headers=BOB)
    assert response.status_code == 404
    assert response.json() == {"detail": f"job {job['id']!r} does not exist"}
    state = client.get(f"{API}/jobs/{job['id']}", headers=ANALYST).json()["state"]
    assert state != "cancelled"


def test_the_list_shows_an_analyst_its_own_jobs_and_an_admin_all(client: TestClient) -> None:
    alices, bobs = create(client, ANALYST), create(client, BOB)
    assert listed(client, ANALYST) == [alices["id"]]
    assert listed(client, BOB) == [bobs["id"]]
    assert listed(client, ROOT) == [alices["id"], bobs["id"]]


def test_an_admin_reads_and_cancels_any_job(client: TestClient) -> None:
    job = create(client, ANALYST)
    assert client.get(f"{API}/jobs/{job['id']}/disclosures", headers=ROOT).status_code == 200
    cancelled = client.post(f"{API}/jobs/{job['id']}/cancel", headers=ROOT)
    assert cancelled.status_code == 200
    assert cancelled.json()["owner"] == "alice"


def test_an_old_database_gains_the_owner_column(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    db = Database(url)
    db.create_all()
    spec = JobCreate.model_validate(SPEC)
    db.create_job("job-old", spec, n_features=2)
    with db.engine.begin() as connection:  # as a coordinator before owners were kept
        connection.execute(text("ALTER TABLE jobs DROP COLUMN owner"))
        connection.execute(text(f"DROP TABLE {MIGRATIONS.version_table}"))  # and migrations
    db.dispose()
    db = Database(url)
    assert db.migrate() == (None, MIGRATIONS.head())
    old = db.job("job-old")
    assert old is not None and old.owner is None
    assert db.create_job("job-new", spec, n_features=2, owner="bob").owner == "bob"
    db.dispose()


def test_a_job_without_an_owner_stays_visible_to_every_analyst(tmp_path: Path) -> None:
    app = create_app(owners_settings(tmp_path), counting_transport=FakeCounting().transport())
    with TestClient(app) as client:
        services = app.state.services
        services.db.create_job("job-legacy", JobCreate.model_validate(SPEC), n_features=2)
        for headers in (ANALYST, BOB, ROOT):
            assert listed(client, headers) == ["job-legacy"]
            response = client.get(f"{API}/jobs/job-legacy", headers=headers)
            assert response.json()["owner"] is None
