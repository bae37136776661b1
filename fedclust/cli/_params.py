"""Command-line flags generated from an algorithm's registered parameters model
(``AlgorithmSpec.params``, ``JobCreate``'s block ``params_block``): one flag per field, its
type or choices and its help from the field, and no default of its own (a flag left out
leaves the model's), and
``--preset NAME``: the algorithm's registered preset (``AlgorithmSpec.presets``), under the
flags given."""

from __future__ import annotations

import argparse
import types
from collections.abc import Callable, Mapping
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel

from fedclust.protocol import algorithms


def _widths(text: str) -> tuple[int, ...]:
    """Parse ``H,H,...`` (1 to 8 positive layer widths)."""
    try:
        widths = tuple(int(w) for w in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give widths as H,H,... (integers)") from None
    if not 1 <= len(widths) <= 8 or min(widths) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give 1 to 8 positive widths")
    return widths


#: Flags spelled other than ``--field-name`` (kept as users' scripts know them).
_FLAGS: Mapping[tuple[str, str], str] = {("fed-distill", "epochs"): "--distill-epochs"}
#: Fields read by a parser of their own (with its metavar).
_TYPES: Mapping[tuple[str, str], tuple[Callable[[str], Any], str]] = {
    ("fedcref", "hidden"): (_widths, "H,H,..."),
}
#: Fields the command line gives otherwise (fed-distill's public set: ``--public FILE.npy``).
_SKIP = frozenset({("fed-distill", "public")})


def _fields(algorithm: str, model: type[BaseModel]) -> list[tuple[str, str]]:
    return [
        (name, _FLAGS.get((algorithm, name), "--" + name.replace("_", "-")))
        for name in model.model_fields if (algorithm, name) not in _SKIP
    ]


def _scalar(annotation: Any) -> Any:
    """The annotation without ``| None``."""
    if get_origin(annotation) in (Union, types.UnionType):
        return next(a for a in get_args(annotation) if a is not type(None))
    return annotation


def add_params_flags(parser: argparse.ArgumentParser) -> dict[str, Any]:
    """One argument group per registered algorithm with a parameters block; the groups by
    algorithm."""
    groups: dict[str, Any] = {}
    presets = sorted({p for a in algorithms.names() for p in algorithms.get(a).presets})
    parser.add_argument(
        "--preset", choices=presets, default=None,
        help="a named set of the algorithm's parameters (code: the authors' code's defaults; "
        "paper: the paper's stated values; docs/fedcref.md, docs/fed-distill.md); the "
        "flags given override it",
    )
    for algorithm in algorithms.names():
        model = algorithms.get(algorithm).params
        if model is None:
            continue
        group = groups[algorithm] = parser.add_argument_group(
            algorithm, algorithms.get(algorithm).title
        )
        for name, flag in _fields(algorithm, model):
            info = model.model_fields[name]
            kind = _scalar(info.annotation)
            options: dict[str, Any] = {"dest": flag[2:].replace("-", "_"), "default": None}
            if (algorithm, name) in _TYPES:
                options["type"], options["metavar"] = _TYPES[algorithm, name]
            elif get_origin(kind) is Literal:
                options["choices"] = get_args(kind)
            else:
                options["type"] = kind
            shown = "" if info.is_required() else f" (default {_shown(info.default)})"
            options["help"] = f"{info.description or name}{shown}"
            group.add_argument(flag, **options)
    return groups


def _shown(value: Any) -> str:
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value)
    return "none" if value is None else str(value)


def params_from_flags(args: argparse.Namespace, algorithm: str) -> dict[str, Any]:
    """The fields of ``algorithm``'s parameters given on the command line: its ``--preset``
    (ValueError for a preset it does not have: :meth:`AlgorithmSpec.preset`), under the
    flags given."""
    preset = getattr(args, "preset", None)
    fields = {} if preset is None else algorithms.get(algorithm).preset(preset)
    model = algorithms.get(algorithm).params
    if model is None:
        return fields
    given = {name: getattr(args, flag[2:].replace("-", "_"), None)
             for name, flag in _fields(algorithm, model)}
    return {**fields, **{name: value for name, value in given.items() if value is not None}}
