"""What ``fedclust coordinator|counter|participant check`` finds wrong before a start.

A service's config is first read by the service's own loader (its checks, the ``[tls]``
files loaded); these functions then look at what the loader does not open until the service
runs, each returning every problem it finds as one line naming the key: a database URL
(syntax, driver, a SQLite file's folder), the TLS certificates' validity dates, files to
read and folders to write.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path

from cryptography import x509

from fedclust.infra.tls import TlsSettings

__all__ = [
    "certificate_problems", "database_problems", "readable_file", "writable_folder",
    "writable_paths",
]


def database_problems(url: str, *, key: str) -> list[str]:
    """Problems of the database URL at ``key``: not a SQLAlchemy URL, no driver installed,
    or (SQLite) a file that cannot be created or written. Nothing is created or opened."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        return [f"{key} is not a SQLAlchemy URL (e.g. sqlite:///coordinator.db or "
                "postgresql+psycopg://user@host/db)"]
    try:
        parsed.get_dialect()
    except NoSuchModuleError:
        return [f"{key}: SQLAlchemy knows no database {parsed.drivername!r}"]
    except ModuleNotFoundError as exc:
        return [f"{key}: the driver {exc.name!r} of {parsed.drivername!r} is not installed "
                "(PostgreSQL: pip install 'fedclust[postgres]')"]
    database = parsed.database
    if parsed.get_backend_name() != "sqlite" or not database or database == ":memory:" \
            or database.startswith("file:"):
        return []
    path = Path(database)
    if path.exists():
        return [] if os.access(path, os.R_OK | os.W_OK) else [
            f"{key}: the SQLite file {path} is not readable and writable by this user"
        ]
    return writable_folder(_existing_parent(path), key=key, creating=path)


def certificate_problems(tls: TlsSettings, *, now: datetime | None = None) -> list[str]:
    """Certificates of ``[tls]`` (the loader has checked that they load) that have expired
    or are not valid yet."""
    moment = now if now is not None else datetime.now(UTC)
    found = []
    for key in ("certificate", "ca", "client_ca"):
        path = getattr(tls, key)
        if path is None:
            continue
        for cert in x509.load_pem_x509_certificates(path.read_bytes()):
            name = cert.subject.rfc4514_string()
            if cert.not_valid_after_utc < moment:
                found.append(f"[tls] {key}: {path} ({name}) expired on "
                             f"{cert.not_valid_after_utc:%Y-%m-%d}")
            elif cert.not_valid_before_utc > moment:
                found.append(f"[tls] {key}: {path} ({name}) is valid only from "
                             f"{cert.not_valid_before_utc:%Y-%m-%d}")
    return found


def readable_file(path: Path, *, key: str) -> list[str]:
    """``path`` (the value of ``key``) must be a file this user can read."""
    if not path.is_file():
        return [f"{key}: no file at {path}"]
    if not os.access(path, os.R_OK):
        return [f"{key}: {path} is not readable by this user"]
    return []


def writable_folder(folder: Path, *, key: str, creating: Path | None = None) -> list[str]:
    """``folder`` must be a folder this user can write in (to create ``creating``)."""
    what = f"cannot create {creating}: " if creating is not None else ""
    if not folder.is_dir():
        return [f"{key}: {what}{folder} is not a folder"]
    if not os.access(folder, os.W_OK | os.X_OK):
        return [f"{key}: {what}the folder {folder} is not writable by this user"]
    return []


def writable_paths(paths: Iterable[tuple[str, Path]]) -> list[str]:
    """Every (key, path) that the service will write: an existing file must be writable, a
    missing one creatable in its nearest existing folder."""
    found = []
    for key, path in paths:
        if path.exists():
            if not os.access(path, os.W_OK):
                found.append(f"{key}: {path} is not writable by this user")
        else:
            found += writable_folder(_existing_parent(path), key=key, creating=path)
    return found


def _existing_parent(path: Path) -> Path:
    """The nearest folder above ``path`` that exists (missing folders are created at start)."""
    parent = path.absolute().parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    return parent
