"""``fedclust federation invite|revoke|audit``: an admin analyst's membership calls."""

from __future__ import annotations

import argparse
import json
import sys

from fedclust.client import AnalystClient, AnalystConfig

_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _duration(text: str) -> int:
    """``90s``, ``30m``, ``24h``, ``7d`` (or plain seconds) as seconds."""
    number, unit = (text[:-1], text[-1]) if text[-1:] in _DURATION_UNITS else (text, "s")
    if not number.isdigit() or int(number) == 0:
        raise argparse.ArgumentTypeError(f"expected a duration like 24h, 30m or 7d; got {text!r}")
    return int(number) * _DURATION_UNITS[unit]


def add_arguments(federation: argparse.ArgumentParser) -> None:
    actions = federation.add_subparsers(dest="action", required=True)
    invite = actions.add_parser(
        "invite", help="print a one-time enrolment secret for a new participant",
        description=(
            "Ask the coordinator for a one-time invite for participant NAME and print it (one "
            "line). Give it to the organisation over a private channel; it runs `fedclust "
            "participant enrol --invite INVITE` within the expiry. Needs an admin's token."
        ),
    )
    invite.add_argument("name", metavar="NAME", help="the participant id to invite")
    invite.add_argument(
        "--expires", type=_duration, default=24 * 3600, metavar="DURATION",
        help="how long the invite can be redeemed: 30m, 24h, 7d (default 24h, at most 30d)",
    )
    revoke = actions.add_parser(
        "revoke", help="revoke a member: its token is refused at once",
        description=(
            "Revoke participant NAME at the coordinator and the counting service; its next "
            "request is refused (401). Running jobs naming it fail when its task times out."
        ),
    )
    revoke.add_argument("name", metavar="NAME", help="the participant id to revoke")
    actions.add_parser(
        "audit", help="print the admin trail (invitations, enrolments, revocations)",
        description="Print the admin trail, oldest first; --json prints the JSON list.",
    ).add_argument("--json", action="store_true", help="print JSON")
    for cmd in (invite, revoke, actions.choices["audit"]):
        cmd.add_argument(
            "--config", metavar="FILE", help="analyst.toml of an admin (default: $FEDCLUST_* env)"
        )


def run(args: argparse.Namespace) -> int:
    with AnalystClient(AnalystConfig.load(args.config)) as client:
        if args.action == "invite":
            invitation = client.invite(args.name, expires_in_seconds=args.expires)
            print(invitation.invite)
            print(
                f"invite for {invitation.participant_id}, valid until "
                f"{invitation.expires_at.isoformat(timespec='seconds')}",
                file=sys.stderr,
            )
            return 0
        if args.action == "revoke":
            client.revoke(args.name)
            print(f"revoked {args.name}")
            return 0
        events = client.admin_events()
        if args.json:
            print(json.dumps([e.model_dump(mode="json") for e in events], indent=2))
            return 0
        for e in events:
            until = f"  until {e.expires_at.isoformat(timespec='seconds')}" if e.expires_at else ""
            print(
                f"{e.seq}  {e.at.isoformat(timespec='seconds')}  {e.actor}  {e.action}  "
                f"{e.participant_id}{until}"
            )
        return 0
