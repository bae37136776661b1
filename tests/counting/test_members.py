"""Run-time membership at the counting service: the coordinator adds and revokes members."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fedclust.counting.app import create_app
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


def test_a_member_joins_and_is_revoked_at_once(service: Service) -> None:
    assert _put(service, COORDINATOR, "p9", token_sha256(NEW_TOKEN)) == 204
    assert _count(service, NEW_TOKEN) == 403
    assert put_roster(service, "j1", ["p0", "p1", "p9"]).status_code == 204
    for member, tok in (("p9", NEW_TOKEN), ("p0", TOKENS["p0"])):
        assert service.as_(COORDINATOR).delete(f"/participants/{member}").status_code == 204
        assert _count(service, tok) == 401
    refused = put_roster(service, "j2", ["p1", "p2", "p9"])
    assert refused.status_code == 422 and "'p9'" in refused.text


def test_a_token_is_never_shared(service: Service) -> None:
    assert _put(service, COORDINATOR, "p9", token_sha256(COORDINATOR)) == 409
    assert _put(service, COORDINATOR, "p9", token_sha256(TOKENS["p1"])) == 409
    assert _put(service, COORDINATOR, "p9", "not-a-digest") == 422


def test_memberships_survive_a_restart(tmp_path: Path) -> None:
    first = Service(create_app(settings_for(tmp_path / "counting.db")))
    assert _put(first, COORDINATOR, "p9", token_sha256(NEW_TOKEN)) == 204
    assert first.as_(COORDINATOR).delete("/participants/p0").status_code == 204
    first.close()
    second = Service(create_app(settings_for(tmp_path / "counting.db")))
    assert _count(second, NEW_TOKEN) == 403
    assert _count(second, TOKENS["p0"]) == 401
    second.close()
