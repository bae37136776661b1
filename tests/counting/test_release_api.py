"""The differencing attack of issue 9 replayed against the counting service's app and store.

The coordinator runs many jobs over overlapping rosters and collects every total the service
releases; numpy then checks that those totals leave every count of fewer than three
participants undetermined.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Collection, Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest
from alembic import command
from sqlalchemy import text

import fedclust.counting.db
from fedclust.counting.app import create_app
from fedclust.counting.db import MIGRATIONS, CountingStore, ReleaseRefusedError, make_engine
from fedclust.counting.settings import CountingSettings, ParticipantCredential
from fedclust.crypto.tokens import token_sha256
from fedclust.protocol.maths.release_guard import release_would_expose
from tests.counting.test_api import COORDINATOR, Service
from tests.protocol.test_release_guard import ATTACK, exposing_sets

COUNTS = {"p1": 60, "p2": 77, "p3": 94, "p4": 111, "p5": 128, "p6": 145, "p7": 162}
TOKENS = {p: f"token-of-{p}" for p in COUNTS}


def settings_for(url: str) -> CountingSettings:
    return CountingSettings(
        coordinator_token_sha256=token_sha256(COORDINATOR),
        participants=tuple(
            ParticipantCredential(id=p, token_sha256=token_sha256(t)) for p, t in TOKENS.items()
        ),
        database_url=url,
    )


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    s = Service(create_app(settings_for(f"sqlite:///{tmp_path / 'counting.db'}")))
    yield s
    s.close()


def run_job(s: Service, job: str, roster: Sequence[str]) -> tuple[int, str | int]:
    """Put the roster, let every member report its count, ask for the total.

    Returns (HTTP status, the total when released, else the refusal's detail).
    """
    coordinator = s.as_(COORDINATOR)
    body = {"job_id": job, "participants": list(roster)}
    assert coordinator.put(f"/jobs/{job}/roster", json=body).status_code == 204
    for p in roster:
        report = {"job_id": job, "count": COUNTS[p], "roster": list(roster)}
        assert s.as_(TOKENS[p]).post(f"/jobs/{job}/counts", json=report).status_code == 202
    return ask_total(s, job)


def ask_total(s: Service, job: str) -> tuple[int, str | int]:
    response = s.as_(COORDINATOR).get(f"/jobs/{job}/total")
    if response.status_code == 200:
        total: int = response.json()["total"]
        return 200, total
    detail: str = response.json()["detail"]
    return response.status_code, detail


def assert_reveals_no_number(detail: str) -> None:
    """Outside the quoted job and participant ids, the only number is the minimum, 3."""
    assert set(re.findall(r"\d+", re.sub(r"'[^']*'", "", detail))) <= {"3"}
    assert "fewer than 3 participants derivable" in detail


def assert_hides_small_cohorts(released: dict[str, tuple[Sequence[str], int]]) -> None:
    """What the coordinator holds determines no combination of fewer than three counts."""
    rosters = [roster for roster, _ in released.values()]
    assert exposing_sets(rosters, 3) == []
    names = sorted(COUNTS)
    A = np.array([[1.0 if p in roster else 0.0 for p in names] for roster in rosters])
    totals = np.array([total for _, total in released.values()], dtype=float)
    assert np.array_equal(A @ np.array([COUNTS[p] for p in names], dtype=float), totals)
    rank = np.linalg.matrix_rank(A)
    assert rank < len(names)  # underdetermined, as the check above says
    for unit in np.eye(len(names)):  # no e_i in the row span
        assert np.linalg.matrix_rank(np.vstack([A, unit])) > rank


def test_the_attack_and_many_jobs_leave_every_small_count_hidden(service: Service) -> None:
    rng = np.random.default_rng(9)
    names = sorted(COUNTS)
    rosters = [*ATTACK] + [
        tuple(sorted(rng.choice(names, size=int(rng.integers(3, 8)), replace=False).tolist()))
        for _ in range(30)
    ]
    released: dict[str, tuple[Sequence[str], int]] = {}
    refused: dict[str, str] = {}
    for i, roster in enumerate(rosters):
        job = f"job-{i}"
        code, answer = run_job(service, job, roster)
        if code == 200:
            assert isinstance(answer, int)
            released[job] = (roster, answer)
        else:
            assert code == 409 and isinstance(answer, str)
            assert_reveals_no_number(answer)
            refused[job] = answer
    # the attack's second roster gives N_p3 − N_p4 with the first: refused, naming them
    assert "job-0" in released
    assert refused["job-1"].startswith("ΣN_l of job 'job-1' is not released")
    assert "participants 'p3', 'p4')" in refused["job-1"]
    assert len(released) >= 10 and len(refused) >= 15  # both paths, many times
    assert_hides_small_cohorts(released)
    # refusals are final (the participants named may change) and releases repeatable
    for job in refused:
        code, detail = ask_total(service, job)
        assert code == 409
        assert str(detail).startswith(f"ΣN_l of job {job!r} is not released, now or later")
    for job, (_, total) in released.items():
        assert ask_total(service, job) == (200, total)


def test_a_refusal_names_a_single_exposed_participant(service: Service) -> None:
    assert run_job(service, "a", ["p1", "p2", "p3"]) == (200, 231)
    code, detail = run_job(service, "b", ["p1", "p2", "p3", "p4"])
    assert code == 409
    assert isinstance(detail, str)
    assert detail.endswith("(the count of participant 'p4')")
    assert_reveals_no_number(detail)


def test_released_rosters_are_remembered_after_a_restart(database_url: str) -> None:
    """On SQLite and on PostgreSQL (tests/pg.py)."""
    db = database_url
    first = Service(create_app(settings_for(db)))
    assert run_job(first, "a", ["p1", "p2", "p3"]) == (200, 231)
    first.close()
    second = Service(create_app(settings_for(db)))
    try:
        code, detail = run_job(second, "b", ["p1", "p2", "p3", "p4"])
        assert code == 409
        assert "'p4'" in str(detail)
        assert ask_total(second, "a") == (200, 231)  # released before: released again
        assert run_job(second, "c", ["p4", "p5", "p6"]) == (200, 384)
    finally:
        second.close()
    third = Service(create_app(settings_for(db)))
    try:
        assert ask_total(third, "b") == (409, detail)
    finally:
        third.close()


def reported_store(url: str, rosters: dict[str, Sequence[str]]) -> CountingStore:
    store = CountingStore(url)
    for job, roster in rosters.items():
        store.put_roster(job, roster)
        for p in roster:
            store.report(job, p, COUNTS[p])
    return store


def test_concurrent_releases_cannot_both_pass(database_url: str) -> None:
    """Each of two jobs is safe alone, not together: of two racing requests one is refused."""
    store = reported_store(database_url, {"j1": ["p1", "p2", "p3"],
                                                      "j2": ["p1", "p2", "p3", "p4"]})
    barrier = threading.Barrier(2)
    outcome: dict[str, str] = {}

    def release(job: str) -> None:
        barrier.wait()
        try:
            store.release(job, min_participants=3)
            outcome[job] = "released"
        except ReleaseRefusedError:
            outcome[job] = "refused"

    threads = [threading.Thread(target=release, args=(job,)) for job in ("j1", "j2")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    store.close()
    assert sorted(outcome.values()) == ["refused", "released"]


def test_a_release_recorded_by_another_process_meanwhile_is_checked_again(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two stores on one database (two processes): the later record collides and re-checks
    (on SQLite and on PostgreSQL)."""
    mine = reported_store(
        database_url, {"j1": ["p1", "p2", "p3", "p4"], "j2": ["p1", "p2", "p3"]}
    )
    other = CountingStore(database_url)
    interleaved: list[str] = []

    def check_then_let_the_other_release(
        released: Iterable[Collection[str]], roster: Collection[str], min_cohort: int
    ) -> tuple[str, ...] | None:
        answer = release_would_expose(released, roster, min_cohort)
        if not interleaved:
            interleaved.append("j2")
            other.release("j2", min_participants=3)  # commits between mine's check and record
        return answer

    monkeypatch.setattr(
        fedclust.counting.db, "release_would_expose", check_then_let_the_other_release
    )
    try:
        with pytest.raises(ReleaseRefusedError) as refused:
            mine.release("j1", min_participants=3)
        assert refused.value.participants == ("p4",)
        assert interleaved == ["j2"]
    finally:
        mine.close()
        other.close()


def test_migration_0003_records_the_cohorts_released_before(tmp_path: Path) -> None:
    """A database at 0002 with a released total and a decrypted Paillier round: after the
    upgrade both cohorts are on the guard's record, so a total over one member fewer is
    refused as before."""
    url = f"sqlite:///{tmp_path / 'counting.db'}"
    engine = make_engine(url)
    with engine.begin() as connection:
        command.upgrade(MIGRATIONS.config(connection), "0002")
        now = "2026-11-01 00:00:00"
        for job, members in (("a", ["p1", "p2", "p3", "p4"]), ("b", ["p2", "p3", "p4", "p5"])):
            for p in members:
                connection.execute(text(
                    "INSERT INTO roster_entries VALUES (:j, :p, :t)"
                ), {"j": job, "p": p, "t": now})
        connection.execute(text("INSERT INTO released_rosters VALUES (1, 'a', :t)"), {"t": now})
        for p in ("p2", "p3", "p4", "p5"):
            connection.execute(text(
                "INSERT INTO paillier_contributions VALUES ('b', 1, :p, :t)"
            ), {"p": p, "t": now})
        connection.execute(text(
            "INSERT INTO paillier_closed_rounds VALUES ('b', 1, :t, NULL)"
        ), {"t": now})
        command.upgrade(MIGRATIONS.config(connection), "head")
    engine.dispose()
    store = CountingStore(url)
    try:
        store.put_roster("c", ["p1", "p2", "p3"])
        for p in ("p1", "p2", "p3"):
            store.report("c", p, 5)
        with pytest.raises(ReleaseRefusedError, match="'p4'"):
            store.release("c", min_participants=3)
        store.put_roster("d", ["p2", "p3", "p4"])
        for p in ("p2", "p3", "p4"):
            store.report("d", p, 5)
        with pytest.raises(ReleaseRefusedError):  # p5 by difference with round b/1
            store.release("d", min_participants=3)
    finally:
        store.close()
