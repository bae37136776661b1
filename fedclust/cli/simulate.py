"""``fedclust simulate``: a federated K sweep, or a model-based algorithm, in one process.

The computing modules are imported by :func:`run`, after :func:`starting` has been announced,
so that ``fedclust simulate --help`` and the first line come at once (but for pydantic: the
model-based algorithms' job parameters are flags made from their parameters models,
``fedclust.cli._params``, with the simulator's defaults, ``fedclust.deep_setups``).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from fedclust.cli._common import (
    PROTECTION_CHOICES,
    _add_bound_arguments,
    _add_out_argument,
    _add_release_argument,
    _check_protection,
    _columns,
    _int_pair,
    _k_range,
    _valid_job,
    protection_help,
    read_init,
)
from fedclust.cli._params import add_params_flags, check_params_flags, params_from_flags, shown
from fedclust.data import SYNTHETIC
from fedclust.deep_setups import DATASETS, SETUPS, job_defaults
from fedclust.protocol import algorithms


def add_arguments(sim: argparse.ArgumentParser) -> None:
    sim.description = (
        "Run a federated clustering algorithm over participant datasets in one process, "
        "through the same participant and coordinator functions as the service, and "
        "score every K with FedFuzzDB (Stallmann & Wilbik 2022); or run a model-based "
        "algorithm (FedCRef, clustered federated distillation) on simulated image-holding "
        "participants and report the groups found."
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
        "--algorithm", required=True, choices=algorithms.names(),
        help="the clustering algorithm; fedcref and fed-distill are model-based (need "
        "fedclust[deep]; see their argument group)",
    )
    ks = sim.add_mutually_exclusive_group()
    ks.add_argument("--k", type=int, metavar="K", help="a single number of clusters (>= 2)")
    ks.add_argument("--k-range", type=_k_range, metavar="A:B", help="sweep K from A to B")
    sim.add_argument(
        "--seed", type=int,
        help="seed of the data split and every algorithmic random choice (default: drawn "
        "and recorded in the result, so that --seed with it replays the run; 0 for the "
        "model-based algorithms)",
    )
    sim.add_argument(
        "--init", type=Path, metavar="PATH",
        help="initial centers: a CSV (an optional header row naming the features) or .npy "
        "file of K rows by the data's D columns, in the data's units; needs a single --k and "
        "an algorithm that starts from global centers (default: the algorithm's seeding)",
    )
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
        help=protection_help(),
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


def _class_range(text: str) -> tuple[int, int]:
    """Parse ``A:B`` (inclusive, 1 <= A <= B <= 10) into (A, B)."""
    lo, hi = _int_pair(text, "2:4")
    if not 1 <= lo <= hi <= 10:
        raise argparse.ArgumentTypeError(f"expected 1 <= A <= B <= 10; got {text!r}")
    return lo, hi


_DISTILL = ("fed-distill",)
_FEDCREF = ("fedcref",)
_MODEL = algorithms.names("model")
# The simulator's own flags of the model-based algorithms (its federation and device; the
# job's parameters are the flags made from the parameters models, fedclust.cli._params):
# (flag, type, metavar, algorithms that take it, help). Their argparse default is None;
# deep_simulate resolves the defaults the help states (fedclust.deep_setups.SETUPS).
_DEEP_OPTIONS: tuple[tuple[str, Any, str, tuple[str, ...], str], ...] = (
    ("--device", str, "DEVICE", _MODEL,
     "where the participants train: auto (a CUDA GPU when torch sees one, else the CPU; "
     "default), cpu, cuda or cuda:N"),
    ("--samples-per-class", int, "N", _MODEL,
     "training images per class per client (default 30)"),
    ("--groups", int, "G", _DISTILL, "true groups of clients (default 3)"),
    ("--clients-per-group", int, "C", _DISTILL, "clients per group (default 4)"),
    ("--classes-per-group", int, "K", _DISTILL,
     "classes per group, a distinct random set each (default 3)"),
    ("--public-per-class", int, "N", _DISTILL, "unlabelled public images per class (default 20)"),
    ("--clients", int, "C", _FEDCREF, "clients (default 8)"),
    ("--classes-per-client", _class_range, "A:B", _FEDCREF,
     "each client holds A..B random classes (default 2:4)"),
    ("--dirtiness", float, "D", _FEDCREF,
     "probability of mislabelling a row of --initial labels (default 0)"),
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
    "init": "--init",
    "transport": "--transport", "max_rows": "--max-rows", "value_bound": "--value-bound",
}


def _applied(algorithm: str, field: str) -> str | None:
    """The default of a parameter the simulator applies (``deep_setups.job_defaults``), by
    preset and data set where they differ; None where it is the model's everywhere."""
    params = algorithms.get(algorithm).params
    if params is None or algorithm not in SETUPS:  # not simulated here: the model's
        return None
    info = params.model_fields[field]
    model = None if info.is_required() else info.default
    by_preset = {
        preset: {d: job_defaults(algorithm, preset, d).get(field, model) for d in DATASETS}
        for preset in SETUPS[algorithm]
    }
    if all(v == model for values in by_preset.values() for v in values.values()):
        return None
    texts = {
        preset: shown(values[DATASETS[0]]) if len(set(map(repr, values.values()))) == 1
        else ", ".join(f"{shown(v)} on {d}" for d, v in values.items())
        for preset, values in by_preset.items()
    }
    first, *others = texts
    return "; ".join(
        [texts[first], *(f"{p} preset {texts[p]}" for p in others if texts[p] != texts[first])]
    )


def _add_deep_arguments(sim: argparse.ArgumentParser) -> None:
    deep = sim.add_argument_group(
        "model-based algorithms (fedcref, fed-distill)",
        "Need PyTorch (fedclust[deep]). Data: --dataset digits (scikit-learn's 8x8 digits; "
        "small models and few epochs, each default run well under a minute) or --dataset "
        "mnist ($FEDCLUST_DATASETS/mnist, default ../shared/datasets/mnist). The federation "
        "is simulated from the labelled images; --seed (default 0) fixes data split, "
        "training and grouping. --protection "
        "masking (default) masks every group sum of >= 3 members; none sums in the clear. "
        "The job's parameters are the flags of the fed-distill and fedcref groups below (as "
        "fedclust job submit's); fedcref also takes --alpha (eq. 2 percentile, default 75). "
        "The sweep flags (--k, --k-range, --data, ...) do not apply.",
    )
    for flag, kind, metavar, owners, text in _DEEP_OPTIONS:
        prefix = "" if len(owners) > 1 else f"{owners[0]}: "
        deep.add_argument(flag, type=kind, metavar=metavar, help=prefix + text)
    add_params_flags(
        sim, defaults=_applied, synonyms={"--initial": {"dirty": "labels"}},
        preset_help="code (default: the project's quick set-up on digits, the authors' code's "
        "training) or paper (the paper's data set, scale and hyper-parameters; "
        "docs/fedcref.md, docs/fed-distill.md); a flag given overrides the preset's value",
    )


def _check_deep_flags(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """Refuse flags that do not apply to the chosen algorithm (clear ValueError)."""
    algorithm = args.algorithm
    if args.preset is not None:
        algorithms.get(algorithm).preset(args.preset)  # refuses a preset it does not have
    flag = {a.dest: a.option_strings[0] for a in parser._actions if a.option_strings}
    for dest, owners in _DEEP_FLAGS.items():
        if getattr(args, dest) is not None and algorithm not in owners:
            raise ValueError(
                f"{flag[dest]} applies only to --algorithm {' or '.join(owners)}, not "
                f"{algorithm}"
            )
    check_params_flags(args, algorithm)
    if algorithms.get(algorithm).family != "model":
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


def _simulate_deep(args: argparse.Namespace) -> int:
    from fedclust import deep_simulate as ds

    given = {dest: getattr(args, dest) for dest, owners in _DEEP_FLAGS.items()
             if args.algorithm in owners and getattr(args, dest) is not None}
    run = ds.simulate_fedcref if args.algorithm == "fedcref" else ds.simulate_fed_distill
    doc = run(
        args.dataset, preset=args.preset or "code", seed=0 if args.seed is None else args.seed,
        params=params_from_flags(args, args.algorithm, preset=False),
        protection=args.protection, **given,
    )
    if args.json:
        print(doc.model_dump_json(indent=2))
    else:
        print(ds.format_deep_result(doc, title="fedclust simulate"))
    return 0


def starting(args: argparse.Namespace) -> str:
    """The first line: the algorithm, the data and the K values."""
    ks = "" if args.k is None and args.k_range is None else "  K=" + (
        str(args.k) if args.k is not None else f"{args.k_range[0]}..{args.k_range[-1]}"
    )
    return f"{args.algorithm} on {args.dataset or args.data}{ks}"


def run(args: argparse.Namespace) -> int:
    from fedclust.data.federations import build_federation
    from fedclust.exports import write_exports
    from fedclust.progress import SweepProgress
    from fedclust.protocol.wire.messages import draw_seed
    from fedclust.report import format_result
    from fedclust.simulate import job_spec, simulate

    _check_deep_flags(args, args.simulate_parser)
    if algorithms.get(args.algorithm).family == "model":
        return _simulate_deep(args)
    seed = draw_seed() if args.seed is None else args.seed  # recorded: --seed replays it
    federation = build_federation(
        dataset=args.dataset, data=args.data, columns=args.columns, split_by=args.split_by,
        label_column=args.label_column, participants=args.participants, split=args.split,
        alpha=0.5 if args.alpha is None else args.alpha, beta=args.beta, seed=seed,
        missing=args.missing, decimal=args.decimal, encoding=args.encoding,
    )
    _check_protection(args)
    ks = [args.k] if args.k is not None else args.k_range
    local_ks = (args.local_range or ks) if args.local else None
    params: dict[str, Any] = {
        "algorithm": args.algorithm, "ks": ks, "seed": seed,
        "standardise": args.standardise, "local_ks": local_ks, "m": args.m, "eps": args.eps,
        "max_rounds": args.max_rounds, "gamma": args.gamma, "protection": args.protection,
        "max_rows": args.max_rows, "value_bound": args.value_bound,
        "min_center_contributors": args.min_center_contributors,
        "masking_graph": args.masking_graph,
    }
    if args.init is not None:
        params["init"] = read_init(
            args.init, algorithm=args.algorithm, k=args.k,
            n_features=federation.parts[0].shape[1], feature_names=federation.feature_names,
        )
    # A sweep's own parameters (a registered model's flags and --preset), if given.
    fields, model = params_from_flags(args, args.algorithm), algorithms.get(args.algorithm).params
    spec = _valid_job(lambda: job_spec(
        federation, **params, params=model(**fields) if model is not None and fields else None
    ))
    if model is not None and fields:
        params["params"] = spec.algorithm_params
    if args.transport == "asgi":
        from fedclust.inprocess import run_in_process

        doc = run_in_process(federation, spec, min_cohort=args.min_cohort)
    else:
        with SweepProgress(spec.ks, command="fedclust simulate") as progress:
            doc = simulate(
                federation, min_cohort=args.min_cohort, on_progress=progress.simulation,
                **params,
            ).to_document()
    if args.out is not None:
        write_exports(doc, args.out)
    if args.json:
        print(doc.model_dump_json(indent=2))
    else:
        print(format_result(doc, title="fedclust simulate"))
    return 0
