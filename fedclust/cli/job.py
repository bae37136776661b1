"""``fedclust job submit|list|status|attach|logs|result|cancel``: the analyst's calls to a
coordinator.

``job submit --follow`` and ``job attach`` follow a job with one implementation
(:func:`follow_job`); Ctrl-C stops following, not the job.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedclust.cli._common import (
    PROTECTION_CHOICES,
    _add_bound_arguments,
    _add_out_argument,
    _add_release_argument,
    _check_protection,
    _columns,
    _k_range,
    _valid_job,
    protection_help,
    read_init,
)
from fedclust.cli._params import add_params_flags, check_params_flags, params_from_flags
from fedclust.progress import SweepProgress
from fedclust.protocol import algorithms
from fedclust.protocol.wire.messages import JobCreate, WireArray

if TYPE_CHECKING:
    from fedclust.client import AnalystClient
    from fedclust.protocol.wire.messages import DisclosureLedger, JobHistory, JobPublic


def _participant_ids(text: str) -> list[str]:
    ids = _columns(text)
    if not ids:
        raise argparse.ArgumentTypeError("expected ID,ID,... with at least one participant id")
    return ids


def add_arguments(job: argparse.ArgumentParser) -> None:
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
        "--algorithm", required=True, choices=algorithms.names(),
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
    add_params_flags(submit)["fed-distill"].add_argument(
        "--public", type=Path, metavar="FILE.npy",
        help="the public unlabelled set, a 2-D .npy array (n_public, n_features) scaled as "
        "the participants' rows",
    )
    submit.add_argument(
        "--feature-names", type=_columns, metavar="A,B,...",
        help="name the features, in order: every participant refuses the job unless they "
        "are its configured [data] columns; the result, exports and plots use them",
    )
    submit.add_argument(
        "--init", type=Path, metavar="PATH",
        help="initial centers: a CSV (an optional header row naming the features, as "
        "--feature-names) or .npy file of K rows, in the data's units; needs a single --k and "
        "an algorithm that starts from global centers (default: the algorithm's seeding)",
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
        help=protection_help(),
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
        ("attach", "follow a job's progress until it ends, then print its result (as "
         "submit --follow does)"),
        ("logs", "print a job's history: every task, to whom, when it was stored and answered"),
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
                help="name the center columns (default: the names the job declared with "
                "submit --feature-names, else x0..x{D-1})",
            )
            _add_out_argument(cmd)


def _job_from_flags(args: argparse.Namespace, participants: Sequence[str]) -> JobCreate:
    """The :class:`JobCreate` of ``job submit``'s flags."""
    k_range = None if args.k_range is None else (args.k_range[0], args.k_range[-1])
    local = None if args.local_range is None else (args.local_range[0], args.local_range[-1])
    _check_protection(args)

    names = getattr(args, "feature_names", None)
    given = getattr(args, "init", None)
    init = None if given is None else read_init(
        given, algorithm=args.algorithm, k=args.k, n_features=None, feature_names=names
    ).tolist()

    def build() -> JobCreate:
        blocks = _params_blocks(args)
        return JobCreate(
            algorithm=args.algorithm, participants=list(participants), k=args.k,
            k_range=k_range, seed=args.seed, standardise=args.standardise,
            local_k_range=local, m=args.m, eps=args.eps, max_rounds=args.max_rounds,
            gamma=args.gamma, protection=args.protection, value_bound=args.value_bound,
            max_rows=args.max_rows, **blocks,
            min_center_contributors=getattr(args, "min_center_contributors", 1),
            masking_graph=getattr(args, "masking_graph", "auto"),
            feature_names=names, init=init,
        )

    return _valid_job(build)


def _params_blocks(args: argparse.Namespace) -> dict[str, Any]:
    """The job's parameters block of its algorithm, from the flags made for it
    (``fedclust.cli._params``; a ``--preset`` it does not have refused even without a
    block; another algorithm's flag refused); fed-distill's public set from ``--public``."""
    check_params_flags(args, args.algorithm)
    fields = params_from_flags(args, args.algorithm)
    spec = algorithms.get(args.algorithm)
    block, model = spec.params_block, spec.params
    if block is None or model is None:
        return {}
    if args.algorithm == "fed-distill":
        fields["public"] = _public_set(getattr(args, "public", None), fields)
    return {block: model(**fields)}


def _public_set(path: Path | None, fields: dict[str, Any]) -> WireArray:
    """fed-distill's public set from ``--public FILE.npy``."""
    import numpy as np

    if path is None or "n_classes" not in fields:
        raise ValueError("invalid job: fed-distill needs --public FILE.npy and --n-classes")
    try:
        public = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise ValueError(f"--public {path}: not a readable .npy array ({exc})") from None
    if not isinstance(public, np.ndarray) or public.ndim != 2 or not np.issubdtype(
        public.dtype, np.number
    ):
        raise ValueError(f"--public {path}: must hold a 2-D numeric array (n_public, n_features)")
    return WireArray.of(np.asarray(public, dtype=np.float64))


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


def format_history(history: JobHistory) -> str:
    """A job's history as text: one line when it was created, one per task (when it was
    stored, to whom, its number and kind, when its answer was stored or why it timed out),
    its state now. The times are the coordinator's grouped writes (:class:`TaskHistory`)."""
    from fedclust.client import format_progress

    job = history.job
    spec = job.spec
    ks = f"  K={spec.ks[0]}..{spec.ks[-1]}" if spec.ks else ""
    lines = [
        f"job {job.id}  {spec.algorithm}{ks}  participants {', '.join(spec.participants)}  "
        f"protection {spec.protection}",
        f"{_time(job.created_at)}  created",
    ]
    width = max((len(t.participant) for t in history.tasks), default=0)
    for t in history.tasks:
        if t.timed_out is not None:
            outcome = f"timed out: {t.timed_out}"
        else:
            outcome = "answered" if t.answered else "not answered"
        lines.append(
            f"{_time(t.stored_at)}  {t.participant:<{width}}  task {t.task_id:<3d} "
            f"{t.kind:<22} {outcome}"
        )
    reason = f": {job.error}" if job.error else ""
    now = format_progress(job) if job.state == "running" else f"{job.state}{reason}"
    lines.append(f"{_time(job.updated_at)}  {now}")
    return "\n".join(lines)


def _time(at: datetime) -> str:
    """A stored time (UTC) to the millisecond."""
    return at.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def follow_job(client: AnalystClient, job: JobPublic, *, command: str, as_json: bool) -> int:
    """Show ``job``'s progress until it ends, then print its result (``job submit --follow``
    and ``job attach``); the exit status. Ctrl-C stops following only: the job goes on at
    the coordinator, and the interruption carries the command that attaches to it again."""
    try:
        with SweepProgress(job.spec.ks, command=command) as progress:
            job = client.follow(job.id, on_update=progress.job)
    except KeyboardInterrupt as exc:
        exc.add_note(f"the job goes on: fedclust job attach {job.id}")
        raise
    return print_job_result(client, job, as_json=as_json)


def print_job_result(client: AnalystClient, job: JobPublic, *, as_json: bool) -> int:
    """Print a finished job's result (or its error); the exit status for it."""
    from fedclust.report import format_result

    if job.state == "succeeded":
        doc = client.result(job.id)
        title = f"job {job.id}"
        print(doc.model_dump_json(indent=2) if as_json else format_result(doc, title=title))
        return 0
    reason = f": {job.error}" if job.error else ""
    print(f"job {job.id} {job.state}{reason}", file=sys.stderr)
    return 1


def starting(args: argparse.Namespace) -> str | None:
    """The first line of the commands that follow a job (None for the quick calls)."""
    if args.action == "attach":
        return f"following job {args.job_id}"
    if args.action == "submit" and args.follow:
        return f"submitting a {args.algorithm} job over {len(args.participants)} participants"
    return None


def run(args: argparse.Namespace) -> int:
    from fedclust.client import AnalystClient, AnalystConfig, format_progress
    from fedclust.exports import with_feature_names, write_exports
    from fedclust.report import format_job_list, format_result

    config = AnalystConfig.load(args.config)
    with AnalystClient(config) as client:
        if args.action == "submit":
            job = client.submit(_job_from_flags(args, args.participants))
            if not args.follow:
                print(job.model_dump_json(indent=2) if args.json else job.id)
                return 0
            print(f"submitted job {job.id}", file=sys.stderr)
            return follow_job(client, job, command="fedclust job submit", as_json=args.json)
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
        if args.action == "attach":
            job = client.job(args.job_id)
            return follow_job(client, job, command="fedclust job attach", as_json=args.json)
        if args.action == "logs":
            history = client.history(args.job_id)
            print(history.model_dump_json(indent=2) if args.json else format_history(history))
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
