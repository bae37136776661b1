"""The counting service over HTTP: auth, roster rules, duplicates, release rule, persistence."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from fedclust.counting.app import create_app
from fedclust.counting.settings import CountingSettings, ParticipantCredential
from fedclust.crypto.tokens import token_sha256
from tests.counting.asgi import SyncASGITransport

COORDINATOR = "coordinator-token"
TOKENS = {f"p{i}": f"participant-token-{i}" for i in range(4)}
UNKNOWN = "not-a-token-of-this-service"


def settings_for(db: Path | str, *, min_participants: int = 3) -> CountingSettings:
    """Settings with the database file ``db`` (or the URL ``db``)."""
    return CountingSettings(
        coordinator_token_sha256=token_sha256(COORDINATOR),
        participants=tuple(
            ParticipantCredential(id=p, token_sha256=token_sha256(t)) for p, t in TOKENS.items()
        ),
        database_url=db if isinstance(db, str) else f"sqlite:///{db}",
        min_participants=min_participants,
    )


class Service:
    """One running app; ``as_(token)`` is a client presenting that token (None: no header)."""

    def __init__(self, app: FastAPI) -> None:
        self.app = app
        self._transport = SyncASGITransport(app)

    def as_(self, token: str | None) -> httpx.Client:
        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        return httpx.Client(
            base_url="http://counting/api/v1", transport=self._transport, headers=headers
        )

    def close(self) -> None:
        self.app.state.store.close()


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    s = Service(create_app(settings_for(tmp_path / "counting.db")))
    yield s
    s.close()


def put_roster(s: Service, job: str, members: list[str]) -> httpx.Response:
    return s.as_(COORDINATOR).put(
        f"/jobs/{job}/roster", json={"job_id": job, "participants": members}
    )


#: The roster a participant admitted, where a test is not about it: everyone enrolled, so
#: any roster of the service lies within it.
EVERYONE = sorted(TOKENS)


def report(
    s: Service, job: str, participant: str, count: int, admitted: list[str] = EVERYONE
) -> httpx.Response:
    return s.as_(TOKENS[participant]).post(
        f"/jobs/{job}/counts", json={"job_id": job, "count": count, "roster": admitted}
    )


ROUTES = [
    ("PUT", "/jobs/j/roster", {"job_id": "j", "participants": ["p0", "p1", "p2"]}),
    ("POST", "/jobs/j/counts", {"job_id": "j", "count": 5, "roster": EVERYONE}),
    ("GET", "/jobs/j/total", None),
]


@pytest.mark.parametrize("token", [None, UNKNOWN], ids=["no-token", "unknown-token"])
@pytest.mark.parametrize(("method", "path", "body"), ROUTES, ids=lambda r: str(r)[:5])
def test_every_route_needs_a_known_token(
    service: Service, token: str | None, method: str, path: str, body: object
) -> None:
    response = service.as_(token).request(method, path, json=body)
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    assert UNKNOWN not in response.text


def test_a_token_of_the_wrong_role_gets_403(service: Service) -> None:
    participant = service.as_(TOKENS["p0"])
    assert participant.put(
        "/jobs/j/roster", json={"job_id": "j", "participants": ["p0", "p1", "p2"]}
    ).status_code == 403
    assert participant.get("/jobs/j/total").status_code == 403
    coordinator = service.as_(COORDINATOR)
    response = coordinator.post(
        "/jobs/j/counts", json={"job_id": "j", "count": 5, "roster": EVERYONE}
    )
    assert response.status_code == 403
    assert "only a participant" in response.json()["detail"]


def test_health_needs_no_token(service: Service) -> None:
    assert service.as_(None).get("/health").json() == {"status": "ok"}


def test_only_participants_on_the_roster_may_report(service: Service) -> None:
    assert put_roster(service, "j", ["p0", "p1", "p2"]).status_code == 204
    outsider = report(service, "j", "p3", 7)  # enrolled, but not on this job's roster
    assert outsider.status_code == 403
    assert "not on the roster of job 'j'" in outsider.json()["detail"]
    no_roster = report(service, "other-job", "p0", 7)
    assert no_roster.status_code == 403
    assert "no roster for job 'other-job'" in no_roster.json()["detail"]


def test_a_roster_is_checked_against_the_enrolled_participants(service: Service) -> None:
    unknown = put_roster(service, "j", ["p0", "p1", "stranger"])
    assert unknown.status_code == 422
    assert "'stranger'" in unknown.json()["detail"][0]["msg"]
    small = put_roster(service, "j", ["p0", "p1"])
    assert small.status_code == 422
    assert "at least 3 participants; this roster has 2" in small.json()["detail"][0]["msg"]
    mismatch = service.as_(COORDINATOR).put(
        "/jobs/j/roster", json={"job_id": "k", "participants": ["p0", "p1", "p2"]}
    )
    assert mismatch.status_code == 422
    assert "differs" in mismatch.json()["detail"][0]["msg"]
    # nothing was stored by the rejected requests
    assert service.as_(COORDINATOR).get("/jobs/j/total").status_code == 404


def test_a_second_report_is_refused_with_409(service: Service) -> None:
    put_roster(service, "j", ["p0", "p1", "p2"])
    assert report(service, "j", "p0", 10).status_code == 202
    again = report(service, "j", "p0", 11)
    assert again.status_code == 409
    assert "already reported" in again.json()["detail"]
    for p in ("p1", "p2"):
        report(service, "j", p, 1)
    assert service.as_(COORDINATOR).get("/jobs/j/total").json()["total"] == 12  # 10, not 11


def test_bad_bodies_get_422_without_echoing_the_value(service: Service) -> None:
    put_roster(service, "j", ["p0", "p1", "p2"])
    client = service.as_(TOKENS["p0"])
    def post(**body: object) -> httpx.Response:
        return client.post("/jobs/j/counts", json={"roster": EVERYONE} | body)

    negative = post(job_id="j", count=-987654)
    assert negative.status_code == 422
    assert "987654" not in negative.text
    extra = post(job_id="j", count=3, n_l=3)
    assert extra.status_code == 422
    other_job = post(job_id="k", count=3)
    assert other_job.status_code == 422
    huge = post(job_id="j", count=2**60)
    assert huge.status_code == 422
    assert str(2**60) not in huge.text
    assert report(service, "j", "p0", 3).status_code == 202  # nothing was stored before


def test_the_total_is_released_only_when_enough_participants_reported(
    service: Service,
) -> None:
    coordinator = service.as_(COORDINATOR)
    assert coordinator.get("/jobs/j/total").status_code == 404  # no roster yet
    put_roster(service, "j", ["p0", "p1", "p2", "p3"])
    report(service, "j", "p0", 100)
    report(service, "j", "p1", 20)
    below = coordinator.get("/jobs/j/total")
    assert below.status_code == 409
    assert below.json()["detail"].startswith("only 2 of min 3 participants have reported")
    report(service, "j", "p2", 3)
    partial = coordinator.get("/jobs/j/total")  # 3 >= min, but a fourth is on the roster
    assert partial.status_code == 409
    assert "only 3 of the roster's 4 participants" in partial.json()["detail"]
    report(service, "j", "p3", 4)
    total = coordinator.get("/jobs/j/total")
    assert total.status_code == 200
    assert total.json() == {"job_id": "j", "total": 127, "reporters": 4}


def test_a_roster_is_idempotent_and_only_narrows_once_counts_exist(service: Service) -> None:
    assert put_roster(service, "j", ["p0", "p1", "p2"]).status_code == 204
    assert put_roster(service, "j", ["p0", "p1", "p3"]).status_code == 204  # no counts yet
    assert report(service, "j", "p2", 5).status_code == 403  # replaced roster
    assert report(service, "j", "p3", 5).status_code == 202
    assert put_roster(service, "j", ["p3", "p1", "p0"]).status_code == 204  # same set
    changed = put_roster(service, "j", ["p0", "p1", "p2", "p3"])
    assert changed.status_code == 409
    assert "can only narrow" in changed.json()["detail"]


def test_after_a_dropout_the_total_is_that_of_the_cohort_that_finished(
    service: Service,
) -> None:
    """The dropout attack of issue 20: the full roster's total and the survivors' summed
    memberships would give the dropped member's N_l by difference. The coordinator narrows
    the roster before the release instead; the full total is never released, and once a
    total is out the roster is fixed."""
    coordinator = service.as_(COORDINATOR)
    assert put_roster(service, "j", ["p0", "p1", "p2", "p3"]).status_code == 204
    for i, p in enumerate(["p0", "p1", "p2", "p3"]):
        assert report(service, "j", p, 10 + i).status_code == 202
    assert put_roster(service, "j", ["p0", "p1", "p2"]).status_code == 204  # p3 dropped out
    assert report(service, "j", "p3", 13).status_code == 403
    total = coordinator.get("/jobs/j/total")
    assert total.json() == {"job_id": "j", "total": 33, "reporters": 3}
    again = put_roster(service, "j", ["p0", "p1", "p2", "p3"])
    assert again.status_code == 409
    # A later job over everyone would give N_p3 with this one: refused for good, and its
    # roster cannot narrow to a safe one afterwards either.
    assert put_roster(service, "k", ["p0", "p1", "p2", "p3"]).status_code == 204
    for i, p in enumerate(["p0", "p1", "p2", "p3"]):
        report(service, "k", p, 10 + i)
    refused = coordinator.get("/jobs/k/total")
    assert refused.status_code == 409 and "'p3'" in refused.json()["detail"]
    assert put_roster(service, "j2", ["p0", "p1", "p2"]).status_code == 204
    for p in ("p0", "p1", "p2"):
        report(service, "j2", p, 1)
    assert coordinator.get("/jobs/j2/total").status_code == 200  # the same cohort as j
    narrowed = put_roster(service, "j2", ["p0", "p1"])
    assert narrowed.status_code == 422  # below the minimum roster anyway


def test_counts_persist_across_a_restart(database_url: str) -> None:
    """On SQLite and on PostgreSQL (tests/pg.py)."""
    db = database_url
    first = Service(create_app(settings_for(db)))
    put_roster(first, "j", ["p0", "p1", "p2"])
    report(first, "j", "p0", 11)
    report(first, "j", "p1", 22)
    first.close()
    second = Service(create_app(settings_for(db)))
    try:
        assert report(second, "j", "p0", 11).status_code == 409  # remembered
        assert report(second, "j", "p2", 33).status_code == 202
        assert second.as_(COORDINATOR).get("/jobs/j/total").json()["total"] == 66
    finally:
        second.close()


def test_settings_from_file_resolve_the_database_and_refuse_bad_entries(tmp_path: Path) -> None:
    good = tmp_path / "counting.toml"
    good.write_text(
        "[counting]\nport = 8801\ndatabase_url = \"sqlite:///data/counting.db\"\n"
        f"coordinator_token_sha256 = \"{token_sha256(COORDINATOR)}\"\n"
        f"[[participants]]\nid = \"p0\"\ntoken_sha256 = \"{token_sha256(TOKENS['p0'])}\"\n",
        encoding="utf-8",
    )
    settings = CountingSettings.from_file(good)
    assert settings.port == 8801
    assert settings.min_participants == 3
    assert settings.database_url == f"sqlite:///{tmp_path / 'data' / 'counting.db'}"
    assert settings.participant("p0") is not None
    bad = tmp_path / "bad.toml"
    bad.write_text('[counting]\ncoordinator_token_sha256 = ""\n', encoding="utf-8")
    with pytest.raises(
        ValueError, match=r"bad\.toml: \[counting\] coordinator_token_sha256 must be a non-"
    ):
        CountingSettings.from_file(bad)
    bad.write_text(
        f'[counting]\ncoordinator_token_sha256 = "{token_sha256("x")}"\nmin_participant = 2\n',
        encoding="utf-8",
    )
    with pytest.raises(ValueError, match=r"unknown key\(s\) 'min_participant' in \[counting\]"):
        CountingSettings.from_file(bad)
    bad.write_text('[counting]\ncoordinator_token_sha256 = "plain-token"\n', encoding="utf-8")
    with pytest.raises(ValueError, match="not a token"):
        CountingSettings.from_file(bad)
