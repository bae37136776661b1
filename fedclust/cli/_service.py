"""What the service roles (coordinator, counter, participant) share: their flags, the
``migrate`` and ``check`` actions, database errors in one line, and logging to stderr."""

from __future__ import annotations

import argparse
import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from fedclust.cli import _COMMANDS
from fedclust.infra.logformat import ENV_VAR, FORMATS, configure_logging, shown_database_url

if TYPE_CHECKING:
    from fedclust.infra.tls import TlsSettings

_CONFIG_HELP = (
    "TOML config file; FEDCLUST_<TABLE>__<KEY> variables and secret files override it, or "
    "replace it when omitted (deploy/README.md)"
)
_Settings = TypeVar("_Settings")
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


def _add_check_parser(actions: Any, role: str) -> None:
    service = {"coordinator": "coordinator", "counter": "counting service"}.get(role, "agent")
    check = actions.add_parser(
        "check", help=f"check the {service}'s configuration without starting it",
        description=(
            f"Read the configuration as `fedclust {role} "
            f"{'run' if role == 'participant' else 'serve'}` does (the file, FEDCLUST_* "
            "variables and secret files, with the same checks), then the files it will "
            "need: certificates and keys (loadable, within their validity dates), "
            + ("the data file (read as the agent reads it), the identity key, state folder "
               "and audit log (writable)" if role == "participant" else
               "the database URL (syntax, driver, a SQLite file's folder; no connection is "
               "made)")
            + ". Prints OK, or the loader's first error, else every problem found (exit "
            "status 1)."
        ),
    )
    check.add_argument("--config", metavar="FILE", help=_CONFIG_HELP)


class _ServerSettings(Protocol):
    """What the coordinator's and the counting service's settings both have."""

    @property
    def database_url(self) -> str: ...

    @property
    def tls(self) -> TlsSettings: ...


def _server_problems(settings: _ServerSettings, *, database_key: str) -> list[str]:
    """What a server's loader leaves to its start: the database URL (at ``database_key``)
    and the certificates' dates."""
    from fedclust.infra.preflight import certificate_problems, database_problems

    return database_problems(settings.database_url, key=database_key) + (
        certificate_problems(settings.tls)
    )


def _checked(
    role: str, config: str | None, load: Callable[[], _Settings],
    problems: Callable[[_Settings], list[str]],
) -> int:
    """``fedclust <role> check``: the settings as ``load`` (the service's loader) reads them,
    then ``problems`` of the loaded settings; prints OK or each problem; 0 or 1."""
    where = config if config is not None else "the environment"
    try:
        settings = load()
    except ValueError as exc:  # the loader stops at its first error
        found = [str(exc)]
    else:
        found = problems(settings)
    if not found:
        print(f"{role} configuration {where}: OK")
        return 0
    print(f"{role} configuration {where}: {len(found)} problem(s)")
    for problem in found:
        print(f"  - {problem}")
    return 1


@contextmanager
def _database_errors(url: str) -> Iterator[None]:
    """A database that cannot be reached or has no driver installed, as one line naming it."""
    from sqlalchemy.exc import SQLAlchemyError

    try:
        yield
    except ModuleNotFoundError as exc:
        if exc.name not in ("psycopg", "psycopg2"):
            raise
        raise RuntimeError(f"the database {shown_database_url(url)} needs the PostgreSQL "
                           "driver: pip install 'fedclust[postgres]'") from None
    except SQLAlchemyError as exc:
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines() or ["?"]
        raise RuntimeError(
            f"cannot use the database {shown_database_url(url)}: {reason[0]}"
        ) from None


def _migrated(role: str, url: str, revisions: tuple[str | None, str]) -> int:
    """Print what ``migrate`` did, in one line (the URL without its password)."""
    before, after = revisions
    where = shown_database_url(url)
    if before == after:
        print(f"{role} database {where}: already at revision {after} (head)")
    else:
        print(f"{role} database {where}: upgraded from {before or 'no revision'} to "
              f"{after} (head)")
    return 0


def _log_to_stderr(args: argparse.Namespace) -> None:
    """Log to stderr as ``--log-format`` (or ``$FEDCLUST_LOG_FORMAT``) says: infra.logformat."""
    configure_logging(args.log_format)


def _freeze_start_up() -> None:
    """Take what start-up made (the modules, the app: about 200,000 objects, alive as long as
    the process) out of the cyclic garbage collector's reach, which otherwise traverses all of
    them in each full collection (about 130 ms of the event loop, every few hundred requests).
    Called last before serving."""
    gc.collect()
    gc.freeze()
