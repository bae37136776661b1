"""The services' database base: their engines, SQLite files and schema revisions.

:func:`open_engine` creates a SQLite database's file private to its owner
(:mod:`infra.sqlite_file`) and opens an engine over any SQLAlchemy URL (:func:`make_engine`);
:func:`ensure_head` starts a service on a database at its newest schema revision
(:mod:`infra.schema`).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.pool import StaticPool

from fedclust.infra.schema import Migrations, ensure_schema
from fedclust.infra.sqlite_file import create_private_sqlite

__all__ = ["ensure_head", "make_engine", "open_engine"]


def make_engine(database_url: str, *, wal: bool = False) -> Engine:
    """An engine for ``database_url``. SQLite is opened for use from several threads (an
    in-memory database as one connection they share), a file with ``wal`` in write-ahead-log
    mode (:func:`_sqlite_wal`); other databases' connections are checked before each use."""
    url = make_url(database_url)
    if url.get_backend_name() != "sqlite":
        return create_engine(url, pool_pre_ping=True)
    threads = {"check_same_thread": False}
    if not url.database or url.database == ":memory:":
        return create_engine(url, connect_args=threads, poolclass=StaticPool)
    engine = create_engine(url, connect_args=threads)
    if wal:
        event.listen(engine, "connect", _sqlite_wal)
    return engine


def _sqlite_wal(connection: Any, _record: Any) -> None:
    """Write-ahead log without an fsync per commit: a crash can lose the last commits but
    never corrupts the file, and a lost contribution is simply asked again on resume."""
    cursor = connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def open_engine(database_url: str, *, wal: bool = False) -> Engine:
    """:func:`make_engine`, a SQLite file created private to its owner first."""
    create_private_sqlite(database_url)
    return make_engine(database_url, wal=wal)


def ensure_head(engine: Engine, migrations: Migrations) -> None:
    """Use the database at the newest revision, creating an empty one there
    (:func:`infra.schema.ensure_schema`); any other is refused and ``engine`` disposed.

    Raises:
        SchemaBehindError: the database is behind (or predates) the newest revision:
            ``fedclust <role> migrate`` upgrades it.
    """
    try:
        ensure_schema(engine, migrations)
    except BaseException:
        engine.dispose()
        raise

