"""Onboarding without restarts: invite, join, revoke and the admin trail, against a running
coordinator wired to a real counting service (in process, no sockets)."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from fedclust.coordinator import db as coordinator_db
from fedclust.coordinator.app import create_app
from fedclust.coordinator.settings import AnalystCredential
from fedclust.counting.app import create_app as create_counting
from fedclust.counting.members import Members
from fedclust.counting.settings import CountingSettings, ParticipantCredential
from fedclust.crypto.masking import IdentityKey
from fedclust.crypto.tokens import token_sha256
from fedclust.protocol.wire.secure import b64
from tests.coordinator._service import (
    ANALYST,
    API,
    COUNTING_TOKEN,
    NAMES,
    OUTSIDER,
    auth,
    settings,
    token,
)
from tests.counting.asgi import SyncASGITransport

ADMIN_TOKEN = "admin-secret-token"
ADMIN = auth(ADMIN_TOKEN)
NEW = "hospital-d"


class Switch(httpx.BaseTransport):
    """The counting service's transport; ``down`` makes it answer 500 (a refusal)."""

    def __init__(self, inner: httpx.BaseTransport) -> None:
        self.inner = inner
        self.down = threading.Event()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if self.down.is_set():
            return httpx.Response(500, json={"detail": "the counting service is failing"})
        return self.inner.handle_request(request)


@dataclass
class Federation:
    coordinator: TestClient
    counting: httpx.Client  # no token: pass headers per request
    switch: Switch
    members: Members  # the counting operator's membership decisions


def _counting_settings(tmp_path: Path) -> CountingSettings:
    return CountingSettings(
        coordinator_token_sha256=token_sha256(COUNTING_TOKEN),
        participants=tuple(
            ParticipantCredential(p, token_sha256(token(p))) for p in (*NAMES, OUTSIDER)
        ),
        database_url=f"sqlite:///{tmp_path / 'counting.db'}",
    )


@contextlib.contextmanager
def _running(tmp_path: Path) -> Iterator[Federation]:
    counting_app = create_counting(_counting_settings(tmp_path))
    switch = Switch(SyncASGITransport(counting_app))
    coordinator_settings = replace(
        settings(tmp_path),
        analysts=(
            AnalystCredential("alice", token_sha256("analyst-secret-token")),
            AnalystCredential("root", token_sha256(ADMIN_TOKEN), role="admin"),
        ),
    )
    app = create_app(coordinator_settings, counting_transport=switch)
    with (
        TestClient(app) as client,
        httpx.Client(
            base_url="http://counting/api/v1", transport=SyncASGITransport(counting_app)
        ) as counting,
    ):
        yield Federation(client, counting, switch, counting_app.state.members)
    counting_app.state.store.close()


@pytest.fixture
def fed(tmp_path: Path) -> Iterator[Federation]:
    with _running(tmp_path) as running:
        yield running


def _key() -> str:
    return b64(IdentityKey.generate().public_bytes())


def invite(fed: Federation, participant: str = NEW, **extra: Any) -> str:
    response = fed.coordinator.post(
        f"{API}/admin/invitations", json={"participant_id": participant, **extra}, headers=ADMIN
    )
    assert response.status_code == 201, response.text
    secret: str = response.json()["invite"]
    return secret


def join(
    fed: Federation, secret: str, participant: str = NEW, key: str | None = None
) -> httpx.Response:
    response: httpx.Response = fed.coordinator.post(
        f"{API}/participants/join",
        json={"participant_id": participant, "invite": secret, "identity_key": key or _key()},
    )
    return response


def joined(fed: Federation, participant: str = NEW, key: str | None = None) -> str:
    response = join(fed, invite(fed, participant), participant, key)
    assert response.status_code == 201, response.text
    tok: str = response.json()["token"]
    return tok


def coordinator_status(fed: Federation, tok: str) -> int:
    """A participant's request at the coordinator: a poll that returns at once."""
    status: int = fed.coordinator.get(
        f"{API}/tasks/next", params={"wait": 0}, headers=auth(tok)
    ).status_code
    return status


def counting_status(fed: Federation, tok: str) -> int:
    """A participant's request at the counting service: its count for a job without roster
    (403 for a member, who is not on it; 401 for a stranger)."""
    status: int = fed.counting.post(
        "/jobs/none/counts", json={"job_id": "none", "count": 1}, headers=auth(tok)
    ).status_code
    return status


def test_a_new_member_joins_while_both_services_run(fed: Federation) -> None:
    tok = joined(fed)
    assert coordinator_status(fed, tok) == 204
    assert counting_status(fed, tok) == 401  # asked for: awaits the counting operator
    fed.members.approve(NEW, token_sha256(tok))
    assert counting_status(fed, tok) == 403  # authenticated; just not on that job's roster
    listed = fed.coordinator.get(f"{API}/participants", headers=ANALYST).json()
    assert [p["id"] for p in listed] == [*NAMES, OUTSIDER, NEW]
    enrol = fed.coordinator.post(
        f"{API}/participants/enrol", headers=auth(tok),
        json={"n_features": 2, "allowed_algorithms": ["ffcm"], "identity_key": _key()},
    )
    assert enrol.status_code == 409, "another identity key than the one registered at joining"
    assert "identity key" in enrol.json()["detail"]


def test_revocation_refuses_the_token_at_both_services_at_once(fed: Federation) -> None:
    tok = joined(fed)
    for member, credential in ((NEW, tok), (NAMES[0], token(NAMES[0]))):
        response = fed.coordinator.delete(f"{API}/admin/participants/{member}", headers=ADMIN)
        assert response.status_code == 204, response.text
        assert coordinator_status(fed, credential) == 401
        assert counting_status(fed, credential) == 401
    listed = [p["id"] for p in fed.coordinator.get(f"{API}/participants", headers=ANALYST).json()]
    assert listed == [*NAMES[1:], OUTSIDER]
    job = fed.coordinator.post(
        f"{API}/jobs", headers=ANALYST,
        json={"algorithm": "fedfcm", "participants": list(NAMES), "k": 2, "protection": "none"},
    )
    assert job.status_code == 422 and "unknown to this coordinator" in job.text
    # revoking again is harmless; an id that never was a member is 404
    assert fed.coordinator.delete(f"{API}/admin/participants/{NEW}", headers=ADMIN).status_code \
        == 204
    assert fed.coordinator.delete(f"{API}/admin/participants/nobody", headers=ADMIN).status_code \
        == 404
    # a revoked member can be invited again and gets a new token; the old one stays refused
    again = joined(fed)
    assert coordinator_status(fed, again) == 204 and coordinator_status(fed, tok) == 401


def test_refused_invites_get_one_403(fed: Federation, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = invite(fed)
    wrong_id = join(fed, secret, participant="hospital-e")
    assert wrong_id.status_code == 403
    assert join(fed, "x" * 43).status_code == 403  # unknown
    assert join(fed, secret).status_code == 201  # the wrong id did not use it up
    replay = join(fed, secret)
    assert replay.status_code == 403
    assert replay.json() == wrong_id.json()  # one answer: nothing tells the cases apart
    expiring = invite(fed, "hospital-e", expires_in_seconds=60)
    later = datetime.now(UTC) + timedelta(seconds=61)
    monkeypatch.setattr(coordinator_db, "_now", lambda: later)
    assert join(fed, expiring, participant="hospital-e").status_code == 403


def test_invites_are_refused_for_current_members_and_bad_lifetimes(fed: Federation) -> None:
    for body, status in (
        ({"participant_id": NAMES[0]}, 409),
        ({"participant_id": "bad id"}, 422),
        ({"participant_id": NEW, "expires_in_seconds": 10}, 422),
        ({"participant_id": NEW, "expires_in_seconds": 31 * 86400}, 422),
    ):
        response = fed.coordinator.post(f"{API}/admin/invitations", json=body, headers=ADMIN)
        assert response.status_code == status, (body, response.text)


def test_only_an_admin_manages_membership(fed: Federation) -> None:
    calls = (
        ("POST", f"{API}/admin/invitations", {"participant_id": NEW}),
        ("DELETE", f"{API}/admin/participants/{NAMES[0]}", None),
        ("GET", f"{API}/admin/audit", None),
    )
    for method, url, body in calls:
        for headers, status in ((ANALYST, 403), (auth(token(NAMES[0])), 403), ({}, 401)):
            response = fed.coordinator.request(method, url, json=body, headers=headers)
            assert response.status_code == status, (method, url, response.text)
    assert coordinator_status(fed, token(NAMES[0])) == 204  # nothing was revoked


def test_a_counting_failure_leaves_the_invite_valid(fed: Federation) -> None:
    secret = invite(fed)
    fed.switch.down.set()
    failed = join(fed, secret)
    assert failed.status_code == 502 and "try again" in failed.json()["detail"]
    revoke = fed.coordinator.delete(f"{API}/admin/participants/{NAMES[0]}", headers=ADMIN)
    assert revoke.status_code == 502 and "repeat the revocation" in revoke.json()["detail"]
    assert coordinator_status(fed, token(NAMES[0])) == 401  # revoked at the coordinator
    assert counting_status(fed, token(NAMES[0])) == 403  # ... not yet at the counting service
    fed.switch.down.clear()
    assert join(fed, secret).status_code == 201
    revoke = fed.coordinator.delete(f"{API}/admin/participants/{NAMES[0]}", headers=ADMIN)
    assert revoke.status_code == 204
    assert counting_status(fed, token(NAMES[0])) == 401


def test_the_trail_records_every_change_without_secrets(
    fed: Federation, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    secret = invite(fed)
    response = join(fed, secret)
    tok = response.json()["token"]
    assert fed.coordinator.delete(f"{API}/admin/participants/{NEW}", headers=ADMIN).status_code \
        == 204
    trail = fed.coordinator.get(f"{API}/admin/audit", headers=ADMIN)
    assert trail.status_code == 200
    events = trail.json()
    assert [(e["seq"], e["actor"], e["action"], e["participant_id"]) for e in events] == [
        (1, "analyst:root", "invited", NEW),
        (2, f"participant:{NEW}", "enrolled", NEW),
        (3, "analyst:root", "revoked", NEW),
    ]
    assert events[0]["expires_at"] is not None
    stored = b"".join(
        path.read_bytes() for path in tmp_path.iterdir()
        if path.name.startswith(("coordinator.db", "counting.db"))
    )
    for value in (secret, tok):
        assert value not in trail.text
        assert value not in caplog.text
        assert value.encode() not in stored
    assert token_sha256(tok).encode() in stored  # what the services keep instead


def test_memberships_survive_a_restart(tmp_path: Path) -> None:
    with _running(tmp_path) as fed:
        tok = joined(fed)
        fed.members.approve(NEW)
        assert fed.coordinator.delete(
            f"{API}/admin/participants/{NAMES[0]}", headers=ADMIN
        ).status_code == 204
    with _running(tmp_path) as fed:
        assert coordinator_status(fed, tok) == 204 and counting_status(fed, tok) == 403
        assert coordinator_status(fed, token(NAMES[0])) == 401
        assert counting_status(fed, token(NAMES[0])) == 401


def test_only_the_join_route_reads_a_body_without_a_token(fed: Federation) -> None:
    big = {"participant_id": NEW, "invite": "x" * 43, "identity_key": _key(), "pad": "x" * 5000}
    assert fed.coordinator.post(f"{API}/participants/join", json=big).status_code == 413
    malformed = fed.coordinator.post(f"{API}/participants/join", json={"participant_id": NEW})
    assert malformed.status_code == 422
    stranger = fed.coordinator.post(f"{API}/admin/invitations", json={"participant_id": NEW})
    assert stranger.status_code == 401
