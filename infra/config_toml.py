"""Reading the services' TOML config files: what the coordinator, the counting service and the
participant agent share (kept out of the command-line layer, which only writes configs)."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

__all__ = ["only_keys", "read_toml", "resolve_sqlite_url"]


def read_toml(path: str | os.PathLike[str], *, what: str) -> tuple[dict[str, Any], Path]:
    """The parsed TOML file and the folder relative paths in it resolve against.

    Raises:
        ValueError: the file is missing or not TOML; the message starts with its path and
            names ``what`` it should be (e.g. "the coordinator's config file").
    """
    file = Path(path)
    try:
        with file.open("rb") as fh:
            doc = tomllib.load(fh)
    except FileNotFoundError:
        raise ValueError(f"{file}: {what} is missing.") from None
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{file}: not valid TOML ({exc}).") from None
    return doc, file.resolve().parent


def only_keys(table: Mapping[str, Any], allowed: set[str], *, where: str) -> None:
    """Refuse keys outside ``allowed`` in a config table, naming them and the expected ones."""
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise ValueError(
            f"unknown key(s) {', '.join(repr(k) for k in unknown)} in {where}; "
            f"expected: {', '.join(sorted(allowed))}."
        )


def resolve_sqlite_url(url: str, base: Path) -> str:
    """Make the file of a ``sqlite:///relative.db`` URL relative to ``base``; others unchanged."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError) as exc:
        raise ValueError("database_url is not a valid SQLAlchemy URL.") from exc
    database = parsed.database
    if parsed.get_backend_name() != "sqlite" or not database or database == ":memory:":
        return url
    if database.startswith("file:") or Path(database).is_absolute():
        return url
    return parsed.set(database=str(base / database)).render_as_string(hide_password=False)
