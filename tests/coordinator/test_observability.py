"""Probes, Prometheus metrics and JSON logs of the coordinator and the counting service."""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient

from fedclust.cli import _parser
from fedclust.coordinator._rounds import ReleasedCohorts
from fedclust.coordinator.app import create_app
from fedclust.coordinator.db import Database
from fedclust.coordinator.metrics import CoordinatorMetrics, ObservedChannel, ObservedSummation
from fedclust.coordinator.settings import CoordinatorSettings
from fedclust.counting.app import create_app as create_counting_app
from fedclust.counting.settings import CountingSettings
from fedclust.crypto.tokens import token_sha256
from fedclust.infra.logformat import configure_logging, redact, resolve_format
from fedclust.protocol.wire import messages as msg
from tests.coordinator._service import (
    ANALYST_TOKEN,
    API,
    COUNTING_TOKEN,
    NAMES,
    FakeCounting,
    Federation,
    auth,
    blobs,
    create_job,
    enrol,
    post_reply,
    settings,
    token,
    wait_for_state,
)


class HealthyCounting(FakeCounting):
    """The fake counting service, also answering its ``GET /health``."""

    def handler(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/v1/health":
            health = {"status": "ok", "protocol_version": msg.PROTOCOL_VERSION}
            return httpx.Response(200, json=health)
        return super().handler(request)


class DownCounting(FakeCounting):
    """A counting service that cannot be reached."""

    def handler(self, request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)


@contextmanager
def coordinator(
    tmp_path: Path, counting: FakeCounting, *, metrics: bool = True
) -> Iterator[TestClient]:
    config = dataclasses.replace(settings(tmp_path), metrics=metrics)
    app = create_app(config, counting_transport=counting.transport())
    with TestClient(app) as client:
        yield client


def counting_settings(tmp_path: Path, **extra: Any) -> CountingSettings:
    return CountingSettings(
        coordinator_token_sha256=token_sha256(COUNTING_TOKEN),
        database_url=f"sqlite:///{tmp_path / 'counting.db'}",
        **extra,
    )


# -- probes --------------------------------------------------------------------------------------


def test_healthz_and_readyz_answer_when_everything_is_up(tmp_path: Path) -> None:
    with coordinator(tmp_path, HealthyCounting()) as client:
        assert client.get("/healthz").json() == {"status": "ok"}
        ready = client.get("/readyz")
        assert client.get(f"{API}/health").status_code == 200  # the documented check stays
    assert ready.status_code == 200
    assert ready.json() == {"status": "ready", "checks": {"database": "ok", "counting": "ok"}}


def test_readyz_is_503_naming_an_unreachable_counting_service(tmp_path: Path) -> None:
    with coordinator(tmp_path, DownCounting()) as client:
        live = client.get("/healthz")
        ready = client.get("/readyz")
    assert live.status_code == 200  # alive, just not ready
    assert ready.status_code == 503
    body = ready.json()
    assert body["not_ready"] == ["counting"]
    assert body["checks"] == {"database": "ok", "counting": "failed: CountingError"}


def test_readyz_is_503_naming_a_broken_database(tmp_path: Path) -> None:
    gone = tmp_path / "gone"
    gone.mkdir()
    broken = Database(f"sqlite:///{gone / 'coordinator.db'}")
    broken.dispose()
    shutil.rmtree(gone)  # no connection left open, and none can be opened
    with coordinator(tmp_path, HealthyCounting()) as client:
        services = client.app.state.services  # type: ignore[attr-defined]
        client.app.state.services = dataclasses.replace(services, db=broken)  # type: ignore[attr-defined]
        try:
            ready = client.get("/readyz")
        finally:
            client.app.state.services = services  # type: ignore[attr-defined]
    assert ready.status_code == 503
    assert ready.json()["not_ready"] == ["database"]
    assert ready.json()["checks"]["database"] == "failed: OperationalError"


def test_probes_and_metrics_are_not_in_the_openapi_document(tmp_path: Path) -> None:
    app = create_app(settings(tmp_path))
    paths = set(app.openapi()["paths"])
    assert {"/healthz", "/readyz", "/metrics"}.isdisjoint(paths)
    assert f"{API}/health" in paths


def test_counting_service_probes(tmp_path: Path) -> None:
    app = create_counting_app(counting_settings(tmp_path, metrics=True))
    with TestClient(app) as client:
        assert client.get("/healthz").json() == {"status": "ok"}
        ready = client.get("/readyz")
        metrics = client.get("/metrics")

        def broken(job_id: str) -> frozenset[str]:
            raise RuntimeError("database gone")

        app.state.store.roster = broken
        not_ready = client.get("/readyz")
    assert ready.json() == {"status": "ready", "checks": {"database": "ok"}}
    assert not_ready.status_code == 503
    assert not_ready.json()["not_ready"] == ["database"]
    assert metrics.status_code == 200
    assert 'fedclust_http_requests_total{method="GET",route="/readyz",status="200"} 1.0' in (
        metrics.text
    )


# -- metrics ---------------------------------------------------------------------------------------


def _sample(text: str, name: str, labels: str = "") -> float:
    """The value of one sample line ``name{labels} value`` of a Prometheus text page."""
    pattern = re.escape(name + (f"{{{labels}}}" if labels else "")) + r" (\S+)"
    found = re.search(rf"^{pattern}$", text, flags=re.MULTILINE)
    assert found is not None, f"no sample {name}{{{labels}}} in:\n{text}"
    return float(found.group(1))


def test_metrics_count_requests_jobs_rounds_and_refusals(tmp_path: Path) -> None:
    counting = HealthyCounting()
    federation = Federation(blobs(), counting)

    def refuse(client: TestClient, task: msg.Task, reply: msg.Reply) -> None:
        post_reply(client, NAMES[2], task, msg.RefusalReply(reason="not today"), expect=202)

    with coordinator(tmp_path, counting) as client:
        for name in NAMES:
            enrol(client, name)
        job = create_job(client, k=2)
        with federation.agents(client):
            done = wait_for_state(client, job["id"], ("failed", "succeeded"))
        refused = create_job(client, k=2)
        with Federation(blobs(), counting).agents(client, submit={NAMES[2]: refuse}):
            wait_for_state(client, refused["id"], ("failed",))
        assert client.get("/no/such/path").status_code == 404
        page = client.get("/metrics")
    assert done["state"] == "succeeded", done.get("error")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/plain")
    text = page.text
    assert _sample(text, "fedclust_jobs", 'state="succeeded"') == 1
    assert _sample(text, "fedclust_jobs", 'state="failed"') == 1
    assert _sample(text, "fedclust_jobs", 'state="running"') == 0
    assert _sample(text, "fedclust_round_seconds_count") >= 1
    assert _sample(text, "fedclust_refusals_total") >= 1
    assert _sample(
        text, "fedclust_http_requests_total",
        'method="POST",route="/api/v1/jobs",status="201"',
    ) == 2
    # route templates, never concrete ids
    assert 'route="/api/v1/jobs/{job_id}"' in text
    assert job["id"] not in text
    assert 'route="unmatched",status="404"' in text and "/no/such/path" not in text
    assert token(NAMES[0]) not in text and ANALYST_TOKEN not in text


def test_metrics_are_off_unless_configured(tmp_path: Path) -> None:
    with coordinator(tmp_path, HealthyCounting(), metrics=False) as client:
        response = client.get("/metrics")
    assert response.status_code == 404
    assert "metrics = true" in response.json()["detail"]


def test_two_apps_keep_separate_registries(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with coordinator(tmp_path / "a", HealthyCounting()) as first:
        first.get("/healthz")
        with coordinator(tmp_path / "b", HealthyCounting()) as second:
            page = second.get("/metrics").text
    assert 'route="/healthz"' not in page


class _Named:
    def __init__(self, name: str) -> None:
        self.name = name


class _FakeSummation:
    """Sums nothing: returns a fixed reply summed over all but the last participant."""

    def __init__(self) -> None:
        self.notes: list[str] = []
        self.cohorts = ReleasedCohorts()
        self.protected = True

    def set_bounds(self, *, max_rows: int, value_bound: float) -> None:
        self.notes.append(f"bounds {max_rows} {value_bound}")

    def sum(
        self, participants: Any, statistic: Any, reply_type: Any, *, required: bool = False
    ) -> tuple[Any, tuple[str, ...]]:
        return "total", tuple(p.name for p in participants[:-1])


def test_observed_summation_times_sums_and_counts_dropouts() -> None:
    metrics = CoordinatorMetrics(lambda: None)
    inner = _FakeSummation()
    observed = ObservedSummation(inner, metrics, "masking")
    observed.set_bounds(max_rows=10, value_bound=2.0)
    statistic = msg.StatisticTask.of("moment_sums", np.zeros((1, 3)))
    total, summed = observed.sum([_Named("a"), _Named("b"), _Named("c")], statistic, str)
    assert (total, summed) == ("total", ("a", "b"))
    assert observed.notes is inner.notes and inner.notes == ["bounds 10 2.0"]
    assert metrics.registry.get_sample_value("fedclust_secure_sum_dropouts_total") == 1
    assert metrics.registry.get_sample_value(
        "fedclust_secure_sum_seconds_count", {"protection": "masking"}
    ) == 1


def test_observed_channel_counts_refusals_only() -> None:
    metrics = CoordinatorMetrics(lambda: None)

    class Channel:
        def ask(self, participant: str, spec: msg.TaskSpec) -> msg.Reply:
            return msg.RefusalReply(reason="no") if participant == "x" else msg.AckReply()

    channel = ObservedChannel(Channel(), metrics)
    channel.ask("x", msg.ReportCountTask())
    channel.ask("y", msg.ReportCountTask())
    assert metrics.registry.get_sample_value("fedclust_refusals_total") == 1


# -- logs ------------------------------------------------------------------------------------------


@pytest.fixture
def captured_logs() -> Iterator[io.StringIO]:
    """The root logger's records as JSON lines into a buffer (handlers restored after)."""
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    buffer = io.StringIO()
    configure_logging("json", stream=buffer, level=logging.DEBUG)
    try:
        yield buffer
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in saved[0]:
            root.addHandler(handler)
        root.setLevel(saved[1])


def test_json_log_lines_carry_the_job_id(tmp_path: Path, captured_logs: io.StringIO) -> None:
    counting = HealthyCounting()
    federation = Federation(blobs(), counting)
    with coordinator(tmp_path, counting) as client:
        for name in NAMES:
            enrol(client, name)
        job = create_job(client, k=2)
        with federation.agents(client):
            wait_for_state(client, job["id"], ("succeeded",))
        client.get("/readyz")  # the coordinator presents its token to the counting service
    lines = [json.loads(line) for line in captured_logs.getvalue().splitlines()]
    assert lines, "nothing was logged"
    assert all({"timestamp", "level", "logger", "message"} <= set(line) for line in lines)
    done = [line for line in lines if line["message"] == f"job {job['id']} succeeded"]
    assert len(done) == 1
    assert done[0]["job_id"] == job["id"]
    assert done[0]["level"] == "INFO" and done[0]["logger"] == "fedclust.coordinator"
    everything = captured_logs.getvalue()
    for secret in (COUNTING_TOKEN, ANALYST_TOKEN, *(token(n) for n in NAMES)):
        assert secret not in everything


def test_a_logged_request_with_a_token_is_redacted(captured_logs: io.StringIO) -> None:
    secret = "s3cr3t-Token_value"
    request = httpx.Request("GET", "http://c.test/api/v1/tasks/next", headers=auth(secret))
    log = logging.getLogger("fedclust.test")
    log.info("request %s %s headers=%s", request.method, request.url, dict(request.headers))
    log.info("config: token = %r", secret, extra={"job_id": "j-1", "round": 3, "task_id": 7})
    lines = [json.loads(line) for line in captured_logs.getvalue().splitlines()]
    assert secret not in captured_logs.getvalue()
    assert "Bearer [redacted]" in lines[0]["message"]
    assert lines[1]["message"] == "config: token = '[redacted]'"
    assert (lines[1]["job_id"], lines[1]["round"], lines[1]["task_id"]) == ("j-1", 3, 7)


def test_text_format_is_the_default_and_also_redacted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FEDCLUST_LOG_FORMAT", raising=False)
    assert resolve_format(None) == "text"
    monkeypatch.setenv("FEDCLUST_LOG_FORMAT", "json")
    assert resolve_format(None) == "json"
    assert resolve_format("text") == "text"  # the flag wins over the environment
    with pytest.raises(ValueError, match="log format must be one of text, json; got 'xml'"):
        resolve_format("xml")
    assert redact("Authorization: Bearer abc.def") == "Authorization: Bearer [redacted]"
    assert redact("GET /x?token=abc&k=2") == "GET /x?token=[redacted]&k=2"
    assert redact("counting_token = \"abc\"") == "counting_token = \"[redacted]\""
    assert redact("{'token': 'abc', 'k': 2}") == "{'token': '[redacted]', 'k': 2}"
    # prose about tokens is left alone
    assert redact("the coordinator no longer accepts this token: unknown") == (
        "the coordinator no longer accepts this token: unknown"
    )


def test_the_service_commands_take_log_format() -> None:
    parser = _parser()
    for argv in (
        ["coordinator", "serve"], ["counter", "serve"], ["participant", "run"],
    ):
        args = parser.parse_args([*argv, "--config", "x.toml", "--log-format", "json"])
        assert args.log_format == "json"
        assert parser.parse_args([*argv, "--config", "x.toml"]).log_format is None
    with pytest.raises(SystemExit):
        parser.parse_args(["coordinator", "serve", "--config", "x", "--log-format", "xml"])



def test_the_metrics_flag_is_read_from_both_configs(tmp_path: Path) -> None:
    digest = token_sha256("some-token")
    coordinator_doc = {
        "coordinator": {"counting_url": "http://c.test", "counting_token": "t", "metrics": True},
    }
    assert CoordinatorSettings.from_mapping(coordinator_doc).metrics is True
    assert CoordinatorSettings.from_mapping({"coordinator": {
        "counting_url": "http://c.test", "counting_token": "t",
    }}).metrics is False
    coordinator_doc["coordinator"]["metrics"] = "yes"
    with pytest.raises(ValueError, match=r"\[coordinator\] metrics must be true or false"):
        CoordinatorSettings.from_mapping(coordinator_doc)
    config = tmp_path / "counting.toml"
    config.write_text(
        f'[counting]\ncoordinator_token_sha256 = "{digest}"\nmetrics = true\n', encoding="utf-8"
    )
    assert CountingSettings.from_file(config).metrics is True
    config.write_text(
        f'[counting]\ncoordinator_token_sha256 = "{digest}"\nmetrics = 1\n', encoding="utf-8"
    )
    with pytest.raises(ValueError, match="metrics must be true or false"):
        CountingSettings.from_file(config)
