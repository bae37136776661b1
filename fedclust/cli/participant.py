"""``fedclust participant run|identity|assign|enrol``: the participant agent and its
organisation's own calls."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

from fedclust.cli._service import (
    _CONFIG_HELP,
    _add_check_parser,
    _add_service_actions,
    _checked,
    _log_to_stderr,
)


def add_arguments(command: argparse.ArgumentParser) -> None:
    actions = _add_service_actions(command, "participant", "run")
    identity = actions.add_parser(
        "identity", help="print this organisation's public identity key",
        description=(
            "Print the base64 Ed25519 public key of the participant's identity key file "
            "(created if absent), to give to the other organisations for their [peers] "
            "table."
        ),
    )
    identity.add_argument("--config", metavar="FILE", help=_CONFIG_HELP)
    identity.add_argument(
        "--token-digest", action="store_true",
        help="print the SHA-256 of this participant's token instead (for the counting "
        "operator's `fedclust counter members approve --token-sha256`)",
    )
    _add_participant_parser(actions)
    _add_enrol_parser(actions)
    _add_check_parser(actions, "participant")


def _add_participant_parser(actions: Any) -> None:
    assign = actions.add_parser(
        "assign", help="label this organisation's rows with a finished job's centers",
        description=(
            "Fetch a finished job's centers with this participant's token (one GET; only a "
            "member of the job may) and label the rows of its data file locally: a CSV with "
            "columns row (the row's 0-based index among the file's data rows, rows left out "
            "by [data] missing = \"drop\" counted), the --id-column if given, label and "
            "membership_0 .. membership_{K-1} (fuzzy memberships for ffcm/fedfcm, one-hot "
            "for the k-means algorithms). Nothing data-dependent is sent."
        ),
    )
    assign.add_argument("--config", required=True, metavar="FILE", help="participant.toml")
    assign.add_argument("--job", required=True, metavar="ID", help="the finished job's id")
    assign.add_argument("--out", required=True, type=Path, metavar="FILE", help="labels CSV")
    assign.add_argument(
        "--k", type=int, metavar="K", help="the sweep's K to use (default: the selected K)"
    )
    assign.add_argument(
        "--id-column", metavar="NAME",
        help="a column of the data file (CSV, ARFF or Parquet) whose values to write beside "
        "each row's labels, to join them back on",
    )


def _participant_assign(config: Any, args: argparse.Namespace) -> int:
    from fedclust.assign import assign_job, labels_frame, write_labels

    rows = assign_job(config, args.job, k=args.k, id_column=args.id_column)
    if rows.withheld:
        print(
            f"K={rows.k}: centers {rows.withheld} are withheld; label and membership columns "
            f"number the {len(rows.centers)} released centers {rows.centers} in order.",
            file=sys.stderr,
        )
    write_labels(labels_frame(rows), args.out)
    print(f"wrote {args.out} ({len(rows.assignment.labels)} rows, K={rows.k})")
    return 0


def _add_enrol_parser(actions: Any) -> None:
    enrol = actions.add_parser(
        "enrol", help="join a federation with an invite from its admin",
        description=(
            "Redeem a one-time invite: register this organisation's identity key with the "
            "coordinator the invite names and store the bearer token received in "
            "<state_dir>/participant.token (0600), which `participant run` reads when the "
            "config has no token. The invite carries the coordinator's URL and the SHA-256 "
            "of its CA certificate: the CA is fetched, refused unless it matches, and kept "
            "with the URL in <state_dir> for `participant run` (participant.toml needs no "
            "coordinator_url or [tls] ca). The config file is not changed."
        ),
    )
    enrol.add_argument("--invite", required=True, metavar="INVITE", help="the one-time invite")
    enrol.add_argument("--config", required=True, metavar="FILE", help="participant.toml")


def _participant_enrol(args: argparse.Namespace) -> int:
    from fedclust.participant.enrolment import enrol, join_target

    target = join_target(args.config, invite=args.invite)
    path = enrol(target, args.invite)  # EnrolmentError is a RuntimeError: one line, exit 2
    print(f"participant {target.id} enrolled at {target.coordinator_url}; its token is in {path}")
    return 0


def _participant_problems(config: Any) -> list[str]:
    """What the loader leaves to the agent's start: the data file read as the agent reads it,
    the identity key, the folders and files it writes, certificates' dates."""
    from fedclust.infra.preflight import certificate_problems, writable_paths
    from fedclust.participant.secure import load_identity

    found = certificate_problems(config.tls)
    try:
        config.data.rows()
        config.data.load_labels()
    except (ValueError, OSError) as exc:
        found.append(f"[data] path: {exc}")
    if config.identity_path.exists():
        try:
            load_identity(config.identity_path)
        except (ValueError, OSError) as exc:
            found.append(f"[participant] identity_key: {exc}")
    return found + writable_paths((
        ("[participant] identity_key", config.identity_path),
        ("[participant] state_dir", config.state_dir),
        ("[participant] audit_log", config.audit_path),
    ))


def run(args: argparse.Namespace) -> int:
    from fedclust.participant.agent import AgentError, run_agent
    from fedclust.participant.config import ParticipantConfig
    from fedclust.participant.secure import load_identity
    from fedclust.protocol.wire.secure import b64

    if args.action == "enrol":
        return _participant_enrol(args)
    if args.action == "check":
        return _checked(
            "participant", args.config, lambda: ParticipantConfig.load(args.config),
            _participant_problems,
        )
    config = ParticipantConfig.load(args.config)
    if args.action == "assign":
        return _participant_assign(config, args)
    if args.action == "identity":
        if args.token_digest:
            from fedclust.crypto.tokens import token_sha256

            if config.token is None:
                raise ValueError(f"participant {config.id!r} has no token yet (enrol first)")
            print(f"{config.id} token_sha256 = {token_sha256(config.token)}")
            return 0
        print(f"{config.id} = \"{b64(load_identity(config.identity_path).public_bytes())}\"")
        return 0
    _log_to_stderr(args)
    stop = threading.Event()

    def _on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()
        raise KeyboardInterrupt  # end a long poll now, not when its wait runs out

    previous = signal.signal(signal.SIGTERM, _on_signal)
    try:
        run_agent(config, stop=stop)
    except AgentError as exc:
        print(f"fedclust participant run: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        stop.set()
        logging.getLogger("fedclust.participant").info("participant %s: stopped", config.id)
    finally:
        signal.signal(signal.SIGTERM, previous)
    return 0
