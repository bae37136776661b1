"""The roster a count is over (issue 20, members the coordinator invents): each count report
carries the roster its participant admitted for the job (its declare task's, which its roster
rule judged); the counting service takes the count only while its own roster of the job lies
within that roster, and releases no total over a roster outside any reporter's."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import delete, text
from sqlalchemy.orm import Session

from fedclust.counting.app import create_app
from fedclust.counting.db import (
    MIGRATIONS,
    CountingStore,
    RosterEntry,
    RosterNotAdmittedError,
    cohort_sha256,
    make_engine,
)
from fedclust.counting.settings import CountingSettings, ParticipantCredential
from fedclust.crypto.tokens import token_sha256
from tests.counting.test_api import COORDINATOR, Service, put_roster

#: p1..p5 organisations; x and y members the coordinator's operator runs.
TOKENS = {p: f"token-of-{p}" for p in ("p1", "p2", "p3", "p4", "p5", "x", "y")}
DECLARED = ["p1", "p2", "p3"]  # the roster p1 was declared and admitted
INVENTED = ["p1", "x", "y"]  # the roster the coordinator puts at the counting service


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    settings = CountingSettings(
        coordinator_token_sha256=token_sha256(COORDINATOR),
        participants=tuple(
            ParticipantCredential(id=p, token_sha256=token_sha256(t)) for p, t in TOKENS.items()
        ),
        database_url=f"sqlite:///{tmp_path / 'counting.db'}",
    )
    s = Service(create_app(settings))
    yield s
    s.close()


def send(s: Service, job: str, who: str, count: int, admitted: list[str]) -> int:
    response = s.as_(TOKENS[who]).post(
        f"/jobs/{job}/counts", json={"job_id": job, "count": count, "roster": admitted}
    )
    return response.status_code


def test_a_count_over_members_the_participant_did_not_admit_is_refused(
    service: Service,
) -> None:
    """The attack replayed: p1 admitted [p1, p2, p3]; the coordinator puts [p1, x, y] here
    and reports x's and y's counts itself, so that total − N_x − N_y = N_p1. p1's count is
    refused (403, the rule named) and no total over [p1, x, y] is ever released."""
    assert put_roster(service, "j", INVENTED).status_code == 204
    assert send(service, "j", "x", 5, INVENTED) == 202
    assert send(service, "j", "y", 6, INVENTED) == 202
    refused = service.as_(TOKENS["p1"]).post(
        "/jobs/j/counts", json={"job_id": "j", "count": 60, "roster": DECLARED}
    )
    assert refused.status_code == 403
    detail = refused.json()["detail"]
    assert "is not within the roster participant 'p1' admitted" in detail
    assert "60" not in detail  # ids only, never a count
    total = service.as_(COORDINATOR).get("/jobs/j/total")
    assert total.status_code == 409 and "only 2 of" in total.json()["detail"]


def test_a_roster_narrowed_after_dropouts_is_within_what_was_admitted(
    service: Service,
) -> None:
    """Equal or narrower is fine: p5 dropped out, the roster narrows to p1..p4, and the
    total over those four is released to the coordinator."""
    five = ["p1", "p2", "p3", "p4", "p5"]
    assert put_roster(service, "j", five).status_code == 204
    for n, p in enumerate(five, start=1):
        assert send(service, "j", p, 10 * n, five) == 202
    assert put_roster(service, "j", five[:4]).status_code == 204
    total = service.as_(COORDINATOR).get("/jobs/j/total")
    assert total.status_code == 200 and total.json()["total"] == 100


def test_no_total_is_released_over_a_roster_a_reporter_did_not_admit(tmp_path: Path) -> None:
    """Should the roster change under a count anyway (here a second process of the service
    swaps it between p1's report and the others'), the release still checks every reporter's
    admitted roster and refuses."""
    store = CountingStore(f"sqlite:///{tmp_path / 'counting.db'}")
    try:
        store.put_roster("j", DECLARED)
        store.report("j", "p1", 60, DECLARED)
        with Session(store._engine) as session, session.begin():
            session.execute(delete(RosterEntry).where(RosterEntry.participant_id != "p1"))
            session.add_all(
                RosterEntry(job_id="j", participant_id=p, created_at=datetime.now(UTC))
                for p in ("x", "y")
            )
        store.report("j", "x", 5, INVENTED)
        store.report("j", "y", 6, INVENTED)
        with pytest.raises(RosterNotAdmittedError, match="participant 'p1' admitted"):
            store.release("j", min_participants=3)
    finally:
        store.close()


def test_a_report_without_its_admitted_roster_is_refused(service: Service) -> None:
    """No roster given: no roster is within what was admitted (fails closed)."""
    assert put_roster(service, "j", DECLARED).status_code == 204
    bare = service.as_(TOKENS["p1"]).post("/jobs/j/counts", json={"job_id": "j", "count": 3})
    assert bare.status_code == 403 and "admitted for the job ([])" in bare.json()["detail"]


def test_migration_0003_takes_counts_of_before_as_reported_under_their_roster(
    tmp_path: Path,
) -> None:
    """A database at 0002 with two of three counts and an open Paillier round: after the
    upgrade each count and contribution of before is on record under its job's roster (with
    the job's contributors), so the job completes and its total is released as before."""
    url = f"sqlite:///{tmp_path / 'counting.db'}"
    engine = make_engine(url)
    with engine.begin() as connection:
        command.upgrade(MIGRATIONS.config(connection), "0002")
        now = "2026-11-01 00:00:00"
        for p in DECLARED:
            connection.execute(text("INSERT INTO roster_entries VALUES ('j', :p, :t)"),
                               {"p": p, "t": now})
        for p, n in (("p1", 60), ("p2", 70)):
            connection.execute(text("INSERT INTO counts VALUES ('j', :p, :n, :t)"),
                               {"p": p, "n": n, "t": now})
        connection.execute(text("INSERT INTO paillier_contributions VALUES ('j', 1, 'p1', :t)"),
                           {"t": now})
        command.upgrade(MIGRATIONS.config(connection), "head")
        named = {
            table: set(connection.execute(text(f"SELECT admitted_sha256 FROM {table}")).scalars())
            for table in ("counts", "paillier_contributions")
        }
    engine.dispose()
    assert named == {"counts": {cohort_sha256(DECLARED)},
                     "paillier_contributions": {cohort_sha256(DECLARED)}}
    store = CountingStore(url)
    try:
        store.report("j", "p3", 80, DECLARED)
        assert store.release("j", min_participants=3).total == 210
    finally:
        store.close()
