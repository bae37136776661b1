"""A throwaway PostgreSQL cluster for the tests (a pytest plugin: ``tests/conftest.py``).

One cluster per test session, made by ``initdb`` and started by ``pg_ctl`` (the server
binaries under ``/usr/lib/postgresql/*/bin``) in a temporary folder, listening on a free port
of 127.0.0.1 only, trusting local connections and stopped at the end of the session. As root
(initdb refuses it) the server runs as the user ``nobody``. Every test asking for one gets a
database of its own.

Fixtures:

- ``postgres``: the session's cluster (skips, saying why, where PostgreSQL or psycopg is
  missing);
- ``postgres_url``: a fresh empty database in it, as a ``postgresql+psycopg://`` URL;
- ``database_url``: parametrised over ``sqlite`` (a file in ``tmp_path``) and ``postgresql``,
  for tests that must pass on both.
"""

from __future__ import annotations

import glob
import importlib.util
import itertools
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from fedclust.demo import free_port as _free_port

__all__ = ["PostgresCluster", "database_url", "postgres", "postgres_url"]

_STARTUP_SECONDS = 60


@dataclass
class PostgresCluster:
    """A running cluster: superuser ``postgres``, no password, on ``127.0.0.1:port``."""

    port: int
    _names: Iterator[int]

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        """Create an empty database; its URL."""
        name = f"test_{next(self._names)}"
        engine = create_engine(self.url(), isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as connection:
                connection.execute(text(f'CREATE DATABASE "{name}"'))
        finally:
            engine.dispose()
        return self.url(name)


def _binaries() -> Path | None:
    """The newest installed PostgreSQL server's bin folder."""
    found = [Path(p) for p in glob.glob("/usr/lib/postgresql/*/bin") if Path(p, "initdb").exists()]
    if not found:
        return None
    return max(found, key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0)


def _as_server_user(root: Path) -> list[str]:
    """The command prefix that runs the server binaries as a user initdb accepts."""
    if os.geteuid() != 0:
        return []
    runuser = shutil.which("runuser")
    if runuser is None:
        pytest.skip("tests run as root and `runuser` is missing: initdb refuses root")
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("tests run as root and there is no user `nobody` to run PostgreSQL as")
    os.chown(root, nobody.pw_uid, nobody.pw_gid)
    return [runuser, "-u", "nobody", "--"]


def _run(command: list[str], what: str) -> None:
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=_STARTUP_SECONDS, check=False
    )
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines() or ["no output"]
        pytest.skip(f"PostgreSQL {what} failed: {lines[-1]}")


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresCluster]:
    """The session's PostgreSQL cluster, stopped and deleted at the end."""
    if importlib.util.find_spec("psycopg") is None:
        pytest.skip("psycopg is not installed (pip install -e '.[postgres]')")
    bin_dir = _binaries()
    if bin_dir is None:
        pytest.skip("no PostgreSQL server: /usr/lib/postgresql/*/bin/initdb not found")
    root = Path(tempfile.mkdtemp(prefix="fedclust-pg-"))
    try:
        prefix = _as_server_user(root)
        data = root / "data"
        _run([*prefix, str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres",
              "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync"], "initdb")
        port = _free_port()
        # A zone far from UTC: times must come back as the same instants, in UTC.
        options = (f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off "
                   "-c synchronous_commit=off -c full_page_writes=off "
                   "-c timezone=Pacific/Chatham")
        _run([*prefix, str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(root / "log"),
              "-w", "-t", str(_STARTUP_SECONDS), "-o", options, "start"], "start")
        try:
            yield PostgresCluster(port=port, _names=itertools.count())
        finally:
            subprocess.run(
                [*prefix, str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w",
                 "stop"],
                capture_output=True, timeout=_STARTUP_SECONDS, check=False,
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def postgres_url(postgres: PostgresCluster) -> str:
    """A fresh empty PostgreSQL database of the session's cluster."""
    return postgres.new_database()


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The test's database: a SQLite file, then a PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'test.db'}"
    cluster: PostgresCluster = request.getfixturevalue("postgres")
    return cluster.new_database()
