"""What the service roles (coordinator, counter, participant) share: their flags, the
``migrate`` action, database errors in one line, and logging to stderr."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fedclust.cli import _COMMANDS
from fedclust.infra.logformat import ENV_VAR, FORMATS, configure_logging

_CONFIG_HELP = (
    "TOML config file; FEDCLUST_<TABLE>__<KEY> variables and secret files override it, or "
    "replace it when omitted (deploy/README.md)"
)
# Seconds uvicorn waits for open requests (participants' long polls) before shutting down.
_GRACEFUL_SHUTDOWN = 3


def _add_service_actions(role_parser: argparse.ArgumentParser, role: str, action: str) -> Any:
    """The role's subparsers, with ``action`` (``serve`` or ``run``) added; its help is the
    role's."""
    helptext = dict(_COMMANDS)[role]
    actions = role_parser.add_subparsers(dest="action", required=True)
    cmd = actions.add_parser(action, help=helptext, description=helptext + ".")
    cmd.add_argument("--config", metavar="FILE", help=_CONFIG_HELP)
    cmd.add_argument(
        "--log-format", choices=FORMATS, default=None,
        help=f"log lines as text or one JSON object each (default: ${ENV_VAR}, else text)",
    )
    return actions


def _add_migrate_parser(actions: Any, role: str) -> None:
    service = "coordinator" if role == "coordinator" else "counting service"
    migrate = actions.add_parser(
        "migrate", help=f"upgrade the {service}'s database to the newest schema revision",
        description=(
            f"Upgrade the {service}'s database (database_url of the config file) to this "
            "version's newest schema revision and print it: an empty database is created, one "
            "written by an earlier version is upgraded, one at the newest is left as it is. "
            f"`fedclust {role} serve` refuses a database behind it."
        ),
    )
    migrate.add_argument("--config", required=True, metavar="FILE", help="TOML config file")


def _shown(url: str) -> str:
    """A database URL to print: without its password."""
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


@contextmanager
def _database_errors(url: str) -> Iterator[None]:
    """A database that cannot be reached or has no driver installed, as one line naming it."""
    from sqlalchemy.exc import SQLAlchemyError

    try:
        yield
    except ModuleNotFoundError as exc:
        if exc.name not in ("psycopg", "psycopg2"):
            raise
        raise RuntimeError(f"the database {_shown(url)} needs the PostgreSQL driver: "
                           "pip install 'fedclust[postgres]'") from None
    except SQLAlchemyError as exc:
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines() or ["?"]
        raise RuntimeError(f"cannot use the database {_shown(url)}: {reason[0]}") from None


def _migrated(role: str, url: str, revisions: tuple[str | None, str]) -> int:
    """Print what ``migrate`` did, in one line (the URL without its password)."""
    before, after = revisions
    where = _shown(url)
    if before == after:
        print(f"{role} database {where}: already at revision {after} (head)")
    else:
        print(f"{role} database {where}: upgraded from {before or 'no revision'} to "
              f"{after} (head)")
    return 0


def _log_to_stderr(args: argparse.Namespace) -> None:
    """Log to stderr as ``--log-format`` (or ``$FEDCLUST_LOG_FORMAT``) says: infra.logformat."""
    configure_logging(args.log_format)
