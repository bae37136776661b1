"""Run-time membership at the counting service: the coordinator asks, the counting operator
approves (``fedclust counter members approve``), the coordinator may revoke."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.exc import OperationalError

from fedclust.cli import main
from fedclust.counting.app import create_app
from fedclust.counting.db import CountingStore
from fedclust.counting.members import REFRESH_SECONDS, Members
from fedclust.counting.settings import CountingSettings, ParticipantCredential
from fedclust.crypto.tokens import token_sha256
from tests.counting.test_api import COORDINATOR, TOKENS, Service, put_roster, settings_for

NEW_TOKEN = "token-of-a-new-member"


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    s = Service(create_app(settings_for(tmp_path / "counting.db")))
    yield s
    s.close()


def _eventually(check: Callable[[], bool], seconds: float = 5.0) -> bool:
    """Whether ``check`` holds within ``seconds`` (asked every 50 ms)."""
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _spy(monkeypatch: pytest.MonkeyPatch, store: CountingStore) -> list[str]:
    """The names of the membership reads ``store`` is asked for, as they happen."""
    reads: list[str] = []

    def spied(name: str) -> Callable[[], Any]:
        real = getattr(store, name)

        def read() -> Any:
            reads.append(name)
            return real()
        return read

    for name in ("memberships", "membership_requests"):
        monkeypatch.setattr(store, name, spied(name))
    return reads


def _count(s: Service, tok: str) -> int:
    """A count for a job without roster: 403 for a member (not on it), 401 for a stranger."""
    response = s.as_(tok).post(
        "/jobs/none/counts", json={"job_id": "none", "count": 1, "roster": ["p0", "p1", "p2"]}
    )
    status: int = response.status_code
    return status


def _put(s: Service, caller: str | None, member: str, digest: str) -> int:
    status: int = s.as_(caller).put(
        f"/participants/{member}", json={"token_sha256": digest}
    ).status_code
    return status


def test_only_the_coordinator_changes_membership(service: Service) -> None:
    digest = token_sha256(NEW_TOKEN)
    assert _put(service, None, "p9", digest) == 401
    assert _put(service, TOKENS["p0"], "p9", digest) == 403
    assert service.as_(TOKENS["p0"]).delete("/participants/p1").status_code == 403
    assert _count(service, NEW_TOKEN) == 401
    assert _count(service, TOKENS["p1"]) == 403  # still a member


def _approve(s: Service, member: str) -> None:
    """The counting operator's approval, as `fedclust counter members approve` makes it."""
    s.app.state.members.approve(member)


def test_a_member_joins_once_the_counting_operator_approves(service: Service) -> None:
    digest = token_sha256(NEW_TOKEN)
    assert _put(service, COORDINATOR, "p9", digest) == 202
    assert _count(service, NEW_TOKEN) == 401  # asked for, not admitted
    refused = put_roster(service, "j0", ["p0", "p1", "p9"])
    assert refused.status_code == 422
    assert "'p9' await(s) the counting operator's approval" in refused.text
    _approve(service, "p9")
    assert _count(service, NEW_TOKEN) == 403  # a member now (not on that job's roster)
    assert _put(service, COORDINATOR, "p9", digest) == 204  # in force: nothing to approve
    assert put_roster(service, "j1", ["p0", "p1", "p9"]).status_code == 204
    for member, tok in (("p9", NEW_TOKEN), ("p0", TOKENS["p0"])):
        assert service.as_(COORDINATOR).delete(f"/participants/{member}").status_code == 204
        assert _count(service, tok) == 401
    refused = put_roster(service, "j2", ["p1", "p2", "p9"])
    assert refused.status_code == 422 and "'p9'" in refused.text


def test_the_coordinator_cannot_invent_members_to_isolate_a_count(service: Service) -> None:
    """The attack of issue 20: the coordinator's credential registers two members it runs,
    puts the roster [p1, A, B] and reads the total; minus its own counts that is N_p1.
    Now A and B are only requested: the roster is refused and A's token is unknown."""
    tokens = {"A": "operator-run-member-a", "B": "operator-run-member-b"}
    for member, tok in tokens.items():
        assert _put(service, COORDINATOR, member, token_sha256(tok)) == 202
    refused = put_roster(service, "isolate", ["p1", "A", "B"])
    assert refused.status_code == 422
    for tok in tokens.values():
        assert _count(service, tok) == 401
    assert service.as_(COORDINATOR).get("/jobs/isolate/total").status_code == 404
    # A coordinator re-keying a real member is only a request too: p1's token still works.
    assert _put(service, COORDINATOR, "p1", token_sha256("stolen")) == 202
    assert _count(service, TOKENS["p1"]) == 403 and _count(service, "stolen") == 401


def test_a_token_is_never_shared(service: Service) -> None:
    assert _put(service, COORDINATOR, "p9", token_sha256(COORDINATOR)) == 409
    assert _put(service, COORDINATOR, "p9", token_sha256(TOKENS["p1"])) == 409
    assert _put(service, COORDINATOR, "p9", "not-a-digest") == 422


def test_approval_checks_the_digest_the_organisation_reports(service: Service) -> None:
    members: Members = service.app.state.members
    with pytest.raises(ValueError, match="no membership request of 'p9' is pending"):
        members.approve("p9")
    assert _put(service, COORDINATOR, "p9", token_sha256(NEW_TOKEN)) == 202
    with pytest.raises(ValueError, match="another token"):
        members.approve("p9", token_sha256("what the organisation holds"))
    assert _count(service, NEW_TOKEN) == 401
    assert members.approve("p9", token_sha256(NEW_TOKEN)) == token_sha256(NEW_TOKEN)
    assert _count(service, NEW_TOKEN) == 403


def test_memberships_survive_a_restart(tmp_path: Path) -> None:
    first = Service(create_app(settings_for(tmp_path / "counting.db")))
    assert _put(first, COORDINATOR, "p9", token_sha256(NEW_TOKEN)) == 202
    _approve(first, "p9")
    assert first.as_(COORDINATOR).delete("/participants/p0").status_code == 204
    first.close()
    second = Service(create_app(settings_for(tmp_path / "counting.db")))
    assert _count(second, NEW_TOKEN) == 403
    assert _count(second, TOKENS["p0"]) == 401
    second.close()


def test_the_cli_approves_for_a_running_service(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`fedclust counter members` writes the database; the running app sees it within about
    a second (its snapshot of the memberships is reread once older than REFRESH_SECONDS)."""
    db = tmp_path / "counting.db"
    config = tmp_path / "counting.toml"
    participants = "".join(
        f'[[participants]]\nid = "{p}"\ntoken_sha256 = "{token_sha256(t)}"\n'
        for p, t in TOKENS.items()
    )
    config.write_text(
        f'[counting]\ndatabase_url = "sqlite:///{db}"\n'
        f'coordinator_token_sha256 = "{token_sha256(COORDINATOR)}"\n' + participants
    )
    running = Service(create_app(settings_for(db)))
    try:
        assert _put(running, COORDINATOR, "p9", token_sha256(NEW_TOKEN)) == 202
        assert main(["counter", "members", "list", "--config", str(config)]) == 0
        listed = capsys.readouterr().out
        assert f"pending  p9  token_sha256={token_sha256(NEW_TOKEN)}" in listed
        assert main([
            "counter", "members", "approve", "p9", "--config", str(config),
            "--token-sha256", token_sha256("wrong"),
        ]) == 2
        assert "another token" in capsys.readouterr().err
        assert _count(running, NEW_TOKEN) == 401
        assert main(["counter", "members", "approve", "p9", "--config", str(config)]) == 0
        # A roster naming it is accepted at once (a miss rereads the store), its token
        # within about a second (the snapshot's age).
        assert put_roster(running, "right-after", ["p0", "p1", "p9"]).status_code == 204
        assert _eventually(lambda: _count(running, NEW_TOKEN) == 403)
        assert main(["counter", "members", "reject", "p9", "--config", str(config)]) == 2
    finally:
        running.close()
    store = CountingStore(f"sqlite:///{db}")
    try:
        assert store.membership_requests() == {}
    finally:
        store.close()


def test_a_large_roster_and_junk_tokens_read_no_memberships_per_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 1,000-member roster was checked with one read of the memberships table per member
    (under the store's lock), and every request with a body and an unknown token read it in
    the body guard, on the event loop. Checks read a snapshot: the store is read at most once
    per REFRESH_SECONDS, however many members and requests."""
    ids = [f"member-{i:04d}" for i in range(1000)]
    settings = CountingSettings(
        coordinator_token_sha256=token_sha256(COORDINATOR),
        participants=tuple(
            ParticipantCredential(id=p, token_sha256=token_sha256(f"token-of-{p}")) for p in ids
        ),
        database_url=f"sqlite:///{tmp_path / 'counting.db'}",
    )
    s = Service(create_app(settings))
    try:
        assert _put(s, COORDINATOR, "asked-for", token_sha256(NEW_TOKEN)) == 202
        reads = _spy(monkeypatch, s.app.state.store)
        started = time.monotonic()
        assert put_roster(s, "big", ids).status_code == 204
        refused = put_roster(s, "bigger", [*ids, "asked-for", *(f"x{i}" for i in range(500))])
        assert refused.status_code == 422 and "'asked-for' await(s)" in refused.text
        for i in range(200):
            assert _count(s, f"junk-{i}") == 401
        refreshes = (time.monotonic() - started) / REFRESH_SECONDS + 1
        assert len(reads) <= 2 * refreshes  # both tables once per refresh, not per member
    finally:
        s.close()


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _elsewhere(db: str) -> None:
    """Another process (the CLI) approves p9's request in the database."""
    other = CountingStore(db)
    try:
        other.request_membership("p9", token_sha256(NEW_TOKEN))
        other.approve_membership("p9", None)
    finally:
        other.close()


def test_the_snapshot_is_reread_lazily_at_most_once_per_second(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = f"sqlite:///{tmp_path / 'counting.db'}"
    store = CountingStore(db)
    clock = _Clock()
    try:
        reads = _spy(monkeypatch, store)
        members = Members(settings_for(db), store, clock=clock)
        assert len(reads) == 2
        _elsewhere(db)
        clock.now = REFRESH_SECONDS / 2
        assert [members.is_member(p) for _ in range(100) for p in ("p0", "p9")].count(True) == 100
        assert len(reads) == 2  # fresh enough: no read, p9 not seen yet
        clock.now = REFRESH_SECONDS
        assert members.is_member("p9") and len(reads) == 4  # the first stale check rereads
        assert all(members.is_member("p9") for _ in range(100)) and len(reads) == 4
        # In-process changes apply at once, without a read.
        members.revoke("p9")
        assert not members.is_member("p9") and len(reads) == 4
    finally:
        store.close()


def test_one_check_rereads_while_the_others_keep_the_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = f"sqlite:///{tmp_path / 'counting.db'}"
    store = CountingStore(db)
    clock = _Clock()
    members = Members(settings_for(db), store, clock=clock)
    entered, release = threading.Event(), threading.Event()
    read = store.memberships
    reads: list[str] = []

    def slow_read() -> dict[str, str | None]:
        reads.append("memberships")
        entered.set()
        release.wait(10)
        return read()

    monkeypatch.setattr(store, "memberships", slow_read)
    try:
        _elsewhere(db)
        clock.now = REFRESH_SECONDS
        rereading = threading.Thread(target=members.is_member, args=("p0",))
        rereading.start()
        assert entered.wait(10)
        # While it reads, others answer from the snapshot they have, without a read.
        assert [members.is_member("p9") for _ in range(50)] == [False] * 50
        assert reads == ["memberships"]
        release.set()
        rereading.join(10)
        assert members.is_member("p9") and reads == ["memberships"]
    finally:
        release.set()
        store.close()


def test_a_failed_reread_keeps_the_last_snapshot_for_a_second(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = f"sqlite:///{tmp_path / 'counting.db'}"
    store = CountingStore(db)
    clock = _Clock()
    members = Members(settings_for(db), store, clock=clock)
    failures: list[str] = []

    def locked() -> dict[str, str | None]:
        failures.append("memberships")
        raise OperationalError("SELECT", {}, Exception("database is locked"))

    monkeypatch.setattr(store, "memberships", locked)
    try:
        clock.now = REFRESH_SECONDS
        assert members.is_member("p0") and len(failures) == 1
        assert members.is_member("p0") and len(failures) == 1  # not again before a second
        clock.now = 2 * REFRESH_SECONDS
        assert members.is_member("p0") and len(failures) == 2
    finally:
        store.close()


def test_membership_reads_do_not_wait_for_the_stores_write_lock(tmp_path: Path) -> None:
    """Each read has its own session and pooled connection: a long write (the store's lock
    held) does not hold up the snapshot's reread."""
    store = CountingStore(f"sqlite:///{tmp_path / 'counting.db'}")
    try:
        with ThreadPoolExecutor(2) as pool, store._lock:
            memberships = pool.submit(store.memberships)
            requests = pool.submit(store.membership_requests)
            assert memberships.result(timeout=10) == requests.result(timeout=10) == {}
    finally:
        store.close()
