"""``fedclust audit verify|receipts|show``: check or summarise a participant's audit log
(:mod:`participant.audit`)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

import httpx

if TYPE_CHECKING:
    from fedclust.participant.config import ParticipantConfig


#: The exit status of `fedclust audit verify` for an intact chain without the key material
#: that would vouch for it.
UNVERIFIED_EXIT = 3
_ANCHOR_FLAGS = {
    "public_key": ("--public-key", "no --public-key: a re-chained or appended log would pass"),
    "receipts": (
        "--receipts", "no --receipts naming a line: a truncated or emptied log would pass"
    ),
}


def add_arguments(audit: argparse.ArgumentParser) -> None:
    audit.description = (
        "A participant's audit log records everything its agent sent: to whom, "
        "which fields, their shapes and protection, and the SHA-256 of the bytes."
    )
    actions = audit.add_subparsers(dest="action", required=True)
    verify = actions.add_parser(
        "verify", help="check the log against its signatures and the coordinator's receipts",
        description="Check every line and the hash chain, every line's signature with the "
        "participant's identity key (--public-key: catches a re-chained or appended log) and "
        "every line the coordinator's receipts name (--receipts: catches a truncated or "
        "emptied log). Both are needed: a chain alone is fooled by whoever can write the file. "
        "With --config participant.toml both are found from the agent's config (its audit log, "
        "its identity key file, and its receipts fetched from its coordinator with its own "
        "credentials); an explicit LOG, --public-key or --receipts overrides. A swapped "
        "identity key file does not pass: the lines the receipts name carry signatures by the "
        "key registered at enrolment. Lines after the last receipt are vouched for by their "
        "signatures only. Exit 0: verified; 1: broken (names the first broken line); 3: the "
        "chain is intact but UNVERIFIED (names the missing key material).",
    )
    verify.add_argument(
        "log", metavar="LOG", nargs="?",
        help="the audit log (JSON lines); default with --config: the agent's audit_log",
    )
    verify.add_argument(
        "--config", metavar="FILE",
        help="the participant's participant.toml: the defaults for LOG, --public-key and "
        "--receipts (fetched from its coordinator)",
    )
    verify.add_argument(
        "--public-key", metavar="KEY",
        help="the participant's Ed25519 identity: its public key (base64, as the coordinator's "
        "participant list shows it) or its identity key file; every line must be signed by it",
    )
    verify.add_argument(
        "--receipts", metavar="FILE",
        help="the coordinator's receipts for this log (JSON, from `fedclust audit receipts`); "
        "every line they name must be there unchanged",
    )
    receipts = actions.add_parser(
        "receipts", help="fetch the coordinator's receipts for a participant's audit log",
        description="Print, as JSON, every audit-log head the participant anchored at the "
        "coordinator, for `fedclust audit verify --receipts`.",
    )
    receipts.add_argument("--config", required=True, metavar="FILE", help="participant.toml")
    show = actions.add_parser(
        "show", help="what was revealed, to whom, in what form",
        description="Summarise per job, recipient and kind of message the fields sent, "
        "their shapes and protection, and the number of messages.",
    )
    show.add_argument("log", metavar="LOG", help="the audit log (JSON lines)")
    show.add_argument("--job", metavar="ID", help="only this job")
    show.add_argument("--json", action="store_true", help="print one JSON document")


def run(args: argparse.Namespace) -> int:
    from fedclust.participant.audit import format_summary, show
    from fedclust.participant.config import ParticipantConfig

    if args.action == "receipts":
        print(json.dumps(_fetch_receipts(ParticipantConfig.load(args.config)), indent=2))
        return 0
    if args.action == "verify":
        return _audit_verify(args)
    try:
        summary = show(args.log, job=args.job)
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(
            f"{args.log} is not a readable audit log ({type(exc).__name__}); "
            "run `fedclust audit verify` on it"
        ) from None
    if args.json:
        print(json.dumps(summary.to_json(), indent=2))
    else:
        print(format_summary(summary))
    return 0


def _audit_verify(args: argparse.Namespace) -> int:
    """Verify a log against both anchors; fail closed (exit 3) when either is missing."""
    from fedclust.participant.audit import (
        load_receipts,
        parse_receipts,
        public_key_from,
        verify,
    )
    from fedclust.participant.config import ParticipantConfig

    config = None if args.config is None else ParticipantConfig.load(args.config)
    log = args.log if args.log is not None else None if config is None else config.audit_path
    if log is None:
        raise ValueError("give the audit log (LOG) or the participant's --config.")
    key = args.public_key
    if key is None and config is not None:
        key = str(config.identity_path)
    if args.receipts is not None:
        receipts = load_receipts(args.receipts)
    elif config is not None:
        receipts = parse_receipts(_fetch_receipts(config), f"{config.coordinator_url}'s answer")
    else:
        receipts = []
    report = verify(
        log, public_key=None if key is None else public_key_from(key), receipts=receipts
    )
    if not report.ok:
        print(
            f"{log}: line {report.broken_line} {report.reason}; the chain is broken "
            f"there ({report.records} records before it are intact)",
            file=sys.stderr,
        )
        return 1
    checked = f"{report.records} records, chain intact" + (
        f", {report.signed} signed by the given key" if key is not None else ""
    )
    if report.missing:
        flags = " and ".join(_ANCHOR_FLAGS[a][0] for a in report.missing)
        risks = "; ".join(_ANCHOR_FLAGS[a][1] for a in report.missing)
        print(
            f"{log}: UNVERIFIED: {checked}, but {risks}; give {flags}, or --config "
            "participant.toml",
            file=sys.stderr,
        )
        return UNVERIFIED_EXIT
    print(
        f"verified: {checked}, every receipt matches (the last names line "
        f"{report.last_receipt}; lines after it are vouched for by their signatures only)"
    )
    return 0


def _fetch_receipts(config: ParticipantConfig) -> list[dict[str, Any]]:
    """The participant's receipts from its coordinator (authenticated with its own token)."""
    response = httpx.get(
        f"{config.coordinator_url}/api/v1/audit/heads/{config.id}",
        headers=config.auth_headers, timeout=30.0, verify=config.tls.httpx_verify(),
    )
    if response.status_code != 200:
        raise ValueError(
            f"{config.coordinator_url} did not hand out the receipts of {config.id!r}: "
            f"HTTP {response.status_code}"
        )
    receipts: list[dict[str, Any]] = response.json()
    return receipts
