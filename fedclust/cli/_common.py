"""What the commands share: common flags and their parsers, job checks, error handling.

Light to import (the command modules import it while the arguments are parsed): what the
checks and the error handling need is imported when they run.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedclust.protocol import algorithms

if TYPE_CHECKING:
    import httpx

    from fedclust.protocol.wire.messages import JobCreate

PROTECTION_CHOICES = ("masking", "paillier", "none")


def protection_help() -> str:
    """``--protection``'s help; the algorithms that need none are read from the registry."""
    plain = [n for n in algorithms.names() if algorithms.get(n).plain_only]
    needs = f"; {', '.join(plain)} need none" if plain else ""
    return (
        "how every sum-type statistic travels: masking (pairwise masking, the default), "
        "paillier (encrypted to the counting service's key) or none (in the clear, as in the "
        f"papers{needs})"
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


def _add_out_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out", type=Path, metavar="DIR",
        help="also write sweep.csv, centers.csv and result.json (and .parquet copies when "
        "pyarrow is installed) into DIR",
    )


def _check_protection(args: argparse.Namespace) -> None:
    """Refuse, in one line naming the flag, an algorithm that cannot run protected."""
    if algorithms.get(args.algorithm).plain_only and args.protection != "none":
        raise ValueError(
            f"--algorithm {args.algorithm} sends each participant's local centers by design "
            f"and runs only with --protection none, not {args.protection} (the default is "
            "masking)."
        )


def _valid_job(build: Callable[[], JobCreate]) -> JobCreate:
    """``build()``, its validation errors stated in one line without the input values."""
    from pydantic import ValidationError

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


def run_command(handler: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """``handler(args)``, its warnings and expected errors printed in one line each."""
    import httpx

    from fedclust.client import ApiError
    from fedclust.core.errors import ProtocolError, RefusedError
    from fedclust.data.loaders import DataWarning

    command = " ".join(filter(None, (args.command, getattr(args, "action", None))))

    def show_warning(message: Warning | str, *_: object, **__: object) -> None:
        print(f"fedclust {command}: warning: {message}", file=sys.stderr)

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always", DataWarning)
            warnings.showwarning = show_warning
            status: int = handler(args)
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
    import httpx

    try:
        url = exc.request.url.copy_with(query=None)
    except RuntimeError:  # no request attached
        return f"{type(exc).__name__}: {exc}"
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
        return f"cannot reach {url} ({exc}): is the service running at that address?"
    return f"{type(exc).__name__} from {url}: {exc}"


def read_init(
    path: Path, *, algorithm: str, k: int | None, n_features: int | None,
    feature_names: Sequence[str] | None,
) -> Any:
    """The (K, D) centers of ``--init``: a .npy array, or a CSV whose first row may name the
    features (then as ``feature_names``, in order). ``n_features`` None (a service job, whose
    data the analyst does not hold): any one width, checked by the coordinator. Errors name
    ``--init`` and what it needs."""
    import csv

    import numpy as np

    spec = algorithms.get(algorithm)
    if not spec.takes_init:
        taking = ", ".join(n for n in algorithms.names() if algorithms.get(n).takes_init)
        raise ValueError(
            f"--init does not apply to --algorithm {algorithm} (it does not start from "
            f"global centers); it applies to {taking}"
        )
    if k is None:
        raise ValueError(
            "--init gives the K initial centers of a single --k; it does not apply with "
            "--k-range"
        )
    header: list[str] | None = None
    try:
        if path.suffix.lower() == ".npy":
            centers = np.asarray(np.load(path, allow_pickle=False), dtype=np.float64)
        else:
            with path.open(encoding="utf-8") as f:
                first = next(csv.reader(f), [])
            try:
                np.asarray(first, dtype=np.float64)
            except ValueError:
                header = [v.strip() for v in first]
            centers = np.loadtxt(path, delimiter=",", ndmin=2, skiprows=int(header is not None))
    except (OSError, ValueError) as exc:
        raise ValueError(f"--init: cannot read {path}: {exc}") from None
    if header is not None and feature_names is not None and header != list(feature_names):
        raise ValueError(
            f"--init: the header of {path} names {header}; the data's features are "
            f"{list(feature_names)}, in that order"
        )
    width = centers.shape[1] if centers.ndim == 2 and n_features is None else n_features
    if centers.ndim != 2 or centers.shape != (k, width):
        raise ValueError(
            f"--init: {path} holds an array of shape {centers.shape}; --k {k} "
            + (f"needs {k} rows of one width" if n_features is None else
               f"over data of {n_features} features needs {k} rows of {n_features} values")
        )
    if not np.isfinite(centers).all():
        raise ValueError(f"--init: {path} holds a NaN or infinite value")
    return centers
