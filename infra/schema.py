"""Schema versions of the services' databases: Alembic migrations run through its Python API.

Each service keeps its revisions in its own ``migrations`` package
(``fedclust.coordinator.migrations``, ``fedclust.counting.migrations``; no ``alembic.ini``) and
its revision in its own version table (``alembic_version_coordinator``,
``alembic_version_counting``). :func:`migrate` upgrades a database to head (empty, behind, or
from before migrations); :func:`ensure_schema` runs at start-up: a database at head is used,
an empty one created at head, anything else refused with one line saying to run ``migrate``.
A new revision is a file in the service's ``migrations/versions/`` whose ``down_revision`` is
the previous head.

Design notes: ``docs/services.md`` (§ Schema migrations: writing a revision with Alembic).
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import MetaData, inspect, text
from sqlalchemy.engine import Connection, Engine

__all__ = ["Migrations", "SchemaBehindError", "ensure_schema", "migrate", "run_env"]

# Alembic logs its dialect choices at INFO whenever it looks at a database: every start-up
# would print them. `migrate` prints its own one-line summary.
logging.getLogger("alembic.runtime.migration").setLevel(logging.WARNING)


class SchemaBehindError(RuntimeError):
    """The database is not at this version's newest revision (or is at an unknown one)."""


@dataclass(frozen=True)
class Migrations:
    """Where a service's revisions live and what they describe.

    Attributes:
        package: the service's package (its revisions are in ``<package>.migrations``).
        name: the service, for messages (``counting service``).
        role: its ``fedclust`` subcommand, for messages (``counter``).
        metadata: the service's SQLAlchemy tables (head must create exactly these).
    """

    package: str
    name: str
    role: str
    metadata: MetaData

    @property
    def version_table(self) -> str:
        return f"alembic_version_{self.package.rsplit('.', 1)[-1]}"

    def config(self, connection: Connection | None = None) -> Config:
        """An Alembic config with the script location inside the package."""
        config = Config()
        config.set_main_option("script_location", f"{self.package}:migrations")
        config.set_main_option("file_template", "v%%(rev)s_%%(slug)s")  # importable names
        config.attributes["connection"] = connection
        config.attributes["migrations"] = self
        return config

    def script(self) -> ScriptDirectory:
        return ScriptDirectory.from_config(self.config())

    def head(self) -> str:
        """The newest revision (the migrations have one head)."""
        head = self.script().get_current_head()
        assert head is not None, f"{self.package}.migrations has no revision"
        return head

    def current(self, connection: Connection) -> str | None:
        """The database's revision (None: never migrated)."""
        context = MigrationContext.configure(
            connection, opts={"version_table": self.version_table}
        )
        return context.get_current_revision()


@contextmanager
def _locked(engine: Engine, migrations: Migrations) -> Iterator[Connection]:
    """One transaction; on PostgreSQL it holds an advisory lock, so two processes starting
    together do not both create or upgrade the schema."""
    with engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            key = zlib.crc32(migrations.version_table.encode())
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": key})
        yield connection


def _unknown(migrations: Migrations, script: ScriptDirectory, current: str) -> str | None:
    """Why a revision this version has no script for cannot be used (None: it has one)."""
    if current in {rev.revision for rev in script.walk_revisions()}:
        return None
    return (f"the {migrations.name}'s database is at revision {current}, unknown to this "
            f"version of fedclust (head {script.get_current_head()}): was it written by a "
            "newer one?")


def migrate(engine: Engine, migrations: Migrations) -> tuple[str | None, str]:
    """Upgrade the database to head; returns its revision before and after (idempotent).

    Raises:
        SchemaBehindError: the database is at a revision this version does not know.
    """
    with _locked(engine, migrations) as connection:
        before = migrations.current(connection)
        unknown = None if before is None else _unknown(migrations, migrations.script(), before)
        if unknown is not None:
            raise SchemaBehindError(unknown)
        command.upgrade(migrations.config(connection), "head")
        after = migrations.current(connection)
    assert after is not None
    return before, after


def ensure_schema(engine: Engine, migrations: Migrations) -> None:
    """Use a database at head; create an empty one at head; refuse any other.

    Raises:
        SchemaBehindError: the database is behind head, predates migrations, or is at a
            revision this version does not know; the message says what to do.
    """
    script = migrations.script()
    head = script.get_current_head()
    with _locked(engine, migrations) as connection:
        current = migrations.current(connection)
        if current == head:
            return
        ours = set(migrations.metadata.tables) & set(inspect(connection).get_table_names())
        if current is None and not ours:
            migrations.metadata.create_all(connection)
            MigrationContext.configure(
                connection, opts={"version_table": migrations.version_table}
            ).stamp(script, "head")
            return
    run = f"run `fedclust {migrations.role} migrate --config <config file>`"
    if current is None:
        raise SchemaBehindError(f"the {migrations.name}'s database predates schema migrations: "
                                f"{run} to upgrade it to revision {head}.")
    unknown = _unknown(migrations, script, current)
    if unknown is not None:
        raise SchemaBehindError(unknown)
    raise SchemaBehindError(
        f"the {migrations.name}'s database is at revision {current}, behind {head}: {run}."
    )


def run_env() -> None:
    """The body of a service's ``migrations/env.py``: migrate on the connection handed over
    by :func:`migrate` (online only; autogenerated revisions alter SQLite tables in batch
    mode)."""
    from alembic import context

    connection = context.config.attributes.get("connection")
    migrations = context.config.attributes.get("migrations")
    if not isinstance(connection, Connection) or not isinstance(migrations, Migrations):
        raise RuntimeError("fedclust migrations run through `fedclust <service> migrate`.")
    context.configure(
        connection=connection,
        target_metadata=migrations.metadata,
        version_table=migrations.version_table,
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()
