"""``fedclust federation invite|revoke|audit|members``: an admin analyst's membership calls,
and the member list with each member's last contact (any analyst)."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fedclust.protocol.wire.messages import ParticipantPublic

_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _duration(text: str) -> int:
    """``90s``, ``30m``, ``24h``, ``7d`` (or plain seconds) as seconds."""
    number, unit = (text[:-1], text[-1]) if text[-1:] in _DURATION_UNITS else (text, "s")
    if not number.isdigit() or int(number) == 0:
        raise argparse.ArgumentTypeError(f"expected a duration like 24h, 30m or 7d; got {text!r}")
    return int(number) * _DURATION_UNITS[unit]


def _url(text: str) -> str:
    """An http:// or https:// URL, without a trailing slash."""
    if not text.startswith(("http://", "https://")) or len(text) < 8:
        raise argparse.ArgumentTypeError(f"expected an http:// or https:// URL; got {text!r}")
    return text.rstrip("/")


def add_arguments(federation: argparse.ArgumentParser) -> None:
    actions = federation.add_subparsers(dest="action", required=True)
    invite = actions.add_parser(
        "invite", help="print a one-time enrolment secret for a new participant",
        description=(
            "Ask the coordinator for a one-time invite for participant NAME and print it (one "
            "line). Give it to the organisation over a private channel; it runs `fedclust "
            "participant enrol --invite INVITE` within the expiry. The invite carries the "
            "coordinator's URL (--url, else the coordinator's public_url, else the URL this "
            "config reaches it at) and the SHA-256 of the CA certificate its TLS chain ends "
            "in, which the organisation's agent pins: its participant.toml needs neither. "
            "Needs an admin's token."
        ),
    )
    invite.add_argument("name", metavar="NAME", help="the participant id to invite")
    invite.add_argument(
        "--url", type=_url, metavar="URL",
        help="the coordinator's URL as the organisation reaches it (default: the "
        "coordinator's public_url, else this config's coordinator_url)",
    )
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
    actions.add_parser(
        "members", help="list the members and when each last polled or answered",
        description=(
            "List the federation's current members: whether each enrolled, its data width, "
            "the algorithms its policy allows and when it last polled or answered the "
            "coordinator (stored every 30 s, so kept across restarts). Any analyst's token; "
            "--json prints the JSON list."
        ),
    ).add_argument("--json", action="store_true", help="print JSON")
    for cmd in (invite, revoke, actions.choices["audit"], actions.choices["members"]):
        cmd.add_argument(
            "--config", metavar="FILE", help="analyst.toml of an admin (default: $FEDCLUST_* env)"
        )


def run(args: argparse.Namespace) -> int:
    from fedclust.client import AnalystClient, AnalystConfig
    from fedclust.protocol.wire.admin import InviteBundle

    config = AnalystConfig.load(args.config)
    with AnalystClient(config) as client:
        if args.action == "invite":
            invitation = client.invite(args.name, expires_in_seconds=args.expires)
            url = args.url or invitation.coordinator_url or config.coordinator_url
            bundle = InviteBundle(
                participant_id=invitation.participant_id, invite=invitation.invite,
                coordinator_url=url.rstrip("/"), ca_sha256=invitation.ca_sha256,
            )
            print(bundle.encode())
            pinned = (
                f"pins the CA with SHA-256 {bundle.ca_sha256}" if bundle.ca_sha256 else
                "pins no CA (the coordinator serves no TLS chain ending in a CA of its [tls] "
                "files)"
            )
            print(
                f"invite for {invitation.participant_id} at {bundle.coordinator_url}, valid "
                f"until {invitation.expires_at.isoformat(timespec='seconds')}; it {pinned}",
                file=sys.stderr,
            )
            return 0
        if args.action == "revoke":
            client.revoke(args.name)
            print(f"revoked {args.name}")
            return 0
        if args.action == "members":
            members = client.participants()
            if args.json:
                print(json.dumps([m.model_dump(mode="json") for m in members], indent=2))
            else:
                print(members_table(members, now=datetime.now(UTC)))
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


def members_table(members: list[ParticipantPublic], *, now: datetime) -> str:
    """The members as a table: id, enrolled, features, algorithms, last seen (UTC, and how
    long before ``now``)."""
    from fedclust.tables import render_table

    rows = [
        [
            m.id, "yes" if m.enrolled else "no",
            "" if m.n_features is None else str(m.n_features),
            ", ".join(m.allowed_algorithms),
            "never" if m.last_contact is None else _seen(m.last_contact, now),
        ]
        for m in members
    ]
    return render_table(
        ["member", "enrolled", "features", "algorithms", "last seen"], rows, numeric=(2,)
    )


def _seen(at: datetime, now: datetime) -> str:
    """``2026-11-27 05:31:02Z (3 min ago)``."""
    seconds = max(0, int((now - at).total_seconds()))
    ago = next(
        f"{seconds // size} {unit} ago" for size, unit in (
            (86400, "d"), (3600, "h"), (60, "min"), (1, "s"),
        ) if seconds >= size or size == 1
    )
    return f"{at.astimezone(UTC).strftime('%Y-%m-%d %H:%M:%S')}Z ({ago})"
