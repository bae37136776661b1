"""Hostile requests to the counting service get a clean 4xx, never a 5xx (issue 11)."""

from __future__ import annotations

import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from fedclust.counting.app import create_app
from tests.asgi_raw import call
from tests.counting.test_api import COORDINATOR, TOKENS, UNKNOWN, Service, settings_for

MIB = 1 << 20


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    s = Service(create_app(settings_for(tmp_path / "counting.db")))
    yield s
    s.close()


@pytest.mark.parametrize(
    ("method", "path"),
    [("PUT", "/jobs/j/roster"), ("POST", "/jobs/j/counts"),
     ("POST", "/jobs/j/paillier/decrypt")],
)
def test_an_unauthenticated_50_mb_body_is_refused_unread(
    service: Service, method: str, path: str
) -> None:
    for headers in ({}, {"Authorization": f"Bearer {UNKNOWN}"}):
        response = call(service.app, method, f"/api/v1{path}", headers=headers,
                        body_bytes=50 * MIB)
        assert (response.status, response.consumed) == (401, 0)


def test_a_count_report_has_a_small_limit(service: Service) -> None:
    """1 MiB: a count and the admitted roster (up to 10,000 identifiers)."""
    headers = {"Authorization": f"Bearer {TOKENS['p0']}"}
    response = call(service.app, "POST", "/api/v1/jobs/j/counts", headers=headers,
                    body_bytes=MIB + 1)
    assert (response.status, response.consumed) == (413, 0)


@pytest.mark.parametrize(
    ("path", "token", "body"),
    [("/jobs/j/counts", TOKENS["p0"], {"job_id": "j", "count": 2**70, "roster": ["p0"]}),
     ("/jobs/j/paillier/contributions", TOKENS["p0"],
      {"job_id": "j", "round": 2**64, "roster": ["p0"]})],
    ids=["count", "round"],
)
def test_integers_beyond_64_bits_are_422(
    service: Service, path: str, token: str, body: dict[str, object]
) -> None:
    response = service.as_(token).post(path, json=body)
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["type"] == "less_than_equal"


def test_405_names_the_allowed_methods(service: Service) -> None:
    response = service.as_(COORDINATOR).delete("/jobs/j/roster")
    assert response.status_code == 405
    assert response.headers["Allow"] == "PUT"


def test_the_database_file_is_private(service: Service, tmp_path: Path) -> None:
    assert stat.S_IMODE((tmp_path / "counting.db").stat().st_mode) == 0o600
