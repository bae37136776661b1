"""Masked cohorts at the counting service: participants announce the cohort of a masked sum
before they contribute, and the differencing guard counts it as released; before they unmask
a round they register its view, and only the round's first view is accepted (issue 20)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from fedclust.counting.app import create_app
from fedclust.counting.settings import CountingSettings, ParticipantCredential
from fedclust.crypto.tokens import token_sha256
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


def view(
    s: Service, job: str, who: str, survivors: list[str], dropped: list[str], *,
    round_no: int = 1, tokens: dict[str, str] = TOKENS,
) -> httpx.Response:
    body = {"job_id": job, "setup": 1, "round": round_no, "survivors": survivors,
            "dropped": dropped}
    return s.as_(tokens[who]).post(f"/jobs/{job}/unmasking", json=body)


NINE = {f"m{i}": f"member-token-{i}" for i in range(9)}


@pytest.fixture
def nine(tmp_path: Path) -> Iterator[Service]:
    """A counting service with nine members m0..m8 enrolled."""
    settings = CountingSettings(
        coordinator_token_sha256=token_sha256(COORDINATOR),
        participants=tuple(
            ParticipantCredential(id=p, token_sha256=token_sha256(t)) for p, t in NINE.items()
        ),
        database_url=f"sqlite:///{tmp_path / 'nine.db'}",
    )
    s = Service(create_app(settings))
    yield s
    s.close()


@pytest.mark.parametrize("first", ["target", "dropped", "others"])
def test_a_round_is_unmasked_under_one_view_only(nine: Service, first: str) -> None:
    """The split-view attack of the security review, replayed: nine members, all masked
    inputs received, target u = m0. u is told D = m4..m8 dropped (it would hand over its pair
    keys with them); each of D is told everyone survived (it would hand over its share of
    u's self-mask seed); the other three, T, are told u and two of D dropped. Whichever group
    registers its view first, the other views of the round are refused (409, the rule
    named), so no participant answers two splits of one round; the accepted view is
    accepted again (a restarted agent)."""
    everyone = sorted(NINE)
    u, t, d = ["m0"], ["m1", "m2", "m3"], ["m4", "m5", "m6", "m7", "m8"]
    assert put_roster(nine, "j", everyone).status_code == 204
    for p in everyone:  # the masked inputs' cohort
        r = nine.as_(NINE[p]).post("/jobs/j/cohorts", json={"job_id": "j", "cohort": everyone})
        assert r.status_code == 204
    View = tuple[list[str], list[str]]
    views: dict[str, dict[str, View]] = {
        "target": {"m0": (u + t, d)},
        "dropped": {p: (everyone, []) for p in d},
        "others": {p: (t + d[:3], u + d[3:]) for p in t},
    }
    order = [first] + [g for g in views if g != first]
    for group in order:
        for who, (survivors, dropped) in views[group].items():
            r = view(nine, "j", who, survivors, dropped, tokens=NINE)
            if group == first:
                assert r.status_code == 204, r.text
            else:
                assert r.status_code == 409, r.text
                assert "a round is unmasked under one view only" in r.json()["detail"]
    who, (survivors, dropped) = next(iter(views[first].items()))
    assert view(nine, "j", who, survivors, dropped, tokens=NINE).status_code == 204
    # Another round, or another job, has a view of its own.
    assert view(nine, "j", "m1", everyone, [], round_no=2, tokens=NINE).status_code == 204


def test_the_survivors_of_a_dropout_pass_the_differencing_guard(service: Service) -> None:
    """A view whose survivors differ from a released cohort by fewer than the minimum is
    refused (the forced-dropout attack at the unmasking stage) and nothing is recorded, so
    the view of everyone is still the round's first."""
    assert put_roster(service, "j", EVERYONE).status_code == 204
    assert announce(service, "j", "p0", EVERYONE).status_code == 204
    refused = view(service, "j", "p0", ["p0", "p1", "p2"], ["p3"])
    assert refused.status_code == 409 and "(p3)" in refused.json()["detail"]
    assert view(service, "j", "p1", EVERYONE, []).status_code == 204


def test_who_may_register_which_view(service: Service) -> None:
    assert view(service, "none", "p0", ["p0", "p1", "p2"], []).status_code == 404
    assert put_roster(service, "j", ["p0", "p1", "p2"]).status_code == 204
    assert view(service, "j", "p3", ["p0", "p1", "p2"], []).status_code == 403  # off roster
    assert view(service, "j", "p0", ["p1", "p2"], ["p0"]).status_code == 403  # not a survivor
    outside = view(service, "j", "p0", ["p0", "p1"], ["p3"])
    assert outside.status_code == 403 and "p3" in outside.json()["detail"]
    assert view(service, "j", "p0", ["p0", "p1", "p2"], ["p2"]).status_code == 422  # both
    assert view(service, "j", "p0", ["p0", "p0", "p1"], []).status_code == 422  # twice
    body = {"job_id": "j", "setup": 1, "round": 1, "survivors": ["p0", "p1", "p2"],
            "dropped": []}
    assert service.as_(COORDINATOR).post("/jobs/j/unmasking", json=body).status_code == 403
    assert view(service, "j", "p0", ["p0", "p1", "p2"], []).status_code == 204
