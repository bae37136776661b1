"""Run-time membership at the counting service: the coordinator asks, the counting operator
approves (``fedclust counter members approve``), the coordinator may revoke."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fedclust.cli import main
from fedclust.counting.app import create_app
from fedclust.counting.db import CountingStore
from fedclust.counting.members import Members
from fedclust.crypto.tokens import token_sha256
from tests.counting.test_api import COORDINATOR, TOKENS, Service, put_roster, settings_for

NEW_TOKEN = "token-of-a-new-member"


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    s = Service(create_app(settings_for(tmp_path / "counting.db")))
    yield s
    s.close()


def _count(s: Service, tok: str) -> int:
    """A count for a job without roster: 403 for a member (not on it), 401 for a stranger."""
    response = s.as_(tok).post("/jobs/none/counts", json={"job_id": "none", "count": 1})
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
    """`fedclust counter members` writes the database; the running app sees it at once."""
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
        assert _count(running, NEW_TOKEN) == 403
        assert main(["counter", "members", "reject", "p9", "--config", str(config)]) == 2
    finally:
        running.close()
    store = CountingStore(f"sqlite:///{db}")
    try:
        assert store.membership_requests() == {}
    finally:
        store.close()
