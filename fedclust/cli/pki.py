"""``fedclust pki init-ca|issue``: a federation CA and its certificates (:mod:`fedclust.pki`)."""

from __future__ import annotations

import argparse


def add_arguments(pki: argparse.ArgumentParser) -> None:
    from fedclust.pki import CA_DAYS, ISSUE_DAYS

    pki.description = (
        "Create a federation CA and issue certificates for the services and the "
        "participants (PEM files; keys are written 0600, files never overwritten)."
    )
    actions = pki.add_subparsers(dest="action", required=True)
    init = actions.add_parser(
        "init-ca", help="create ca.pem and ca-key.pem",
        description="Create a self-signed CA certificate and key in --out.",
    )
    init.add_argument("--out", required=True, metavar="DIR", help="folder to write to")
    init.add_argument("--name", default="fedclust federation CA", help="the CA's common name")
    init.add_argument(
        "--days", type=int, default=CA_DAYS, help=f"validity in days (default {CA_DAYS})"
    )
    issue = actions.add_parser(
        "issue", help="issue NAME.pem and NAME-key.pem",
        description="Issue a certificate for a service or a participant (common name and DNS "
        "name NAME; usable as server and as client certificate). A participant's certificate "
        "must be issued under its participant id.",
    )
    issue.add_argument("name", metavar="NAME", help="a participant id or a host name")
    issue.add_argument("--ca", required=True, metavar="DIR", help="folder of ca.pem, ca-key.pem")
    issue.add_argument("--out", required=True, metavar="DIR", help="folder to write to")
    issue.add_argument(
        "--dns", action="append", default=[], metavar="NAME",
        help="another DNS name of a server (repeatable), e.g. localhost",
    )
    issue.add_argument(
        "--ip", action="append", default=[], metavar="ADDRESS",
        help="an IP address of a server (repeatable), e.g. 127.0.0.1",
    )
    issue.add_argument(
        "--days", type=int, default=ISSUE_DAYS,
        help=f"validity in days (default {ISSUE_DAYS}, at most the CA's)",
    )


def run(args: argparse.Namespace) -> int:
    from fedclust import pki

    if args.action == "init-ca":
        files = pki.init_ca(args.out, name=args.name, days=args.days)
    else:
        files = pki.issue(
            args.name, args.ca, args.out, dns=args.dns, ips=args.ip, days=args.days
        )
    print(f"wrote {files.certificate} and {files.key}")
    return 0
