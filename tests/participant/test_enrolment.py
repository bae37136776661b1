"""``fedclust participant enrol``: redeem an invite, keep the token beside the state, use it."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import httpx
import pytest

from fedclust.participant.config import ParticipantConfig
from fedclust.participant.enrolment import EnrolmentError, enrol, join_target

INVITE = "i" * 43
TOKEN = "t" * 43
CONFIG = """[participant]
id = "hospital-d"
coordinator_url = "http://coordinator.test"
counting_url = "http://counting.test"
{token}
[data]
path = "rows.csv"
"""


def _config(tmp_path: Path, token: str = "") -> Path:
    path = tmp_path / "participant.toml"
    path.write_text(CONFIG.format(token=token), encoding="utf-8")
    return path


def _coordinator(status: int, seen: list[dict[str, str]]) -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/api/v1/participants/join"
        assert "authorization" not in request.headers
        seen.append(json.loads(request.content))
        if status != 201:
            return httpx.Response(status, json={"detail": "the invite is unknown"})
        return httpx.Response(201, json={"participant_id": "hospital-d", "token": TOKEN})

    return httpx.MockTransport(handle)


def test_enrol_stores_the_token_privately_and_the_config_reads_it(tmp_path: Path) -> None:
    path = _config(tmp_path)
    with pytest.raises(ValueError, match=r"missing 'token'.*fedclust participant enrol"):
        ParticipantConfig.from_file(path)
    target = join_target(path)
    seen: list[dict[str, str]] = []
    stored = enrol(target, INVITE + "\n", transport=_coordinator(201, seen))
    assert stored == tmp_path / "state-hospital-d" / "participant.token"
    assert stat.S_IMODE(stored.stat().st_mode) == 0o600
    assert seen[0]["participant_id"] == "hospital-d" and seen[0]["invite"] == INVITE
    assert (tmp_path / "identity-hospital-d.key").exists()  # created, its public half sent
    assert ParticipantConfig.from_file(path).token == TOKEN
    placeholder = _config(tmp_path, 'token = "REPLACE-WITH-TOKEN"')
    assert ParticipantConfig.from_file(placeholder).token == TOKEN
    assert ParticipantConfig.from_file(_config(tmp_path, 'token = "own"')).token == "own"


def test_a_refused_or_malformed_invite_stores_nothing(tmp_path: Path) -> None:
    target = join_target(_config(tmp_path))
    with pytest.raises(EnrolmentError, match=r"HTTP 403 the invite is unknown"):
        enrol(target, INVITE, transport=_coordinator(403, []))
    with pytest.raises(ValueError, match="--invite must be the invite printed by"):
        enrol(target, "short", transport=_coordinator(201, []))
    assert not target.token_path.exists()
