"""The ``fedclust`` command line.

- ``fedclust simulate`` runs a federated K sweep in process over built-in data, a shared
  dataset or a user's file; ``--json`` prints one JSON document instead of the table.
- ``fedclust coordinator serve``, ``fedclust counter serve`` and ``fedclust participant run``
  run the three service roles from their TOML configs; ``fedclust coordinator migrate`` and
  ``fedclust counter migrate`` upgrade a service's database schema (:mod:`infra.schema`).
- ``fedclust participant assign`` labels a participant's own rows with a finished job's centers,
  computed locally (:mod:`fedclust.assign`).
- ``fedclust job submit|status|result|cancel`` are the analyst's calls to a coordinator.
- ``fedclust demo`` runs a whole federation on loopback (see :mod:`fedclust.demo`).
- ``fedclust audit verify|show LOG`` check and summarise a participant's audit log
  (:mod:`participant.audit`).
- ``fedclust pki init-ca|issue`` create a federation CA and its certificates (:mod:`fedclust.pki`).
- ``fedclust federation invite|revoke|audit`` are an admin analyst's membership calls, and
  ``fedclust participant enrol --invite INVITE`` redeems an invite
  (:mod:`participant.enrolment`): organisations join and leave without a restart.

Exit status: 0 on success, 1 when a followed job fails or is cancelled or an audit log's chain
is broken, 2 on a usage, input or HTTP error (the server's detail is printed), 3 when an audit
log's chain is intact but unverified (``audit verify`` without the key material it needs).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import logging
import signal
import sys
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, NoReturn

import httpx
import numpy as np
from pydantic import ValidationError

from fedclust.client import (
    AnalystClient,
    AnalystConfig,
    ApiError,
    format_progress,
)
from fedclust.coordinator.sweep import ALGORITHMS, PLAIN_ONLY
from fedclust.core.errors import ProtocolError, RefusedError
from fedclust.data.federations import SYNTHETIC, build_federation
from fedclust.data.loaders import DataWarning
from fedclust.deep_simulate import DEEP_ALGORITHMS
from fedclust.exports import feature_names, with_feature_names, write_exports
from fedclust.infra.logformat import ENV_VAR, FORMATS, configure_logging
from fedclust.progress import SweepProgress
from fedclust.protocol.wire.messages import (
    DisclosureLedger,
    DistillParams,
    FedCRefParams,
    JobCreate,
    JobPublic,
    ResultDocument,
    WireArray,
)
from fedclust.report import format_job_list, format_result
from fedclust.simulate import job_spec, simulate

if TYPE_CHECKING:
    from fedclust.counting.settings import CountingSettings
    from fedclust.participant.config import ParticipantConfig

PROTECTION_CHOICES = ("masking", "paillier", "none")
PROTECTION_HELP = (
    "how every sum-type statistic travels: masking (pairwise masking, the default), paillier "
    "(encrypted to the counting service's key) or none (in the clear, as in the papers; "
    "fedfcm-avg and kfed need none)"
)

def _int_pair(text: str, example: str) -> tuple[int, int]:
    """Parse ``A:B`` into (A, B)."""
    try:
        lo_text, hi_text = text.split(":")
        return int(lo_text), int(hi_text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            f"expected A:B with integers A <= B, e.g. {example}; got {text!r}"
        ) from exc


def _k_range(text: str) -> list[int]:
    """Parse ``A:B`` (inclusive) into [A, ..., B]."""
    lo, hi = _int_pair(text, "2:8")
    if not 2 <= lo <= hi:
        raise argparse.ArgumentTypeError(f"expected 2 <= A <= B; got {text!r}")
    return list(range(lo, hi + 1))


def _columns(text: str) -> list[str]:
    return [c.strip() for c in text.split(",") if c.strip()]


def _version() -> str:
    try:
        return importlib.metadata.version("fedclust")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors: the command, what is wrong, where to read more."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="fedclust",
        description="Federated cluster analysis without pooling data.",
    )
    parser.add_argument("--version", action="version", version=f"fedclust {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    sim = sub.add_parser(
        "simulate",
        help="run a federated K sweep in process",
        description=(
            "Run a federated clustering algorithm over participant datasets in one process, "
            "through the same participant and coordinator functions as the service, and "
            "score every K with FedFuzzDB (Stallmann & Wilbik 2022); or run a model-based "
            "algorithm (FedCRef, clustered federated distillation) on simulated image-holding "
            "participants and report the groups found."
        ),
    )
    source = sim.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--dataset",
        metavar="NAME",
        help=f"built-in data ({', '.join(SYNTHETIC)}) or a shared dataset "
        "(xclara, s-set1, g2-D-S, pendigits, waveform, bank)",
    )
    source.add_argument("--data", metavar="PATH", help="a CSV, gzip CSV or ARFF file")
    sim.add_argument("--split-by", metavar="COLUMN", help="one participant per value of COLUMN")
    sim.add_argument("--columns", metavar="A,B,...", type=_columns, help="feature columns")
    sim.add_argument("--label-column", metavar="COLUMN", help="ground truth, for evaluation only")
    sim.add_argument(
        "--missing", choices=("fail", "drop"), default="fail",
        help="a blank, NA or NaN in a feature column: fail (default) or drop its rows",
    )
    sim.add_argument(
        "--decimal", choices=(".", ","), default=".",
        help="the decimal mark of --data (',' for 3,14; fields then separated by ';' or TAB)",
    )
    sim.add_argument(
        "--encoding", default="utf-8", metavar="NAME",
        help="the text encoding of --data (default utf-8), e.g. latin-1",
    )
    sim.add_argument("--participants", metavar="P", type=int, help="number of participants")
    sim.add_argument(
        "--split", choices=("uniform", "iid", "dirichlet"), default="uniform",
        help="how a table is split into participants (default: uniform)",
    )
    sim.add_argument(
        "--alpha", type=float,
        help="Dirichlet concentration (default 0.5); for fedcref: the association percentile "
        "of eq. 2 (default 75)",
    )
    sim.add_argument("--beta", type=float, default=1.0, help="garst-grid locality beta")
    sim.add_argument(
        "--algorithm", required=True, choices=(*ALGORITHMS, *DEEP_ALGORITHMS),
        help="the clustering algorithm; fedcref and fed-distill are model-based (need "
        "fedclust[deep]; see their argument group)",
    )
    ks = sim.add_mutually_exclusive_group()
    ks.add_argument("--k", type=int, metavar="K", help="a single number of clusters (>= 2)")
    ks.add_argument("--k-range", type=_k_range, metavar="A:B", help="sweep K from A to B")
    sim.add_argument("--seed", type=int, help="seed of every algorithmic random choice")
    sim.add_argument("--standardise", action="store_true", help="federated z-scores first")
    sim.add_argument("--local", action="store_true", help="also report each local-only K")
    sim.add_argument(
        "--local-range", type=_k_range, metavar="A:B", help="local sweep range (default: K range)"
    )
    sim.add_argument("--m", type=float, default=2.0, help="fuzzifier (default 2)")
    sim.add_argument("--eps", type=float, default=1e-3, help="stopping threshold (default 1e-3)")
    sim.add_argument("--max-rounds", type=int, default=100)
    sim.add_argument("--gamma", type=float, default=1.0, help="ffcm client sampling fraction")
    sim.add_argument(
        "--protection", choices=PROTECTION_CHOICES, default="masking",
        help=PROTECTION_HELP,
    )
    sim.add_argument(
        "--min-cohort", type=int, default=3,
        help="participants the counting service needs before releasing the total (default 3)",
    )
    _add_bound_arguments(sim)
    _add_release_argument(sim)
    sim.add_argument(
        "--transport", choices=("direct", "asgi"), default="direct",
        help="direct: call the participants' functions in process (default); asgi: run the "
        "real coordinator, counting service and agents in one process over in-process HTTP "
        "(the real protocol without sockets; ground-truth ARI is then not reported)",
    )
    sim.add_argument("--json", action="store_true", help="print one JSON document")
    _add_out_argument(sim)
    _add_deep_arguments(sim)
    sim.set_defaults(simulate_parser=sim)
    _add_service_parsers(sub)
    _add_job_parsers(sub)
    _add_demo_parser(sub)
    _add_audit_parser(sub)
    _add_plot_parser(sub)
    _add_pki_parser(sub)
    _add_federation_parser(sub)
    return parser


def _add_bound_arguments(parser: argparse.ArgumentParser) -> None:
    """``--max-rows`` and ``--value-bound``: optional overrides of the declared bounds."""
    parser.add_argument(
        "--max-rows", type=int, metavar="N",
        help="bound on any participant's row count for the fixed-point encoding of protected "
        "sums (default: the largest row_bound the participants declare; a smaller value fails)",
    )
    parser.add_argument(
        "--value-bound", type=float, metavar="B",
        help="bound on |x| of every value the algorithms see, after standardisation if asked "
        "(default: derived from the participants' declared value bounds; a smaller value fails)",
    )


def _add_release_argument(parser: argparse.ArgumentParser) -> None:
    """``--min-center-contributors``: the job's release rule for centers; and
    ``--masking-graph``: whom each participant masks with."""
    parser.add_argument(
        "--masking-graph", choices=("auto", "full"), default="auto",
        help="masking partners: auto (SecAgg+: O(log n) neighbours in large cohorts) or full "
        "(every pair, Bonawitz et al.)",
    )
    parser.add_argument(
        "--min-center-contributors", type=int, default=1, metavar="N",
        help="withhold a center that fewer than N participants stand behind (default 1: "
        "release every center, as the papers do); ffcm, fedfcm and fkm",
    )


def _widths(text: str) -> tuple[int, ...]:
    """Parse ``H,H,...`` (1 to 8 positive layer widths)."""
    try:
        widths = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected widths like 100,64,32; got {text!r}") from None
    if not 1 <= len(widths) <= 8 or min(widths) < 1:
        raise argparse.ArgumentTypeError(f"expected 1 to 8 widths >= 1; got {text!r}")
    return widths


def _class_range(text: str) -> tuple[int, int]:
    """Parse ``A:B`` (inclusive, 1 <= A <= B <= 10) into (A, B)."""
    lo, hi = _int_pair(text, "2:4")
    if not 1 <= lo <= hi <= 10:
        raise argparse.ArgumentTypeError(f"expected 1 <= A <= B <= 10; got {text!r}")
    return lo, hi


_DISTILL = ("fed-distill",)
_FEDCREF = ("fedcref",)
# The model-based flags: (flag, type or choices, metavar, algorithms that take it, help).
# Their argparse default is None; deep_simulate resolves the defaults the help states.
_DEEP_OPTIONS: tuple[tuple[str, Any, str | None, tuple[str, ...], str], ...] = (
    ("--samples-per-class", int, "N", DEEP_ALGORITHMS,
     "training images per class per client (default 30)"),
    ("--groups", int, "G", _DISTILL, "true groups of clients (default 3)"),
    ("--clients-per-group", int, "C", _DISTILL, "clients per group (default 4)"),
    ("--classes-per-group", int, "K", _DISTILL,
     "classes per group, a distinct random set each (default 3)"),
    ("--public-per-class", int, "N", _DISTILL, "unlabelled public images per class (default 20)"),
    ("--distance-threshold", float, "D", _DISTILL,
     "Ward merge distance at which grouping stops (default 2)"),
    ("--temperature", float, "T", _DISTILL, "distillation temperature (default 0.1)"),
    ("--distill-epochs", int, "E", _DISTILL,
     "distillation epochs (default 30 with an MLP on digits; 50, the paper's, with a CNN on "
     "mnist)"),
    ("--mode", ("clustered", "global", "local"), None, _DISTILL,
     "clustered (the paper, default), global (FedDF-style, one teacher) or local (no "
     "sharing)"),
    ("--clients", int, "C", _FEDCREF, "clients (default 8)"),
    ("--classes-per-client", _class_range, "A:B", _FEDCREF,
     "each client holds A..B random classes (default 2:4)"),
    ("--dirtiness", float, "D", _FEDCREF,
     "probability of mislabelling a row in the simulated initial clustering (default 0)"),
    ("--initial", ("dirty", "kmeans"), None, _FEDCREF,
     "initial local clustering: dirty (simulated from the labels, default) or kmeans "
     "(k-means on an autoencoder code, K_i by silhouette)"),
    ("--theta", float, "THETA", _FEDCREF,
     "association threshold of eq. 2 (default 0.2, the paper's, on mnist; 0.55 on digits, "
     "whose clusters of tens of rows score higher)"),
    ("--tau", float, "TAU", _FEDCREF,
     "a client freezes when consecutive assignments agree >= tau (default 0.8)"),
    ("--fedavg-rounds", int, "R", _FEDCREF, "FedAvg rounds per group per iteration (default 15)"),
    ("--max-iterations", int, "I", _FEDCREF, "the most iterations (default 3)"),
    ("--refine-with", ("groups", "all"), None, _FEDCREF,
     "federated models a client refines with: every group's (default, the authors' code) "
     "or its own groups' only"),
    ("--local-epochs", int, "E", _FEDCREF,
     "local autoencoder training epochs, early stopping (default 60; the paper's 20 suit its "
     "clusters of thousands of images, smaller ones need more steps)"),
    ("--param-bound", float, "B", _FEDCREF,
     "with masking: declared bound on |model parameter| (default 100); the masked field "
     "n*theta is bounded by B times the largest client's rows"),
)
# dest -> algorithms that take it.
_DEEP_FLAGS = {flag[2:].replace("-", "_"): owners for flag, _, _, owners, _ in _DEEP_OPTIONS}
# The sweep flags the model-based algorithms do not take (dest -> flag).
_SWEEP_ONLY = {
    "data": "--data", "split_by": "--split-by", "columns": "--columns",
    "label_column": "--label-column", "participants": "--participants", "split": "--split",
    "beta": "--beta", "k": "--k", "k_range": "--k-range", "standardise": "--standardise",
    "local": "--local", "local_range": "--local-range", "m": "--m", "eps": "--eps",
    "max_rounds": "--max-rounds", "gamma": "--gamma", "min_cohort": "--min-cohort",
    "transport": "--transport", "max_rows": "--max-rows", "value_bound": "--value-bound",
}


def _add_deep_arguments(sim: argparse.ArgumentParser) -> None:
    deep = sim.add_argument_group(
        "model-based algorithms (fedcref, fed-distill)",
        "Need PyTorch (fedclust[deep]). Data: --dataset digits (scikit-learn's 8x8 digits; "
        "small models and few epochs, each default run well under a minute) or --dataset "
        "mnist (../shared/datasets/mnist). The federation is simulated from the labelled "
        "images; --seed (default 0) fixes data split, training and grouping. --protection "
        "masking (default) masks every group sum of >= 3 members; none sums in the clear. "
        "fedcref also takes --alpha (eq. 2 percentile, default 75). The sweep flags (--k, "
        "--k-range, --data, ...) do not apply.",
    )
    for flag, kind, metavar, owners, text in _DEEP_OPTIONS:
        prefix = "" if len(owners) > 1 else f"{owners[0]}: "
        if isinstance(kind, tuple):
            deep.add_argument(flag, choices=kind, help=prefix + text)
        else:
            deep.add_argument(flag, type=kind, metavar=metavar, help=prefix + text)


def _check_deep_flags(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """Refuse flags that do not apply to the chosen algorithm (clear ValueError)."""
    algorithm = args.algorithm
    flag = {a.dest: a.option_strings[0] for a in parser._actions if a.option_strings}
    for dest, owners in _DEEP_FLAGS.items():
        if getattr(args, dest) is not None and algorithm not in owners:
            raise ValueError(
                f"{flag[dest]} applies only to --algorithm {' or '.join(owners)}, not "
                f"{algorithm}"
            )
    if algorithm not in DEEP_ALGORITHMS:
        if args.k is None and args.k_range is None:
            raise ValueError(f"--algorithm {algorithm} needs --k or --k-range")
        return
    for dest, name in _SWEEP_ONLY.items():
        if getattr(args, dest) != parser.get_default(dest):
            raise ValueError(f"{name} does not apply to --algorithm {algorithm}")
    if args.alpha is not None and algorithm != "fedcref":
        raise ValueError(f"--alpha does not apply to --algorithm {algorithm}")
    if args.protection == "paillier":
        raise ValueError(
            f"--algorithm {algorithm} takes --protection masking or none, not paillier"
        )


def _participant_ids(text: str) -> list[str]:
    ids = _columns(text)
    if not ids:
        raise argparse.ArgumentTypeError("expected ID,ID,... with at least one participant id")
    return ids


_CONFIG_HELP = (
    "TOML config file; FEDCLUST_<TABLE>__<KEY> variables and secret files override it, or "
    "replace it when omitted (deploy/README.md)"
)


def _add_service_parsers(sub: Any) -> None:
    for role, action, helptext in (
        ("coordinator", "serve", "run the coordinator service"),
        ("counter", "serve", "run the counting service (releases only ΣN_l)"),
        ("participant", "run", "run a participant agent next to its data"),
    ):
        role_parser = sub.add_parser(role, help=helptext)
        actions = role_parser.add_subparsers(dest="action", required=True)
        cmd = actions.add_parser(action, help=helptext, description=helptext + ".")
        cmd.add_argument("--config", metavar="FILE", help=_CONFIG_HELP)
        cmd.add_argument(
            "--log-format", choices=FORMATS, default=None,
            help=f"log lines as text or one JSON object each (default: ${ENV_VAR}, else text)",
        )
        if role in ("coordinator", "counter"):
            _add_migrate_parser(actions, role)
        if role == "counter":
            _add_members_parser(actions)
        if role == "participant":
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


def _add_participant_parser(actions: Any) -> None:
    assign = actions.add_parser(
        "assign", help="label this organisation's rows with a finished job's centers",
        description=(
            "Fetch a finished job's centers with this participant's token (one GET; only a "
            "member of the job may) and label the rows of its data file locally: a CSV with "
            "columns row, label and membership_0 .. membership_{K-1} (fuzzy memberships for "
            "ffcm/fedfcm, one-hot for the k-means algorithms). Nothing data-dependent is sent."
        ),
    )
    assign.add_argument("--config", required=True, metavar="FILE", help="participant.toml")
    assign.add_argument("--job", required=True, metavar="ID", help="the finished job's id")
    assign.add_argument("--out", required=True, type=Path, metavar="FILE", help="labels CSV")
    assign.add_argument(
        "--k", type=int, metavar="K", help="the sweep's K to use (default: the selected K)"
    )


def _participant_assign(config: Any, args: argparse.Namespace) -> int:
    from fedclust.assign import assign_job, labels_frame, write_labels

    rows = assign_job(config, args.job, k=args.k)
    if rows.withheld:
        print(
            f"K={rows.k}: centers {rows.withheld} are withheld; label and membership columns "
            f"number the {len(rows.centers)} released centers {rows.centers} in order.",
            file=sys.stderr,
        )
    write_labels(labels_frame(rows), args.out)
    print(f"wrote {args.out} ({len(rows.assignment.labels)} rows, K={rows.k})")
    return 0


# -- membership (issue 11: onboarding without restarts) ------------------------------------------
_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _duration(text: str) -> int:
    """``90s``, ``30m``, ``24h``, ``7d`` (or plain seconds) as seconds."""
    number, unit = (text[:-1], text[-1]) if text[-1:] in _DURATION_UNITS else (text, "s")
    if not number.isdigit() or int(number) == 0:
        raise argparse.ArgumentTypeError(f"expected a duration like 24h, 30m or 7d; got {text!r}")
    return int(number) * _DURATION_UNITS[unit]


def _add_federation_parser(sub: Any) -> None:
    federation = sub.add_parser(
        "federation", help="invite, revoke and audit members (an admin analyst)"
    )
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


def _federation(args: argparse.Namespace) -> int:
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


def _add_enrol_parser(actions: Any) -> None:
    enrol = actions.add_parser(
        "enrol", help="join a federation with an invite from its admin",
        description=(
            "Redeem a one-time invite: register this organisation's identity key with the "
            "coordinator named in participant.toml and store the bearer token received in "
            "<state_dir>/participant.token (0600), which `participant run` reads when the "
            "config has no token. The config file is not changed."
        ),
    )
    enrol.add_argument("--invite", required=True, metavar="INVITE", help="the one-time invite")
    enrol.add_argument("--config", required=True, metavar="FILE", help="participant.toml")


def _participant_enrol(args: argparse.Namespace) -> int:
    from fedclust.participant.enrolment import enrol, join_target

    target = join_target(args.config)
    path = enrol(target, args.invite)  # EnrolmentError is a RuntimeError: one line, exit 2
    print(f"participant {target.id} enrolled; its token is in {path}")
    return 0


def _add_job_parsers(sub: Any) -> None:
    job = sub.add_parser("job", help="submit and follow jobs at a coordinator (analyst)")
    actions = job.add_subparsers(dest="action", required=True)
    config_help = (
        "analyst client config ([analyst] coordinator_url, token); default: the environment "
        "variables FEDCLUST_COORDINATOR_URL and FEDCLUST_TOKEN"
    )
    submit = actions.add_parser(
        "submit", help="create a job",
        description="Create a federated clustering job at the coordinator.",
    )
    submit.add_argument("--config", metavar="CLIENT.toml", help=config_help)
    submit.add_argument(
        "--participants", required=True, type=_participant_ids, metavar="ID,ID,...",
        help="the enrolled participants taking part, in this order",
    )
    submit.add_argument(
        "--algorithm", required=True, choices=(*ALGORITHMS, "fed-distill", "fedcref"),
        help="a K-sweep algorithm; fed-distill (clustered federated distillation, Yang & "
        "Tae 2023: needs --public and --n-classes, takes no K; participants need a "
        "[data] label_column and the fedclust[deep] extra); or fedcref (Federated "
        "Cluster-Wise Refinement, Nardi et al.: takes no K; participants need rows scaled "
        "to [0, 1] and the fedclust[deep] extra)",
    )
    ks = submit.add_mutually_exclusive_group()
    ks.add_argument(
        "--k", type=int, metavar="K", help="a single number of clusters (>= 2; the sweeps)"
    )
    ks.add_argument("--k-range", type=_k_range, metavar="A:B", help="sweep K from A to B")
    submit.add_argument(
        "--seed", type=int, help="seed of every algorithmic random choice (default: drawn)"
    )
    distill = submit.add_argument_group("fed-distill")
    distill.add_argument(
        "--public", type=Path, metavar="FILE.npy",
        help="the public unlabelled set, a 2-D .npy array (n_public, n_features) scaled as "
        "the participants' rows",
    )
    distill.add_argument("--n-classes", type=int, metavar="C", help="labels are 0..C-1")
    distill.add_argument(
        "--distance-threshold", type=float, default=2.0,
        help="Ward merge distance at which grouping stops (default 2, the paper's)",
    )
    distill.add_argument(
        "--temperature", type=float, default=0.1, help="distillation temperature (default 0.1)"
    )
    distill.add_argument(
        "--distill-epochs", type=int, default=30, help="distillation epochs (default 30)"
    )
    distill.add_argument(
        "--classifier", choices=("mlp", "cnn"), default="mlp",
        help="local classifier (cnn: square images only; default mlp)",
    )
    distill.add_argument(
        "--mode", choices=("clustered", "global", "local"), default="clustered",
        help="clustered (the paper), global (one teacher) or local (no sharing)",
    )
    fedcref = submit.add_argument_group(
        "fedcref", "Defaults are the paper's (Nardi, Valerio & Passarella)."
    )
    fedcref.add_argument(
        "--hidden", type=_widths, default=(100, 64, 32), metavar="H,H,...",
        help="autoencoder encoder widths, decoder mirrored (default 100,64,32)",
    )
    fedcref.add_argument(
        "--initial", choices=("kmeans", "labels"), default="kmeans",
        help="initial local clustering: kmeans (k-means on an autoencoder code, default) or "
        "labels (each participant's own [data] label_column)",
    )
    fedcref.add_argument(
        "--local-k", type=int, metavar="K",
        help="every participant's K_i for kmeans (default: chosen by the silhouette)",
    )
    fedcref.add_argument(
        "--k-max", type=int, default=6, help="largest K_i the silhouette tries (default 6)"
    )
    fedcref.add_argument(
        "--epochs", type=int, default=20,
        help="local training epochs, early stopping (default 20, the paper's, for clusters "
        "of thousands of rows; clusters of tens to hundreds need ~60)",
    )
    fedcref.add_argument(
        "--alpha", type=float, default=75.0, help="eq. 2 percentile (default 75)"
    )
    fedcref.add_argument(
        "--theta", type=float, default=0.2,
        help="eq. 2 association threshold (default 0.2; clusters of tens of rows need ~0.55)",
    )
    fedcref.add_argument(
        "--tau", type=float, default=0.8,
        help="a participant freezes when consecutive assignments agree >= tau (default 0.8)",
    )
    fedcref.add_argument(
        "--fedavg-rounds", type=int, default=15, help="FedAvg rounds per group (default 15)"
    )
    fedcref.add_argument(
        "--fedavg-epochs", type=int, default=2, help="epochs per FedAvg round (default 2)"
    )
    fedcref.add_argument(
        "--max-iterations", type=int, default=10, help="the most iterations (default 10)"
    )
    fedcref.add_argument(
        "--refine-with", choices=("groups", "all"), default="all",
        help="federated models a participant refines with: every group's (default, the "
        "authors' code) or its own groups' only",
    )
    submit.add_argument("--standardise", action="store_true", help="federated z-scores first")
    submit.add_argument(
        "--local-range", type=_k_range, metavar="A:B",
        help="also ask each participant's local-only K over A:B",
    )
    submit.add_argument("--m", type=float, default=2.0, help="fuzzifier (default 2)")
    submit.add_argument(
        "--eps", type=float, default=1e-3, help="stopping threshold (default 1e-3)"
    )
    submit.add_argument("--max-rounds", type=int, default=100)
    submit.add_argument("--gamma", type=float, default=1.0, help="ffcm client sampling fraction")
    submit.add_argument(
        "--protection", choices=PROTECTION_CHOICES, default="masking",
        help=PROTECTION_HELP,
    )
    _add_bound_arguments(submit)
    _add_release_argument(submit)
    submit.add_argument(
        "--follow", action="store_true",
        help="show live progress until the job ends, then print its result",
    )
    submit.add_argument("--json", action="store_true", help="print JSON documents")
    listing = actions.add_parser(
        "list", help="list your jobs", description="List the jobs you submitted."
    )
    listing.add_argument("--config", metavar="CLIENT.toml", help=config_help)
    listing.add_argument("--json", action="store_true", help="print one JSON list")
    for name, helptext in (
        ("status", "show a job's state and progress"),
        ("result", "print a finished job's result"),
        ("cancel", "cancel a job"),
    ):
        cmd = actions.add_parser(name, help=helptext, description=helptext + ".")
        cmd.add_argument("job_id", metavar="ID")
        cmd.add_argument("--config", metavar="CLIENT.toml", help=config_help)
        cmd.add_argument("--json", action="store_true", help="print the JSON document")
        if name == "result":
            cmd.add_argument(
                "--disclosures", action="store_true",
                help="print the job's disclosure ledger (what the coordinator learned) as JSON",
            )
            cmd.add_argument(
                "--feature-names", type=_columns, metavar="A,B,...",
                help="name the center columns (the service result carries no names; "
                "default x0..x{D-1})",
            )
            _add_out_argument(cmd)


def _add_out_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out", type=Path, metavar="DIR",
        help="also write sweep.csv, centers.csv and result.json (and .parquet copies when "
        "pyarrow is installed) into DIR",
    )


def _add_plot_parser(sub: Any) -> None:
    plot = sub.add_parser(
        "plot", help="draw a result's K sweep and centers (needs fedclust[plot])",
        description="Draw the FedFuzzDB and silhouette curves over K (selected K and elbow "
        "marked) and the selected K's centers, as PNG and SVG.",
    )
    plot.add_argument("result", type=Path, metavar="RESULT.json",
                      help="a result document (simulate --json, job result --json)")
    plot.add_argument("--out", type=Path, required=True, metavar="DIR",
                      help="directory for k-sweep.png/.svg and centers.png/.svg")
    plot.add_argument("--data", type=Path, metavar="CSV",
                      help="a CSV file whose header names the features: draw it under the "
                      "centers")


def _add_demo_parser(sub: Any) -> None:
    demo = sub.add_parser(
        "demo", help="run a whole federation on loopback: FedFCM + FedFuzzDB K sweep",
        description=(
            "Start a coordinator, a counting service and three participants as separate "
            "processes on loopback, each participant holding its share of the built-in "
            "motivational example; run the FedFCM K sweep 2..8 scored by FedFuzzDB; print "
            "the chosen K, the index per K and the centers; shut everything down."
        ),
    )
    demo.add_argument("--json", action="store_true", help="print the result document")
    demo.add_argument(
        "--workdir", metavar="DIR",
        help="keep configs, data shares, databases and logs here (default: a temporary folder)",
    )
    demo.add_argument(
        "--protection", choices=PROTECTION_CHOICES, default="masking",
        help=PROTECTION_HELP,
    )
    demo.add_argument("--seed", type=int, default=1, help="data and algorithm seed (default 1)")


def _add_pki_parser(sub: Any) -> None:
    from fedclust.pki import CA_DAYS, ISSUE_DAYS

    pki = sub.add_parser(
        "pki", help="a small certificate authority for TLS and mutual TLS",
        description="Create a federation CA and issue certificates for the services and the "
        "participants (PEM files; keys are written 0600, files never overwritten).",
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


def _pki(args: argparse.Namespace) -> int:
    from fedclust import pki

    if args.action == "init-ca":
        files = pki.init_ca(args.out, name=args.name, days=args.days)
    else:
        files = pki.issue(
            args.name, args.ca, args.out, dns=args.dns, ips=args.ip, days=args.days
        )
    print(f"wrote {files.certificate} and {files.key}")
    return 0


def _add_audit_parser(sub: Any) -> None:
    audit = sub.add_parser(
        "audit", help="check or summarise a participant's audit log",
        description="A participant's audit log records everything its agent sent: to whom, "
        "which fields, their shapes and protection, and the SHA-256 of the bytes.",
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


def _audit(args: argparse.Namespace) -> int:
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


#: The exit status of `fedclust audit verify` for an intact chain without the key material
#: that would vouch for it.
UNVERIFIED_EXIT = 3
_ANCHOR_FLAGS = {
    "public_key": ("--public-key", "no --public-key: a re-chained or appended log would pass"),
    "receipts": (
        "--receipts", "no --receipts naming a line: a truncated or emptied log would pass"
    ),
}


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


def format_disclosures(ledger: DisclosureLedger) -> str:
    """The disclosure ledger as text: per participant and task kind, fields and shapes."""
    lines = [f"what the coordinator learned in job {ledger.job_id} ({ledger.algorithm}):"]
    for d in ledger.disclosures:
        kinds = d.task_kind if d.reply_kind == d.task_kind else f"{d.task_kind} → {d.reply_kind}"
        parts = []
        for f in d.fields:
            form = "scalar" if f.shapes is None else " ".join(
                "x".join(map(str, s)) or "()" for s in f.shapes
            )
            parts.append(f"{f.name} [{form}] {f.protection}")
        lines.append(f"  {d.participant}  {kinds} ×{d.messages}: {', '.join(parts) or 'nothing'}")
    lines += [f"  note: {n}" for n in ledger.notes]
    return "\n".join(lines)


def _simulate_deep(args: argparse.Namespace) -> int:
    from fedclust import deep_simulate as ds

    given = {dest: getattr(args, dest) for dest, owners in _DEEP_FLAGS.items()
             if args.algorithm in owners and getattr(args, dest) is not None}
    seed = 0 if args.seed is None else args.seed
    if args.algorithm == "fedcref":
        if args.alpha is not None:
            given["alpha"] = args.alpha
        doc = ds.simulate_fedcref(args.dataset, protection=args.protection, seed=seed, **given)
    else:
        doc = ds.simulate_fed_distill(
            args.dataset, protection=args.protection, seed=seed, **given
        )
    if args.json:
        print(doc.model_dump_json(indent=2))
    else:
        print(ds.format_deep_result(doc, title="fedclust simulate"))
    return 0


def _simulate(args: argparse.Namespace) -> int:
    _check_deep_flags(args, args.simulate_parser)
    if args.algorithm in DEEP_ALGORITHMS:
        return _simulate_deep(args)
    federation = build_federation(
        dataset=args.dataset, data=args.data, columns=args.columns, split_by=args.split_by,
        label_column=args.label_column, participants=args.participants, split=args.split,
        alpha=0.5 if args.alpha is None else args.alpha, beta=args.beta, seed=args.seed,
        missing=args.missing, decimal=args.decimal, encoding=args.encoding,
    )
    _check_protection(args)
    ks = [args.k] if args.k is not None else args.k_range
    local_ks = (args.local_range or ks) if args.local else None
    params: dict[str, Any] = {
        "algorithm": args.algorithm, "ks": ks, "seed": args.seed,
        "standardise": args.standardise, "local_ks": local_ks, "m": args.m, "eps": args.eps,
        "max_rounds": args.max_rounds, "gamma": args.gamma, "protection": args.protection,
        "max_rows": args.max_rows, "value_bound": args.value_bound,
        "min_center_contributors": args.min_center_contributors,
        "masking_graph": args.masking_graph,
    }
    spec = _valid_job(lambda: job_spec(federation, **params))
    if args.transport == "asgi":
        from fedclust.inprocess import run_in_process

        doc = run_in_process(federation, spec, min_cohort=args.min_cohort)
    else:
        with SweepProgress(spec.ks, command="fedclust simulate") as progress:
            doc = simulate(
                federation, min_cohort=args.min_cohort, on_progress=progress.simulation,
                **params,
            ).to_document()
    doc = with_feature_names(doc, federation.feature_names)
    if args.out is not None:
        write_exports(doc, args.out)
    if args.json:
        print(doc.model_dump_json(indent=2))
    else:
        print(format_result(doc, title="fedclust simulate"))
    return 0


# -- services ------------------------------------------------------------------------------------
# Seconds uvicorn waits for open requests (participants' long polls) before shutting down.
_GRACEFUL_SHUTDOWN = 3
def _log_to_stderr(args: argparse.Namespace) -> None:
    """Log to stderr as ``--log-format`` (or ``$FEDCLUST_LOG_FORMAT``) says: infra.logformat."""
    configure_logging(args.log_format)


def _coordinator(args: argparse.Namespace) -> int:
    import uvicorn

    from fedclust.coordinator.app import create_app
    from fedclust.coordinator.db import Database
    from fedclust.coordinator.settings import CoordinatorSettings

    settings = CoordinatorSettings.load(args.config)
    with _database_errors(settings.database_url):
        database = Database(settings.database_url)
        try:  # an empty database is created at head; one behind it is refused in one line
            if args.action == "migrate":
                return _migrated("coordinator", settings.database_url, database.migrate())
            database.create_all()
        finally:
            database.dispose()
    _log_to_stderr(args)
    app = create_app(settings)

    class Server(uvicorn.Server):
        """On the exit signal, first end the parked long polls (the broker returns 204
        to them and leaves running jobs resumable), so the graceful shutdown has nothing
        to wait for."""

        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            services = app.state.services
            if services is not None:
                services.broker.close()
            super().handle_exit(sig, frame)

    config = uvicorn.Config(
        app, host=settings.host, port=settings.port, log_level="warning", log_config=None,
        timeout_graceful_shutdown=_GRACEFUL_SHUTDOWN, **settings.tls.uvicorn_options(),
    )
    Server(config).run()
    return 0


def _counter(args: argparse.Namespace) -> int:
    import uvicorn

    from fedclust.counting.app import create_app
    from fedclust.counting.db import migrate_database
    from fedclust.counting.settings import CountingSettings

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
    uvicorn.run(
        app, host=settings.host, port=settings.port, log_level="warning",
        log_config=None,  # uvicorn's records go through _log_to_stderr's format
        timeout_graceful_shutdown=_GRACEFUL_SHUTDOWN, **settings.tls.uvicorn_options(),
    )
    return 0


def _participant(args: argparse.Namespace) -> int:
    from fedclust.participant.agent import AgentError, run_agent
    from fedclust.participant.config import ParticipantConfig
    from fedclust.participant.secure import load_identity
    from fedclust.protocol.wire.secure import b64

    if args.action == "enrol":
        return _participant_enrol(args)
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


# -- analyst ---------------------------------------------------------------------------------------
def _check_protection(args: argparse.Namespace) -> None:
    """Refuse, in one line naming the flag, an algorithm that cannot run protected."""
    if args.algorithm in PLAIN_ONLY and args.protection != "none":
        raise ValueError(
            f"--algorithm {args.algorithm} sends each participant's local centers by design "
            f"and runs only with --protection none, not {args.protection} (the default is "
            "masking)."
        )


def _valid_job(build: Callable[[], JobCreate]) -> JobCreate:
    """``build()``, its validation errors stated in one line without the input values."""
    try:
        return build()
    except ValidationError as exc:
        detail = "; ".join(
            (_flag_of(e["loc"]) + " " if e["loc"] else "")
            + e["msg"].removeprefix("Value error, ").replace("Input should be", "must be")
            for e in exc.errors()
        )
        raise ValueError(f"invalid job: {detail}") from None


def _flag_of(loc: tuple[int | str, ...]) -> str:
    """The command-line flag of a job field (``local_k_range`` → ``--local-range``)."""
    name = str(loc[0])
    flag = {"local_k_range": "--local-range", "local_k": "--local"}.get(
        name, "--" + name.replace("_", "-")
    )
    return flag + "".join(f"[{p}]" for p in loc[1:])


def _job_from_flags(args: argparse.Namespace, participants: Sequence[str]) -> JobCreate:
    """The :class:`JobCreate` of the job flags (shared by ``job submit`` and ``demo``)."""
    k_range = None if args.k_range is None else (args.k_range[0], args.k_range[-1])
    local = None if args.local_range is None else (args.local_range[0], args.local_range[-1])
    _check_protection(args)

    def build() -> JobCreate:
        distill = _distill_from_flags(args) if args.algorithm == "fed-distill" else None
        fedcref = _fedcref_from_flags(args) if args.algorithm == "fedcref" else None
        return JobCreate(
            algorithm=args.algorithm, participants=list(participants), k=args.k,
            k_range=k_range, seed=args.seed, standardise=args.standardise,
            local_k_range=local, m=args.m, eps=args.eps, max_rounds=args.max_rounds,
            gamma=args.gamma, protection=args.protection, value_bound=args.value_bound,
            max_rows=args.max_rows, distill=distill, fedcref=fedcref,
            min_center_contributors=getattr(args, "min_center_contributors", 1),
            masking_graph=getattr(args, "masking_graph", "auto"),
        )

    return _valid_job(build)


def _distill_from_flags(args: argparse.Namespace) -> DistillParams:
    """The ``distill`` block of a fed-distill job from ``--public`` and its flags."""
    path = getattr(args, "public", None)
    if path is None or getattr(args, "n_classes", None) is None:
        raise ValueError("invalid job: fed-distill needs --public FILE.npy and --n-classes")
    try:
        public = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise ValueError(f"--public {path}: not a readable .npy array ({exc})") from None
    if not isinstance(public, np.ndarray) or public.ndim != 2 or not np.issubdtype(
        public.dtype, np.number
    ):
        raise ValueError(f"--public {path}: must hold a 2-D numeric array (n_public, n_features)")
    return DistillParams(
        public=WireArray.of(np.asarray(public, dtype=np.float64)),
        n_classes=args.n_classes, distance_threshold=args.distance_threshold,
        temperature=args.temperature, epochs=args.distill_epochs,
        classifier=args.classifier, mode=args.mode,
    )


def _fedcref_from_flags(args: argparse.Namespace) -> FedCRefParams:
    """The ``fedcref`` block of a fedcref job from its flags."""
    return FedCRefParams(
        hidden=tuple(args.hidden), initial=args.initial, local_k=args.local_k,
        k_max=args.k_max, epochs=args.epochs, alpha=args.alpha, theta=args.theta,
        tau=args.tau, fedavg_rounds=args.fedavg_rounds, fedavg_epochs=args.fedavg_epochs,
        max_iterations=args.max_iterations, refine_with=args.refine_with,
    )


def print_job_result(client: AnalystClient, job: JobPublic, *, as_json: bool) -> int:
    """Print a finished job's result (or its error); the exit status for it."""
    if job.state == "succeeded":
        doc = client.result(job.id)
        title = f"job {job.id}"
        print(doc.model_dump_json(indent=2) if as_json else format_result(doc, title=title))
        return 0
    reason = f": {job.error}" if job.error else ""
    print(f"job {job.id} {job.state}{reason}", file=sys.stderr)
    return 1


def _job(args: argparse.Namespace) -> int:
    config = AnalystConfig.load(args.config)
    with AnalystClient(config) as client:
        if args.action == "submit":
            job = client.submit(_job_from_flags(args, args.participants))
            if not args.follow:
                print(job.model_dump_json(indent=2) if args.json else job.id)
                return 0
            print(f"submitted job {job.id}", file=sys.stderr)
            with SweepProgress(job.spec.ks, command="fedclust job submit") as progress:
                job = client.follow(job.id, on_update=progress.job)
            return print_job_result(client, job, as_json=args.json)
        if args.action == "list":
            print(format_job_list(client.jobs(), as_json=args.json))
            return 0
        if args.action == "status":
            job = client.job(args.job_id)
            if args.json:
                print(job.model_dump_json(indent=2))
            else:
                print(format_progress(job) + (f"\nerror: {job.error}" if job.error else ""))
            return 0
        if args.action == "result":
            if args.disclosures:
                print(client.disclosures(args.job_id).model_dump_json(indent=2))
                return 0
            doc = with_feature_names(client.result(args.job_id), args.feature_names)
            if args.out is not None:
                write_exports(doc, args.out)
            if args.json:
                print(doc.model_dump_json(indent=2))
            else:
                print(format_result(doc, title=f"job {args.job_id}"))
                print(format_disclosures(client.disclosures(args.job_id)))
            return 0
        job = client.cancel(args.job_id)
        print(job.model_dump_json(indent=2) if args.json else f"job {job.id} {job.state}")
        return 0


def _plot(args: argparse.Namespace) -> int:
    from fedclust.plot import MISSING, read_data, write_plots

    if importlib.util.find_spec("matplotlib") is None:
        print(MISSING, file=sys.stderr)
        return 2

    doc = ResultDocument.model_validate_json(args.result.read_text(encoding="utf-8"))
    data = read_data(args.data, feature_names(doc)) if args.data is not None else None
    for path in write_plots(doc, args.out, data):
        print(path)
    return 0


def _demo(args: argparse.Namespace) -> int:
    from fedclust.demo import run_demo

    return run_demo(
        workdir=args.workdir, as_json=args.json, protection=args.protection, seed=args.seed
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``fedclust`` console script; returns the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    handlers: dict[str, Any] = {
        "simulate": _simulate, "coordinator": _coordinator, "counter": _counter,
        "participant": _participant, "job": _job, "demo": _demo, "audit": _audit,
        "pki": _pki, "plot": _plot, "federation": _federation,
    }
    command = " ".join(filter(None, (args.command, getattr(args, "action", None))))

    def show_warning(message: Warning | str, *_: object, **__: object) -> None:
        print(f"fedclust {command}: warning: {message}", file=sys.stderr)

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always", DataWarning)
            warnings.showwarning = show_warning
            status: int = handlers[args.command](args)
    except ApiError as exc:
        print(f"fedclust {command}: error: the coordinator answered {exc}", file=sys.stderr)
        return 2
    except httpx.HTTPError as exc:
        print(f"fedclust {command}: error: {_http_failure(exc)}", file=sys.stderr)
        return 2
    except (
        ValueError, FileNotFoundError, FileExistsError, RefusedError, ProtocolError,
        PermissionError, TimeoutError, RuntimeError,
    ) as exc:
        print(f"fedclust {command}: error: {exc}", file=sys.stderr)
        return 2
    return status


def _http_failure(exc: httpx.HTTPError) -> str:
    """One line for a failed request, naming the URL it could not reach."""
    try:
        url = exc.request.url.copy_with(query=None)
    except RuntimeError:  # no request attached
        return f"{type(exc).__name__}: {exc}"
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
        return f"cannot reach {url} ({exc}): is the service running at that address?"
    return f"{type(exc).__name__} from {url}: {exc}"


if __name__ == "__main__":
    sys.exit(main())
