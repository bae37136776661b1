"""``fedclust pki init-ca|issue|export-p12``: a federation CA and its certificates
(:mod:`fedclust.pki`)."""

from __future__ import annotations

import argparse
import getpass
import sys
from pathlib import Path

_P12_HELP = (
    "a file whose first line is the passphrase of NAME.p12 (without it the passphrase is "
    "asked on the terminal)"
)


def add_arguments(pki: argparse.ArgumentParser) -> None:
    from fedclust.pki import CA_DAYS, ISSUE_DAYS

    pki.description = (
        "Create a federation CA and issue certificates for the services and the "
        "participants (PEM files; keys are written 0600, files never overwritten), and "
        "PKCS#12 files of them for browsers."
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
    issue.add_argument(
        "--p12", action="store_true",
        help="also write NAME.p12: the certificate, its key and the CA certificate, encrypted "
        "with a passphrase, to import into a browser (the dashboard under mutual TLS)",
    )
    issue.add_argument("--p12-passphrase-file", metavar="FILE", help=_P12_HELP)
    export = actions.add_parser(
        "export-p12", help="write NAME.p12 from NAME.pem and NAME-key.pem",
        description="Bundle an issued certificate, its key and the CA certificate into "
        "NAME.p12 (PKCS#12, encrypted with a passphrase), to import into a browser.",
    )
    export.add_argument("name", metavar="NAME", help="the certificate's name")
    export.add_argument("--ca", required=True, metavar="DIR", help="folder of ca.pem")
    export.add_argument(
        "--out", required=True, metavar="DIR",
        help="folder of NAME.pem and NAME-key.pem, where NAME.p12 is written",
    )
    export.add_argument("--p12-passphrase-file", metavar="FILE", help=_P12_HELP)


def _passphrase(path: str | None) -> bytes:
    """The passphrase of a .p12: the first line of ``path``, or typed twice on a terminal."""
    if path is not None:
        try:
            lines = Path(path).read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"--p12-passphrase-file {path}: {exc}") from None
        return (lines[0] if lines else "").encode()
    if not sys.stdin.isatty():
        raise ValueError(
            "no terminal to ask the .p12 passphrase on; give --p12-passphrase-file FILE."
        )
    first = getpass.getpass("Passphrase for the .p12: ")
    if getpass.getpass("The same passphrase again: ") != first:
        raise ValueError("the two passphrases differ; nothing was written.")
    return first.encode()


def run(args: argparse.Namespace) -> int:
    from fedclust import pki

    if args.action == "init-ca":
        files = pki.init_ca(args.out, name=args.name, days=args.days)
    elif args.action == "export-p12":
        passphrase = _passphrase(args.p12_passphrase_file)
        print(f"wrote {pki.export_p12(args.name, args.ca, args.out, passphrase)}")
        return 0
    else:
        if args.p12_passphrase_file is not None and not args.p12:
            raise ValueError("--p12-passphrase-file is for --p12; add --p12 or leave it out.")
        passphrase = _passphrase(args.p12_passphrase_file) if args.p12 else b""
        if args.p12:
            pki.check_p12_passphrase(passphrase)  # before anything is written
        files = pki.issue(
            args.name, args.ca, args.out, dns=args.dns, ips=args.ip, days=args.days
        )
        if args.p12:
            print(f"wrote {pki.export_p12(args.name, args.ca, args.out, passphrase)}")
    print(f"wrote {files.certificate} and {files.key}")
    return 0
