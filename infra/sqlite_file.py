"""Create a service's SQLite file private to its owner (mode 0600) before it is opened."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.engine import make_url

from fedclust.infra.private_files import create_private

__all__ = ["create_private_sqlite"]


def create_private_sqlite(url: str) -> None:
    """Create the file of a sqlite ``url`` readable and writable by its owner only (0600),
    and its missing folders 0700 (:mod:`infra.private_files`).

    SQLAlchemy (sqlite) would create it with the umask's mode, usually world-readable; the
    coordinator's database holds participants' statistics and the counting service's their
    counts and Paillier keys. sqlite gives its -wal and -shm files the database's mode. An
    existing file is left as it is; other databases, memory and URI filenames are ignored.
    """
    parsed = make_url(url)
    database = parsed.database
    if parsed.get_backend_name() != "sqlite" or not database or database == ":memory:":
        return
    if database.startswith("file:"):
        return  # a URI filename: its options are sqlite's to interpret
    create_private(Path(database))
