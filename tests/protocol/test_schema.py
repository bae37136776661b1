"""Schema revisions of both services (infra.schema): head creates exactly the models' tables
on SQLite and PostgreSQL, ``migrate`` upgrades empty, older and pre-migration databases and is
idempotent, and start-up refuses a database behind head in one line."""

from __future__ import annotations

import textwrap
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from fastapi.testclient import TestClient
from sqlalchemy import Column, Integer, MetaData, Table, create_engine, inspect, text
from sqlalchemy.engine import Engine

from fedclust.coordinator import db as coordinator_db
from fedclust.coordinator.app import create_app
from fedclust.coordinator.db import Database
from fedclust.counting import db as counting_db
from fedclust.counting.db import CountingStore, migrate_database
from fedclust.infra.schema import Migrations, SchemaBehindError, ensure_schema, migrate
from fedclust.protocol.wire import messages as msg
from tests.coordinator._service import NAMES, FakeCounting, settings

SERVICES = {"coordinator": coordinator_db.MIGRATIONS, "counting": counting_db.MIGRATIONS}


def differences(engine: Engine, migrations: Migrations) -> list[Any]:
    """What Alembic would have to change for the database to match the models."""
    def ours(obj: Any, name: str | None, kind: str, reflected: bool, _: Any) -> bool:
        return not (kind == "table" and name == migrations.version_table)

    with engine.connect() as connection:
        context = MigrationContext.configure(
            connection, opts={"compare_type": True, "include_object": ours}
        )
        return list(compare_metadata(context, migrations.metadata))


def columns(engine: Engine) -> dict[str, set[str]]:
    found = inspect(engine)
    return {t: {c["name"] for c in found.get_columns(t)} for t in found.get_table_names()}


def model_columns(migrations: Migrations) -> dict[str, set[str]]:
    return {name: {c.name for c in t.columns} for name, t in migrations.metadata.tables.items()}


def revision(engine: Engine, migrations: Migrations) -> str | None:
    with engine.connect() as connection:
        return migrations.current(connection)


@pytest.mark.parametrize("service", SERVICES)
def test_migrate_builds_an_empty_database_at_head_as_the_models_say(
    service: str, database_url: str
) -> None:
    migrations = SERVICES[service]
    engine = create_engine(database_url)
    try:
        assert migrate(engine, migrations) == (None, migrations.head())
        assert differences(engine, migrations) == []
        assert migrate(engine, migrations) == (migrations.head(), migrations.head())  # idempotent
        ensure_schema(engine, migrations)  # start-up accepts it
    finally:
        engine.dispose()


def test_start_up_creates_an_empty_database_at_head(database_url: str) -> None:
    """The embedded default needs no setup: the coordinator creates a fresh database at head
    (and so does the counting service: tests/counting)."""
    database = Database(database_url)
    database.create_all()
    database.create_all()  # and reopen it
    migrations = coordinator_db.MIGRATIONS
    assert revision(database.engine, migrations) == migrations.head()
    assert differences(database.engine, migrations) == []
    database.dispose()


def test_the_counting_service_creates_an_empty_database_at_head(database_url: str) -> None:
    CountingStore(database_url).close()
    store = CountingStore(database_url)  # reopened
    store.close()
    engine = create_engine(database_url)
    migrations = counting_db.MIGRATIONS
    assert revision(engine, migrations) == migrations.head()
    assert differences(engine, migrations) == []
    engine.dispose()


def _oldest_coordinator_file(url: str) -> None:
    """The tables of a coordinator before replies, blobs, audit receipts, identity keys and
    owners were stored (replies still in ``tasks``), with one job and two tasks."""
    spec = msg.JobCreate(algorithm="ffcm", participants=list(NAMES), k=3, protection="none")
    engine = create_engine(url)
    with engine.begin() as connection:
        for statement in (
            "CREATE TABLE participants (id VARCHAR(64) PRIMARY KEY, n_features INTEGER NOT NULL, "
            "allowed_algorithms JSON NOT NULL, agent_version VARCHAR(64) NOT NULL, "
            "enrolled_at DATETIME NOT NULL)",
            "CREATE TABLE jobs (id VARCHAR(64) PRIMARY KEY, algorithm VARCHAR(32), spec TEXT, "
            "n_features INTEGER, state VARCHAR(16), result TEXT, error TEXT, progress TEXT, "
            "created_at DATETIME, updated_at DATETIME)",
            "CREATE INDEX ix_jobs_state ON jobs (state)",
            "CREATE TABLE tasks (job_id VARCHAR(64), participant VARCHAR(64), task_id INTEGER, "
            "kind VARCHAR(32), spec TEXT, reply TEXT, created_at DATETIME, answered_at DATETIME, "
            "open BOOLEAN NOT NULL, PRIMARY KEY (job_id, participant, task_id))",
            "INSERT INTO participants VALUES ('participant-0', 2, '[\"ffcm\"]', '0.1', "
            "'2026-01-01 00:00:00')",
            "INSERT INTO tasks VALUES ('job-old', 'participant-0', 0, 'report_count', '{}', "
            "'{\"kind\":\"ack\"}', '2026-01-01 00:00:00', '2026-01-01 00:00:01', 0), "
            "('job-old', 'participant-0', 1, 'report_count', '{}', NULL, "
            "'2026-01-01 00:00:02', NULL, 1)",
        ):
            connection.execute(text(statement))
        connection.execute(
            text("INSERT INTO jobs VALUES ('job-old', 'ffcm', :spec, 2, 'running', NULL, NULL, "
                 "NULL, '2026-01-01 00:00:00', '2026-01-01 00:00:00')"),
            {"spec": spec.model_dump_json()},
        )
    engine.dispose()


def test_an_old_coordinator_file_is_refused_then_migrated_keeping_its_rows(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'coordinator.db'}"
    _oldest_coordinator_file(url)
    migrations = coordinator_db.MIGRATIONS
    database = Database(url)
    with pytest.raises(SchemaBehindError) as refused:
        database.create_all()
    message = str(refused.value)
    assert "\n" not in message and "fedclust coordinator migrate --config" in message
    assert "predates schema migrations" in message
    assert database.migrate() == (None, migrations.head())
    assert database.migrate() == (migrations.head(), migrations.head())  # idempotent
    database.create_all()  # start-up accepts it now
    assert columns(database.engine) == {
        **model_columns(migrations), migrations.version_table: {"version_num"}
    }
    job = database.job("job-old")
    assert job is not None and job.state == "running" and job.owner is None
    log = database.job_log("job-old")
    assert {key: r.reply_json for key, r in log.items()} == {
        ("participant-0", 0): '{"kind":"ack"}', ("participant-0", 1): None,
    }
    (participant,) = database.participants().values()
    assert participant.identity_key is None and participant.allowed_algorithms == ("ffcm",)
    database.dispose()


def test_an_old_counting_file_is_refused_then_migrated_keeping_its_counts(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'counting.db'}"
    engine = create_engine(url)
    with engine.begin() as connection:  # before releases and the Paillier key holder
        for statement in (
            "CREATE TABLE roster_entries (job_id VARCHAR(64), participant_id VARCHAR(64), "
            "created_at DATETIME NOT NULL, PRIMARY KEY (job_id, participant_id))",
            "CREATE TABLE counts (job_id VARCHAR(64), participant_id VARCHAR(64), "
            "count BIGINT NOT NULL, reported_at DATETIME NOT NULL, "
            "PRIMARY KEY (job_id, participant_id), FOREIGN KEY (job_id, participant_id) "
            "REFERENCES roster_entries (job_id, participant_id))",
            "INSERT INTO roster_entries VALUES ('j', 'p0', '2026-01-01'), ('j', 'p1', "
            "'2026-01-01')",
            "INSERT INTO counts VALUES ('j', 'p0', 11, '2026-01-01')",
        ):
            connection.execute(text(statement))
    engine.dispose()
    with pytest.raises(SchemaBehindError, match=r"run `fedclust counter migrate --config"):
        CountingStore(url)
    head = counting_db.MIGRATIONS.head()
    assert migrate_database(url) == (None, head)
    assert migrate_database(url) == (head, head)
    store = CountingStore(url)
    store.report("j", "p1", 22)
    assert store.tally("j").total == 33
    store.close()


def test_start_up_refuses_a_database_behind_head(database_url: str, tmp_path: Path) -> None:
    """A database written before migrations (tables, no revision): the app does not start."""
    engine = create_engine(database_url)
    coordinator_db.MIGRATIONS.metadata.create_all(engine)  # an unversioned coordinator
    engine.dispose()
    app = create_app(settings(tmp_path, database_url=database_url),
                     counting_transport=FakeCounting().transport())
    with pytest.raises(SchemaBehindError, match="fedclust coordinator migrate"), TestClient(app):
        pass
    database = Database(database_url)
    assert database.migrate() == (None, coordinator_db.MIGRATIONS.head())
    assert differences(database.engine, coordinator_db.MIGRATIONS) == []  # stamped at head
    database.dispose()
    with TestClient(app) as client:  # now it starts
        assert client.get("/readyz").json()["checks"]["database"] == "ok"


_REVISION = '''
"""{doc}"""
import sqlalchemy as sa
from alembic import op

revision = "{rev}"
down_revision = {down!r}
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table("{table}", sa.Column("id", sa.Integer(), primary_key=True))


def downgrade() -> None:
    op.drop_table("{table}")
'''


def _service_with_revisions(root: Path, revisions: list[tuple[str, str]]) -> None:
    """A package ``fakesvc`` whose migrations create one table per revision."""
    versions = root / "fakesvc" / "migrations" / "versions"
    versions.mkdir(parents=True, exist_ok=True)
    (root / "fakesvc" / "__init__.py").write_text("")
    env = Path(coordinator_db.__file__).parent / "migrations" / "env.py"
    (root / "fakesvc" / "migrations" / "env.py").write_text(env.read_text())
    down = None
    for rev, table in revisions:
        (versions / f"v{rev}.py").write_text(textwrap.dedent(
            _REVISION.format(doc=f"create {table}", rev=rev, down=down, table=table)
        ))
        down = rev


def test_a_database_one_revision_behind_is_refused_then_upgraded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A later version adds a table as a new revision: start-up asks for ``migrate``."""
    monkeypatch.syspath_prepend(str(tmp_path))
    metadata = MetaData()
    migrations = Migrations("fakesvc", "fake service", "fakesvc", metadata)
    engine = create_engine(f"sqlite:///{tmp_path / 'fake.db'}")
    _service_with_revisions(tmp_path, [("0001", "first")])
    assert migrate(engine, migrations) == (None, "0001")
    _service_with_revisions(tmp_path, [("0001", "first"), ("0002", "second")])
    with pytest.raises(SchemaBehindError) as refused:
        ensure_schema(engine, migrations)
    assert str(refused.value) == (
        "the fake service's database is at revision 0001, behind 0002: run "
        "`fedclust fakesvc migrate --config <config file>`."
    )
    assert migrate(engine, migrations) == ("0001", "0002")
    for name in ("first", "second"):
        Table(name, metadata, Column("id", Integer, primary_key=True))
    ensure_schema(engine, migrations)
    assert differences(engine, migrations) == []
    with engine.begin() as connection:  # as a newer fedclust would leave it
        connection.execute(text(f"UPDATE {migrations.version_table} SET version_num = '0003'"))
    for check in (ensure_schema, migrate):
        with pytest.raises(SchemaBehindError, match="revision 0003, unknown to this version"):
            check(engine, migrations)
    engine.dispose()


def test_each_service_keeps_its_revision_in_a_table_of_its_own() -> None:
    tables = {m.version_table for m in SERVICES.values()}
    assert len(tables) == 2
    assert not tables & {t for m in SERVICES.values() for t in m.metadata.tables}


def test_times_come_back_in_utc_from_a_server_in_another_zone(postgres_url: str) -> None:
    """The test cluster runs in Pacific/Chatham (tests/pg.py); stored times are UTC instants."""
    database = Database(postgres_url)
    database.create_all()
    spec = msg.JobCreate(algorithm="ffcm", participants=list(NAMES), k=3, protection="none")
    created = database.create_job("job-t", spec, n_features=2)
    stored = database.job("job-t")
    assert stored is not None
    assert stored.created_at == created.created_at
    assert stored.created_at.utcoffset() == timedelta(0)
    database.dispose()
