"""``fedclust counter serve|migrate|members|check``: run the counting service, upgrade its
database, decide its memberships, check its configuration."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from fedclust.cli._service import (
    _GRACEFUL_SHUTDOWN,
    _add_check_parser,
    _add_migrate_parser,
    _add_service_actions,
    _checked,
    _database_errors,
    _freeze_start_up,
    _log_to_stderr,
    _migrated,
    _server_problems,
)

if TYPE_CHECKING:
    from fedclust.counting.settings import CountingSettings


def add_arguments(command: argparse.ArgumentParser) -> None:
    actions = _add_service_actions(command, "counter", "serve")
    _add_migrate_parser(actions, "counter")
    _add_members_parser(actions)
    _add_check_parser(actions, "counter")


def _add_members_parser(actions: Any) -> None:
    members = actions.add_parser(
        "members", help="list, approve or reject members of the counting service",
        description=(
            "The counting operator's membership decisions, on the counting host (they write "
            "the database of the config file; a running service applies them within about a "
            "second). A member that joins the federation through the coordinator is only "
            "*requested* here: its token is accepted once you approve it, so the "
            "coordinator's operator cannot invent members. Confirm the token's SHA-256 with "
            "the organisation out of band (`fedclust participant identity --token-digest`) "
            "and pass it with --token-sha256."
        ),
    )
    decisions = members.add_subparsers(dest="decision", required=True)
    listing = decisions.add_parser("list", help="members and pending requests")
    listing.add_argument("--config", required=True, metavar="FILE", help="TOML config file")
    for name, helptext in (
        ("approve", "accept a pending request (the member's token works from now on)"),
        ("reject", "drop a pending request"),
    ):
        cmd = decisions.add_parser(name, help=helptext, description=helptext + ".")
        cmd.add_argument("participant_id", metavar="ID")
        cmd.add_argument("--config", required=True, metavar="FILE", help="TOML config file")
        if name == "approve":
            cmd.add_argument(
                "--token-sha256", metavar="HEX",
                help="approve only if the request is for this digest (as the organisation "
                "reports it)",
            )


def _counter_members(args: argparse.Namespace, settings: CountingSettings) -> int:
    """``fedclust counter members list|approve|reject``: the counting operator's decisions."""
    from fedclust.counting.db import CountingStore
    from fedclust.counting.members import Members

    store = CountingStore(settings.database_url)
    try:
        members = Members(settings, store)
        if args.decision == "list":
            for pid, _ in sorted(members.credentials()):
                print(f"member   {pid}")
            for pid, digest in sorted(store.membership_requests().items()):
                print(f"pending  {pid}  token_sha256={digest}")
            return 0
        if args.decision == "reject":
            if not store.reject_membership(args.participant_id):
                raise ValueError(f"no membership request of {args.participant_id!r} is pending")
            print(f"rejected the request of {args.participant_id}")
            return 0
        members.approve(args.participant_id, args.token_sha256)
        print(f"approved {args.participant_id}: its token is accepted from now on")
        return 0
    finally:
        store.close()


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from fedclust.counting.app import create_app
    from fedclust.counting.db import migrate_database
    from fedclust.counting.settings import CountingSettings

    if args.action == "check":
        return _checked(
            "counter", args.config, lambda: CountingSettings.load(args.config),
            lambda settings: _server_problems(settings, database_key="counting.database_url"),
        )
    settings = CountingSettings.load(args.config)
    with _database_errors(settings.database_url):
        if args.action == "migrate":
            return _migrated(
                "counter", settings.database_url, migrate_database(settings.database_url)
            )
        if args.action == "members":
            return _counter_members(args, settings)
        app = create_app(settings)  # opens the database: refuses one behind the schema
    _log_to_stderr(args)
    _freeze_start_up()
    uvicorn.run(
        app, host=settings.host, port=settings.port, log_level="warning",
        log_config=None,  # uvicorn's records go through _log_to_stderr's format
        timeout_graceful_shutdown=_GRACEFUL_SHUTDOWN, **settings.tls.uvicorn_options(),
    )
    return 0
