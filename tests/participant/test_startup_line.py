"""The participant agent logs one line at start: the services it calls, its TLS mode and
fedclust's version, never its token."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import httpx
import pytest

from fedclust.infra.logformat import package_version
from fedclust.participant.agent import run_agent
from fedclust.participant.config import ParticipantConfig
from tests.participant.test_agent import TOKEN, blobs, write_config, write_rows


def test_the_agent_logs_its_start_without_its_token(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="fedclust.participant")
    write_rows(tmp_path, blobs())
    stop = threading.Event()
    stop.set()  # stops at its first request

    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused")

    run_agent(
        ParticipantConfig.from_file(write_config(tmp_path)), stop=stop,
        transport=httpx.MockTransport(down), counting_transport=httpx.MockTransport(down),
    )
    started = [r.getMessage() for r in caplog.records if "starting:" in r.getMessage()]
    assert started == [
        f"participant hospital-a starting: fedclust {package_version()}, coordinator "
        "http://coordinator, counting service http://counting, TLS off"
    ]
    assert TOKEN not in caplog.text
