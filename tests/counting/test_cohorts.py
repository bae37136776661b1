"""Masked cohorts at the counting service: participants announce the cohort of a masked sum
before they contribute, and the differencing guard counts it as released (issue 20)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from fedclust.counting.app import create_app
from tests.counting.test_api import (
    COORDINATOR,
    TOKENS,
    Service,
    put_roster,
    report,
    settings_for,
)

EVERYONE = ["p0", "p1", "p2", "p3"]


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    s = Service(create_app(settings_for(tmp_path / "counting.db")))
    yield s
    s.close()


def announce(s: Service, job: str, who: str, cohort: list[str]) -> httpx.Response:
    return s.as_(TOKENS[who]).post(f"/jobs/{job}/cohorts", json={"job_id": job, "cohort": cohort})


def test_a_masked_sum_over_the_survivors_of_a_dropout_is_refused(service: Service) -> None:
    """A coordinator that forces p3 out (a withheld task) after a masked sum over everyone
    cannot have the survivors' sum unmasked: their announcements are refused, so they do
    not contribute. The refusal is final and names p3 (public), never a value."""
    assert put_roster(service, "j", EVERYONE).status_code == 204
    assert announce(service, "j", "p0", EVERYONE).status_code == 204
    assert announce(service, "j", "p1", EVERYONE).status_code == 204  # the same cohort
    survivors = ["p0", "p1", "p2"]
    refused = announce(service, "j", "p1", survivors)
    assert refused.status_code == 409
    assert "(p3)" in refused.json()["detail"] and "now and later" in refused.json()["detail"]
    assert announce(service, "j", "p2", survivors).status_code == 409


def test_a_total_is_refused_after_a_masked_cohort_it_would_difference(service: Service) -> None:
    assert put_roster(service, "j", EVERYONE).status_code == 204
    assert announce(service, "j", "p0", EVERYONE).status_code == 204
    assert put_roster(service, "k", ["p0", "p1", "p2"]).status_code == 204
    for p in ("p0", "p1", "p2"):
        assert report(service, "k", p, 7).status_code == 202
    total = service.as_(COORDINATOR).get("/jobs/k/total")
    assert total.status_code == 409 and "'p3'" in total.json()["detail"]


def test_who_may_announce_what(service: Service) -> None:
    assert announce(service, "none", "p0", ["p0", "p1", "p2"]).status_code == 404
    assert put_roster(service, "j", ["p0", "p1", "p2"]).status_code == 204
    assert announce(service, "j", "p3", ["p0", "p1", "p2"]).status_code == 403  # off roster
    assert announce(service, "j", "p0", ["p1", "p2"]).status_code == 403  # not in it
    outside = announce(service, "j", "p0", ["p0", "p1", "p3"])
    assert outside.status_code == 403 and "p3" in outside.json()["detail"]
    assert service.as_(COORDINATOR).post(
        "/jobs/j/cohorts", json={"job_id": "j", "cohort": ["p0", "p1", "p2"]}
    ).status_code == 403
    assert announce(service, "j", "p0", ["p0", "p1", "p2"]).status_code == 204
