"""``fedclust coordinator migrate`` and ``fedclust counter migrate``: upgrade the database of the
config file and print its revision; ``serve`` refuses a database behind head in one line."""

from __future__ import annotations

import gc
import socket
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from sqlalchemy import create_engine

from fedclust.cli import main
from fedclust.coordinator.db import MIGRATIONS as COORDINATOR
from fedclust.counting.db import MIGRATIONS as COUNTING
from fedclust.crypto.tokens import token_sha256
from fedclust.infra.schema import Migrations

ANALYST, PARTICIPANT, COORDINATOR_TOKEN = (
    token_sha256(who) for who in ("analyst", "participant", "coordinator")
)


def coordinator_toml(folder: Path, url: str) -> Path:
    path = folder / "coordinator.toml"
    path.write_text(
        f'[coordinator]\ndatabase_url = "{url}"\ncounting_url = "http://127.0.0.1:9"\n'
        f'counting_token = "tok"\n\n[[analysts]]\nname = "alice"\ntoken_sha256 = "{ANALYST}"\n\n'
        f'[[participants]]\nid = "hospital-a"\ntoken_sha256 = "{PARTICIPANT}"\n',
        encoding="utf-8",
    )
    return path


def counting_toml(folder: Path, url: str) -> Path:
    path = folder / "counting.toml"
    path.write_text(
        f'[counting]\ndatabase_url = "{url}"\ncoordinator_token_sha256 = "{COORDINATOR_TOKEN}"\n'
        f'\n[[participants]]\nid = "hospital-a"\ntoken_sha256 = "{PARTICIPANT}"\n',
        encoding="utf-8",
    )
    return path


ROLES = {
    "coordinator": (coordinator_toml, COORDINATOR, "coordinator.db"),
    "counter": (counting_toml, COUNTING, "counting.db"),  # the counting service
}


@pytest.mark.parametrize("role", ROLES)
def test_migrate_upgrades_then_reports_head(
    role: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write, migrations, file = ROLES[role]
    config = write(tmp_path, f"sqlite:///{file}")  # relative: beside the config file
    head = migrations.head()
    assert main([role, "migrate", "--config", str(config)]) == 0
    assert capsys.readouterr().out == (
        f"{role} database sqlite:///{tmp_path.resolve() / file}: upgraded from no revision to "
        f"{head} (head)\n"
    )
    assert (tmp_path / file).stat().st_mode & 0o777 == 0o600
    assert main([role, "migrate", "--config", str(config)]) == 0
    assert capsys.readouterr().out.endswith(f": already at revision {head} (head)\n")


def _unversioned(url: str, migrations: Migrations) -> None:
    """A database as an earlier fedclust left it: the tables, no revision."""
    engine = create_engine(url)
    migrations.metadata.create_all(engine)
    engine.dispose()


@pytest.mark.parametrize("role", ROLES)
def test_serve_refuses_a_database_behind_head_in_one_line(
    role: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write, migrations, file = ROLES[role]
    _unversioned(f"sqlite:///{tmp_path / file}", migrations)
    config = write(tmp_path, f"sqlite:///{file}")
    assert main([role, "serve", "--config", str(config)]) == 2  # before listening
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"fedclust {role} serve: error: the {migrations.name}'s database "
                          "predates schema migrations")
    assert f"run `fedclust {role} migrate --config <config file>`" in err


def test_migrate_on_postgresql_hides_the_password(
    postgres_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = postgres_url.replace("postgres@", "postgres:not-printed@")  # trust ignores it
    config = coordinator_toml(tmp_path, url)
    assert main(["coordinator", "migrate", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert "not-printed" not in out and "postgresql+psycopg://postgres:***@" in out
    assert out.endswith(f"upgraded from no revision to {COORDINATOR.head()} (head)\n")


@pytest.mark.parametrize("role", ROLES)
def test_an_unreachable_database_is_one_line_without_its_password(
    role: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("psycopg")
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    write, _, _ = ROLES[role]
    config = write(tmp_path, f"postgresql+psycopg://fedclust:not-printed@127.0.0.1:{port}/x")
    for action in ("migrate", "serve"):
        assert main([role, action, "--config", str(config)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "not-printed" not in err
        assert err.startswith(f"fedclust {role} {action}: error: cannot use the database "
                              f"postgresql+psycopg://fedclust:***@127.0.0.1:{port}/x: ")


@pytest.mark.parametrize("role", ROLES)
def test_serve_freezes_what_start_up_made_before_it_listens(
    role: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The collector's full collections skip the modules and the app (``gc.freeze``)."""
    write, _, file = ROLES[role]
    config = write(tmp_path, f"sqlite:///{file}")
    frozen: list[int] = []

    def serve(*_: Any, **__: Any) -> None:
        frozen.append(gc.get_freeze_count())

    monkeypatch.setattr(f"fedclust.cli.{role}._log_to_stderr", lambda _: None)
    monkeypatch.setattr(uvicorn.Server, "run", serve)  # the coordinator's
    monkeypatch.setattr(uvicorn, "run", serve)  # the counting service's
    try:
        assert main([role, "serve", "--config", str(config)]) == 0
    finally:
        gc.unfreeze()
    assert len(frozen) == 1 and frozen[0] > 10_000
