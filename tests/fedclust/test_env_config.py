"""Every service's settings from TOML, ``FEDCLUST_...`` variables and secret files
(:mod:`fedclust.infra.config_env`): layering, precedence, errors, and secrets that never
show in a repr or a log."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from fedclust.client import AnalystConfig
from fedclust.coordinator.app import create_app
from fedclust.coordinator.settings import CoordinatorSettings
from fedclust.counting.settings import CountingSettings
from fedclust.demo import free_port
from fedclust.participant.config import ParticipantConfig

COUNTING_TOKEN = "counting-token-kept-secret-1f3a"
ANALYST_TOKEN = "analyst-token-kept-secret-77c2"
PARTICIPANT_TOKEN = "participant-token-kept-secret-9e0b"


def sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


ANALYSTS = json.dumps([{"name": "alice", "token_sha256": sha(ANALYST_TOKEN), "role": "admin"}])
PARTICIPANTS = json.dumps([{"id": "hospital-a", "token_sha256": sha(PARTICIPANT_TOKEN)}])


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No FEDCLUST_ variable of the caller's shell; relative paths land in tmp_path."""
    for name in list(os.environ):
        if name.upper().startswith("FEDCLUST_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def coordinator_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDCLUST_COORDINATOR__COUNTING_URL", "http://counting.test:8701")
    monkeypatch.setenv("FEDCLUST_COORDINATOR__COUNTING_TOKEN", COUNTING_TOKEN)
    monkeypatch.setenv("FEDCLUST_ANALYSTS", ANALYSTS)
    monkeypatch.setenv("FEDCLUST_PARTICIPANTS", PARTICIPANTS)


COORDINATOR_TOML = f"""
[coordinator]
port = 8700
counting_url = "http://counting.test:8701"
counting_token = "{COUNTING_TOKEN}"
task_timeout_seconds = 60

[[analysts]]
name = "alice"
token_sha256 = "{sha(ANALYST_TOKEN)}"
"""


# -- each service from the environment alone -----------------------------------------------
def test_coordinator_from_the_environment_alone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    coordinator_env(monkeypatch)
    monkeypatch.setenv("FEDCLUST_COORDINATOR__PORT", "9100")
    monkeypatch.setenv("FEDCLUST_COORDINATOR__METRICS", "true")
    monkeypatch.setenv("FEDCLUST_COORDINATOR__DATABASE_URL", "sqlite:///state/coord.db")
    settings = CoordinatorSettings.load(None)
    assert (settings.port, settings.metrics) == (9100, True)
    assert settings.counting_token == COUNTING_TOKEN
    assert [a.role for a in settings.analysts] == ["admin"]
    assert [p.id for p in settings.participants] == ["hospital-a"]
    # without a file, relative sqlite paths resolve against the working directory
    assert settings.database_url == f"sqlite:///{tmp_path / 'state' / 'coord.db'}"


def test_counting_service_from_the_environment_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDCLUST_COUNTING__COORDINATOR_TOKEN_SHA256", sha(COUNTING_TOKEN))
    monkeypatch.setenv("FEDCLUST_COUNTING__MIN_PARTICIPANTS", "1")
    monkeypatch.setenv("FEDCLUST_PARTICIPANTS", PARTICIPANTS)
    settings = CountingSettings.load()
    assert settings.min_participants == 1
    assert settings.participant("hospital-a") is not None


def test_participant_from_the_environment_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    pid = "hospital-a"
    for key, value in {
        "PARTICIPANT__ID": pid,
        "PARTICIPANT__COORDINATOR_URL": "http://coordinator.test:8700",
        "PARTICIPANT__COUNTING_URL": "http://counting.test:8701",
        "PARTICIPANT__TOKEN": PARTICIPANT_TOKEN,
        "PARTICIPANT__STATE_DIR": "/var/lib/fedclust/state",
        "DATA__PATH": "/data/a.npy",
        "DATA__COLUMNS": "[0, 2]",
        "DATA__LABEL_COLUMN": "3",
        "POLICY__ALLOWED_ALGORITHMS": '["fkm", "fedfcm"]',
        "POLICY__ROW_BOUND": "1024",
        "POLICY__VALUE_BOUND": "auto",
        "PEERS": json.dumps({"hospital-b": "A" * 43 + "="}),
    }.items():
        monkeypatch.setenv(f"FEDCLUST_{key}", value)
    config = ParticipantConfig.load()
    assert config.token == PARTICIPANT_TOKEN
    assert config.state_dir == Path("/var/lib/fedclust/state")
    assert (config.data.columns, config.data.label_column) == ((0, 2), 3)
    assert config.policy.allowed_algorithms == {"fkm", "fedfcm"}
    assert (config.policy.row_bound, config.policy.value_bound) == (1024, None)
    assert config.peers == {"hospital-b": "A" * 43 + "="}


# -- TOML and environment ------------------------------------------------------------------
def test_environment_overrides_the_file_key_by_key(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "conf").mkdir()
    file = write(tmp_path / "conf" / "coordinator.toml", COORDINATOR_TOML)
    monkeypatch.setenv("FEDCLUST_COORDINATOR__PORT", "9200")
    monkeypatch.setenv("FEDCLUST_PARTICIPANTS", PARTICIPANTS)
    settings = CoordinatorSettings.load(file)
    assert settings.port == 9200  # the variable wins
    assert settings.task_timeout_seconds == 60  # the file's other keys stay
    assert [a.name for a in settings.analysts] == ["alice"]
    assert [p.id for p in settings.participants] == ["hospital-a"]  # a whole array replaced
    # sqlite paths of the file still resolve beside the file
    assert settings.database_url == f"sqlite:///{tmp_path / 'conf' / 'coordinator.db'}"
    # from_file reads the file alone
    assert CoordinatorSettings.from_file(file).port == 8700


def test_variables_of_other_tables_are_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    coordinator_env(monkeypatch)
    monkeypatch.setenv("FEDCLUST_PARTICIPANT__TOKEN", "not-the-coordinators")
    monkeypatch.setenv("FEDCLUST_COUNTING__PORT", "not even a number")
    monkeypatch.setenv("FEDCLUST_LOG_FORMAT", "json")
    monkeypatch.setenv("FEDCLUST_TOKEN", "an analyst's")
    assert CoordinatorSettings.load().port == 8700


# -- secret files ----------------------------------------------------------------------------
def test_a_key_from_a_file_named_in_the_toml_or_a_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "secrets").mkdir()
    write(tmp_path / "secrets" / "counting", f"  {COUNTING_TOKEN}\n")
    write(tmp_path / "other-token", "another-token-from-a-file\n")
    text = COORDINATOR_TOML.replace(
        f'counting_token = "{COUNTING_TOKEN}"', 'counting_token_file = "secrets/counting"'
    )
    file = write(tmp_path / "coordinator.toml", text)
    assert CoordinatorSettings.from_file(file).counting_token == COUNTING_TOKEN  # stripped
    # the variable's file wins over the file's key; relative to the working directory
    monkeypatch.setenv("FEDCLUST_COORDINATOR__COUNTING_TOKEN_FILE", "other-token")
    assert CoordinatorSettings.load(file).counting_token == "another-token-from-a-file"
    # a typed key from a file
    write(tmp_path / "port", "9300\n")
    monkeypatch.setenv("FEDCLUST_COORDINATOR__PORT_FILE", str(tmp_path / "port"))
    assert CoordinatorSettings.load(file).port == 9300


def test_a_key_and_its_file_together_are_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    write(tmp_path / "t", COUNTING_TOKEN)
    coordinator_env(monkeypatch)
    monkeypatch.setenv("FEDCLUST_COORDINATOR__COUNTING_TOKEN_FILE", "t")
    with pytest.raises(ValueError) as info:
        CoordinatorSettings.load()
    assert str(info.value) == (
        "FEDCLUST_COORDINATOR__COUNTING_TOKEN_FILE: give counting_token or counting_token_file, "
        "not both."
    )


def test_a_missing_secret_file_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("FEDCLUST_PARTICIPANT__TOKEN_FILE", "/run/secrets/absent")
    with pytest.raises(ValueError, match=r"^FEDCLUST_PARTICIPANT__TOKEN_FILE: no file at "
                       r"/run/secrets/absent\.$"):
        ParticipantConfig.load()


def test_the_participant_token_from_token_file(tmp_path: Path) -> None:
    write(tmp_path / "participant.token", PARTICIPANT_TOKEN + "\n")
    file = write(tmp_path / "participant.toml", """
[participant]
id = "hospital-a"
coordinator_url = "http://coordinator.test"
counting_url = "http://counting.test"
token_file = "participant.token"

[data]
path = "a.csv"
""")
    assert ParticipantConfig.from_file(file).token == PARTICIPANT_TOKEN


def test_a_secrets_directory_of_files_named_like_the_variables(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    secrets = tmp_path / "run-secrets"
    secrets.mkdir()
    write(secrets / "fedclust_counting__coordinator_token_sha256", sha(COUNTING_TOKEN) + "\n")
    write(secrets / "FEDCLUST_COUNTING__PORT", "9400")
    write(secrets / "fedclust_participants", PARTICIPANTS)
    monkeypatch.setenv("FEDCLUST_SECRETS_DIR", str(secrets))
    settings = CountingSettings.load()
    assert (settings.coordinator_token_sha256, settings.port) == (sha(COUNTING_TOKEN), 9400)
    assert settings.participant("hospital-a") is not None
    monkeypatch.setenv("FEDCLUST_COUNTING__PORT", "9401")  # a variable beats the folder
    assert CountingSettings.load().port == 9401
    monkeypatch.setenv("FEDCLUST_SECRETS_DIR", str(tmp_path / "absent"))
    with pytest.raises(ValueError, match=r"^FEDCLUST_SECRETS_DIR: no folder at .*absent\.$"):
        CountingSettings.load()


# -- errors ----------------------------------------------------------------------------------
def test_no_file_and_no_variables_says_what_to_give() -> None:
    with pytest.raises(ValueError) as info:
        CountingSettings.load()
    assert str(info.value) == (
        "no config file and no FEDCLUST_<TABLE>__<KEY> variables: give --config FILE, or the "
        "settings as variables or secret files."
    )


def test_an_unknown_key_of_a_known_table_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    coordinator_env(monkeypatch)
    monkeypatch.setenv("FEDCLUST_COORDINATOR__COUNTING_TOKN", "typo")
    with pytest.raises(ValueError) as info:
        CoordinatorSettings.load()
    assert str(info.value).startswith(
        "FEDCLUST_COORDINATOR__COUNTING_TOKN: [coordinator] has no key 'counting_tokn'; known: "
        "counting_token, counting_url,"
    )


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("FEDCLUST_COUNTING__MIN_PARTICIPANTS", "three-secret-words", "must be an integer"),
        ("FEDCLUST_COUNTING__METRICS", "maybe-secret", "must be true or false"),
        ("FEDCLUST_PARTICIPANTS", "[{secret", "invalid JSON"),
        ("FEDCLUST_TLS__REQUIRE_CLIENT_CERTIFICATE", "sure-secret", "must be true or false"),
    ],
)
def test_a_wrongly_typed_variable_is_one_line_naming_it(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, message: str
) -> None:
    monkeypatch.setenv("FEDCLUST_COUNTING__COORDINATOR_TOKEN_SHA256", sha(COUNTING_TOKEN))
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValueError) as info:
        CountingSettings.load()
    text = str(info.value)
    assert text.startswith(f"{variable}: {message}")
    assert "\n" not in text and "secret" not in text


def test_a_value_refused_by_the_service_names_its_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    file = write(tmp_path / "coordinator.toml", COORDINATOR_TOML)
    monkeypatch.setenv("FEDCLUST_COORDINATOR__PORT", "70000")
    with pytest.raises(ValueError) as info:
        CoordinatorSettings.load(file)
    assert str(info.value) == (
        f"{file}: [coordinator] port must be in [1, 65535]; got 70000. "
        "(set by FEDCLUST_COORDINATOR__PORT)"
    )


def test_a_wrongly_typed_secret_file_is_named_with_its_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    coordinator_env(monkeypatch)
    port = write(tmp_path / "port", "eighty-secret\n")
    monkeypatch.setenv("FEDCLUST_COORDINATOR__PORT_FILE", str(port))
    with pytest.raises(ValueError) as info:
        CoordinatorSettings.load()
    assert str(info.value) == (
        f"the file {port} (FEDCLUST_COORDINATOR__PORT_FILE): must be an integer."
    )


def test_a_bad_entry_of_a_json_array_names_its_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    coordinator_env(monkeypatch)
    monkeypatch.setenv("FEDCLUST_ANALYSTS", json.dumps([{"name": "bob", "token_sha256": "ab"}]))
    with pytest.raises(ValueError) as info:
        CoordinatorSettings.load()
    text = str(info.value)
    assert text.startswith("the environment (no config file): analyst 'bob': token_sha256 ")
    assert text.endswith("(set by FEDCLUST_ANALYSTS)")


def test_an_analyst_from_variables_and_the_older_names(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("FEDCLUST_COORDINATOR_URL", "http://old.test")
    monkeypatch.setenv("FEDCLUST_TOKEN", "older-token")
    assert AnalystConfig.load(None).token == "older-token"
    write(tmp_path / "analyst-token", ANALYST_TOKEN)
    monkeypatch.setenv("FEDCLUST_ANALYST__TOKEN_FILE", "analyst-token")
    assert AnalystConfig.load(None).token == ANALYST_TOKEN  # the table's variable wins
    file = write(tmp_path / "analyst.toml", '[analyst]\ncoordinator_url = "http://new.test"\n')
    config = AnalystConfig.load(file)
    # over a file, only FEDCLUST_ANALYST__*: FEDCLUST_TOKEN is not sent to another coordinator
    assert (config.coordinator_url, config.token) == ("http://new.test", ANALYST_TOKEN)
    monkeypatch.delenv("FEDCLUST_ANALYST__TOKEN_FILE")
    with pytest.raises(ValueError, match=r"token must be a non-empty string"):
        AnalystConfig.load(file)


# -- secrets stay out of reprs and logs ------------------------------------------------------
def test_reprs_hide_tokens_digests_and_database_urls(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    coordinator_env(monkeypatch)
    monkeypatch.setenv(
        "FEDCLUST_COORDINATOR__DATABASE_URL", "postgresql+psycopg://fed:db-password@db/fed"
    )
    monkeypatch.setenv("FEDCLUST_COUNTING__COORDINATOR_TOKEN_SHA256", sha(COUNTING_TOKEN))
    monkeypatch.setenv("FEDCLUST_PARTICIPANT__ID", "hospital-a")
    monkeypatch.setenv("FEDCLUST_PARTICIPANT__COORDINATOR_URL", "http://c.test")
    monkeypatch.setenv("FEDCLUST_PARTICIPANT__COUNTING_URL", "http://n.test")
    monkeypatch.setenv("FEDCLUST_PARTICIPANT__TOKEN", PARTICIPANT_TOKEN)
    monkeypatch.setenv("FEDCLUST_DATA__PATH", "a.csv")
    monkeypatch.setenv("FEDCLUST_ANALYST__COORDINATOR_URL", "http://c.test")
    monkeypatch.setenv("FEDCLUST_ANALYST__TOKEN", ANALYST_TOKEN)
    shown = " ".join(
        f(obj) for obj in (
            CoordinatorSettings.load(), CountingSettings.load(), ParticipantConfig.load(),
            AnalystConfig.load(None),
        ) for f in (repr, str)
    )
    for secret in (
        COUNTING_TOKEN, PARTICIPANT_TOKEN, ANALYST_TOKEN, "db-password", sha(COUNTING_TOKEN),
        sha(ANALYST_TOKEN), sha(PARTICIPANT_TOKEN),
    ):
        assert secret not in shown
    assert "hospital-a" in shown  # the reprs still say what they are


def test_starting_the_coordinator_logs_no_token(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    coordinator_env(monkeypatch)
    monkeypatch.setenv("FEDCLUST_COORDINATOR__DATABASE_URL", "sqlite:///coordinator.db")
    caplog.set_level(logging.DEBUG)
    settings = CoordinatorSettings.load()
    logging.getLogger("fedclust.test").info("loaded %s", settings)
    with TestClient(create_app(settings)) as client:
        assert client.get("/healthz").status_code == 200
        listed = client.get(
            "/api/v1/participants", headers={"Authorization": f"Bearer {ANALYST_TOKEN}"}
        )
        assert [p["id"] for p in listed.json()] == ["hospital-a"]
    assert caplog.records, "the app logged nothing: the check would be vacuous"
    logged = "\n".join(f"{r.getMessage()} {r.args!r}" for r in caplog.records)
    for secret in (COUNTING_TOKEN, ANALYST_TOKEN, sha(ANALYST_TOKEN)):
        assert secret not in logged


# -- the services started from the environment ---------------------------------------------
def _wait_ready(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while True:
        assert proc.poll() is None, log.read_text("utf-8", errors="replace")[-2000:]
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, f"{url} did not answer 200 within 60 s"
        time.sleep(0.1)


def test_services_serve_configured_by_variables_and_secret_files(tmp_path: Path) -> None:
    """``fedclust counter serve`` and ``fedclust coordinator serve`` without --config."""
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    write(secrets / "fedclust_counting__coordinator_token_sha256", sha(COUNTING_TOKEN))
    write(secrets / "coordinator-token", COUNTING_TOKEN + "\n")
    ports = {"counting": free_port(), "coordinator": free_port()}
    base = {k: v for k, v in os.environ.items() if not k.upper().startswith("FEDCLUST_")}
    envs = {
        "counting": {
            "FEDCLUST_SECRETS_DIR": str(secrets),
            "FEDCLUST_COUNTING__PORT": str(ports["counting"]),
            "FEDCLUST_PARTICIPANTS": PARTICIPANTS,
        },
        "coordinator": {
            "FEDCLUST_COORDINATOR__PORT": str(ports["coordinator"]),
            "FEDCLUST_COORDINATOR__COUNTING_URL": f"http://127.0.0.1:{ports['counting']}",
            "FEDCLUST_COORDINATOR__COUNTING_TOKEN_FILE": str(secrets / "coordinator-token"),
            "FEDCLUST_ANALYSTS": ANALYSTS,
            "FEDCLUST_PARTICIPANTS": PARTICIPANTS,
        },
    }
    commands = {"counting": "counter", "coordinator": "coordinator"}
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for name in ("counting", "coordinator"):
            workdir = tmp_path / name
            workdir.mkdir()
            with (tmp_path / f"{name}.log").open("wb") as log:
                procs[name] = subprocess.Popen(
                    [sys.executable, "-m", "fedclust", commands[name], "serve"],
                    cwd=workdir, env={**base, **envs[name]}, stdout=log,
                    stderr=subprocess.STDOUT,
                )
        coordinator = f"http://127.0.0.1:{ports['coordinator']}"
        _wait_ready(f"http://127.0.0.1:{ports['counting']}/readyz", procs["counting"],
                    tmp_path / "counting.log")
        _wait_ready(f"{coordinator}/readyz", procs["coordinator"], tmp_path / "coordinator.log")
        listed = httpx.get(
            f"{coordinator}/api/v1/participants",
            headers={"Authorization": f"Bearer {ANALYST_TOKEN}"},
        )
        assert [p["id"] for p in listed.json()] == ["hospital-a"]
    finally:
        for proc in procs.values():
            proc.send_signal(signal.SIGTERM)
        for proc in procs.values():
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    # each wrote its database in its working directory (no config file to resolve against)
    assert (tmp_path / "coordinator" / "coordinator.db").is_file()
    assert (tmp_path / "counting" / "counting.db").is_file()
    for name in procs:
        written = (tmp_path / f"{name}.log").read_text("utf-8", errors="replace")
        for secret in (COUNTING_TOKEN, ANALYST_TOKEN, PARTICIPANT_TOKEN):
            assert secret not in written
