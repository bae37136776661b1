"""What an operator sees of a running coordinator: the start-up line (URL, database without
its password, TLS mode, version) and each member's last contact, kept across restarts."""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from fedclust.coordinator import app as coordinator_app
from fedclust.coordinator.db import Database
from fedclust.counting.app import create_app as create_counting
from fedclust.counting.settings import CountingSettings
from fedclust.crypto.tokens import token_sha256
from fedclust.infra.logformat import (
    package_version,
    service_url,
    shown_database_url,
    startup_line,
    tls_mode,
)
from fedclust.infra.tls import TlsSettings
from tests.coordinator._service import (
    ANALYST,
    ANALYST_TOKEN,
    API,
    COUNTING_TOKEN,
    NAMES,
    FakeCounting,
    enrol,
    running_app,
    token,
)


def _started(caplog: pytest.LogCaptureFixture, service: str) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.getMessage().startswith(f"{service} starting:")]


def test_the_coordinator_logs_one_line_at_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="fedclust.coordinator")
    with running_app(tmp_path, FakeCounting()):
        lines = _started(caplog, "coordinator")
    assert lines == [
        f"coordinator starting: fedclust {package_version()}, listening on "
        f"http://127.0.0.1:8700, database sqlite:///{tmp_path / 'coordinator.db'}, TLS off"
    ]
    assert not any(secret in caplog.text for secret in (COUNTING_TOKEN, ANALYST_TOKEN))


def test_the_counting_service_logs_one_line_at_start_without_the_password(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="fedclust.counting")
    settings = CountingSettings(
        coordinator_token_sha256=token_sha256("coordinator"), participants=(),
        database_url=f"sqlite:///{tmp_path / 'counting.db'}", port=8701,
    )
    with TestClient(create_counting(settings)):
        (line,) = _started(caplog, "counting service")
    assert "listening on http://127.0.0.1:8701" in line and line.endswith("TLS off")
    assert f"database sqlite:///{tmp_path / 'counting.db'}" in line


def test_the_last_contact_is_stored_and_survives_a_restart(tmp_path: Path) -> None:
    def listed(client: TestClient) -> dict[str, str | None]:
        response = client.get(f"{API}/participants", headers=ANALYST)
        assert response.status_code == 200
        return {p["id"]: p["last_contact"] for p in response.json()}

    with running_app(tmp_path, FakeCounting()) as client:
        enrol(client, NAMES[0])
        before = listed(client)
    assert before[NAMES[0]] is not None and before[NAMES[1]] is None
    with running_app(tmp_path, FakeCounting()) as client:
        after = listed(client)
    assert after == before  # read back from the database at start


def test_last_contacts_are_written_periodically_and_only_when_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(coordinator_app, "LAST_SEEN_SECONDS", 0.05)
    writes: list[dict[str, datetime]] = []
    original = Database.record_last_seen

    def counted(self: Database, times: dict[str, datetime]) -> None:
        writes.append(dict(times))
        original(self, times)

    monkeypatch.setattr(Database, "record_last_seen", counted)
    with running_app(tmp_path, FakeCounting()) as client:
        polled = datetime.now(UTC)
        enrol(client, NAMES[0])
        stored = Database(f"sqlite:///{tmp_path / 'coordinator.db'}")
        try:
            deadline = time.monotonic() + 10
            while NAMES[0] not in stored.last_seen() and time.monotonic() < deadline:
                time.sleep(0.05)
            seen = stored.last_seen()  # while the coordinator runs
        finally:
            stored.dispose()
        time.sleep(0.3)  # several more rounds with nothing new
    assert polled <= seen[NAMES[0]] <= datetime.now(UTC)
    assert [w for w in writes if w] == [{NAMES[0]: seen[NAMES[0]]}]  # written once


def test_an_earlier_time_never_replaces_a_stored_one(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'c.db'}")
    db.create_all()
    late, early = datetime(2026, 5, 2, tzinfo=UTC), datetime(2026, 5, 1, tzinfo=UTC)
    db.record_last_seen({"a": late, "b": early})
    db.record_last_seen({"a": early, "b": late})
    assert db.last_seen() == {"a": late, "b": late}
    db.dispose()


def test_participant_tokens_never_reach_the_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with running_app(tmp_path, FakeCounting()) as client:
        enrol(client, NAMES[0])
    assert token(NAMES[0]) not in caplog.text


@pytest.mark.parametrize(
    ("tls", "serving", "url", "mode"),
    [
        (TlsSettings(), True, "", "off"),
        (TlsSettings(certificate=Path("c.pem"), key=Path("k.pem")), True, "", "server TLS"),
        (TlsSettings(certificate=Path("c.pem"), key=Path("k.pem"), client_ca=Path("ca.pem")),
         True, "", "mutual TLS"),
        (TlsSettings(), False, "http://coordinator:8700", "off"),
        (TlsSettings(ca=Path("ca.pem")), False, "https://coordinator:8700", "server TLS"),
        (TlsSettings(certificate=Path("c.pem"), key=Path("k.pem")), False,
         "https://coordinator:8700", "mutual TLS"),
    ],
)
def test_tls_modes(tls: TlsSettings, serving: bool, url: str, mode: str) -> None:
    assert tls_mode(tls, serving=serving, url=url) == mode


def test_the_start_up_line_never_shows_a_password_or_token() -> None:
    line = startup_line(
        "coordinator", listens=service_url("::1", 8700, TlsSettings()),
        calls=(("counting service", "https://counting/api?token=s3cr3t-token"),),
        database_url="postgresql+psycopg://fedclust:pa55word@db.internal:5432/coordinator",
        tls="off",
    )
    assert "listening on http://[::1]:8700" in line
    assert "database postgresql+psycopg://fedclust:***@db.internal:5432/coordinator" in line
    assert "pa55word" not in line and "s3cr3t-token" not in line
    # A URL SQLAlchemy cannot parse still loses its password.
    assert shown_database_url("weird://user:pw@host:port:extra/x") == (
        "weird://user:***@host:port:extra/x"
    )
