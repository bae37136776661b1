"""Command-line flags generated from the algorithms' registered parameters models
(``AlgorithmSpec.params``, ``JobCreate``'s block ``params_block``), for ``job submit`` and
``simulate`` alike: one flag per field, spelled ``--field-name`` unless the field declares a
:class:`~fedclust.core.models.Flag`, its help from the field's description, no default of its
own (a flag left out leaves the value beneath it: the preset's, the command's or the
model's), and its parser from the field's type:

* a ``Literal`` field takes one of its values;
* a tuple-of-integers field takes ``I,I,...`` within the lengths and item bounds its
  constraints declare;
* a field holding a model (fed-distill's public set) is no flag: the command gives it
  otherwise;
* any other field is parsed by its type (int, float, str).

A flag that two algorithms' fields share (or a field shares with the command's own flag,
simulate's ``--alpha``) is one option, read by each; and ``--preset NAME``: the algorithm's
registered preset (``AlgorithmSpec.presets``), under the flags given."""

from __future__ import annotations

import argparse
import types
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from fedclust.core.models import Flag
from fedclust.protocol import algorithms

#: The namespace attribute holding the flags made here: dest -> (flag, algorithms reading it).
_MADE = "params_flags"


def _dest(flag: str) -> str:
    return flag[2:].replace("-", "_")


def _scalar(annotation: Any) -> Any:
    """The annotation without ``| None``."""
    if get_origin(annotation) in (Union, types.UnionType):
        return next(a for a in get_args(annotation) if a is not type(None))
    return annotation


def _declared(info: FieldInfo) -> Flag:
    return next((m for m in info.metadata if isinstance(m, Flag)), Flag())


def _is_model(kind: Any) -> bool:
    return isinstance(kind, type) and issubclass(kind, BaseModel)


def flag_fields(algorithm: str) -> list[tuple[str, tuple[str, ...]]]:
    """The fields of ``algorithm``'s parameters model that are flags, each with its flags (its
    own first, then its aliases); none without a model."""
    model = algorithms.get(algorithm).params
    if model is None:
        return []
    out = []
    for name, info in model.model_fields.items():
        if _is_model(_scalar(info.annotation)):
            continue
        flag = _declared(info)
        out.append((name, (flag.name or "--" + name.replace("_", "-"), *flag.aliases)))
    return out


def _constraints(annotation: Any, metadata: list[Any]) -> dict[str, Any]:
    """The annotated-types bounds (ge, gt, le, lt, min_length, max_length) of a field's
    metadata and of ``Annotated`` on its type."""
    found = list(metadata)
    if get_origin(annotation) is Annotated:
        for extra in annotation.__metadata__:
            found.extend(extra.metadata if isinstance(extra, FieldInfo) else [extra])
    keys = ("ge", "gt", "le", "lt", "min_length", "max_length")
    return {k: getattr(m, k) for m in found for k in keys if getattr(m, k, None) is not None}


def _int_list(annotation: Any, metadata: list[Any], metavar: str) -> Callable[[str], Any]:
    """The parser of ``I,I,...``: integers within the item bounds and the lengths the
    field's constraints declare (argparse's error names them)."""
    item = get_args(annotation)[0]
    length, bounds = _constraints(annotation, metadata), _constraints(item, [])
    shortest, longest = length.get("min_length", 0), length.get("max_length")
    low = bounds.get("ge", bounds["gt"] + 1 if "gt" in bounds else None)
    high = bounds.get("le", bounds["lt"] - 1 if "lt" in bounds else None)
    count = f"{shortest} to {longest}" if longest is not None else f"at least {shortest}"
    values = "" if low is None and high is None else (
        f" from {low} to {high}" if low is not None and high is not None
        else f" >= {low}" if low is not None else f" <= {high}"
    )
    rule = f"give {count} integers{values} as {metavar},{metavar},..."

    def parse(text: str) -> tuple[int, ...]:
        try:
            items = tuple(int(v) for v in text.split(","))
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: {rule}") from None
        if not shortest <= len(items) <= (longest or len(items)) or any(
            (low is not None and v < low) or (high is not None and v > high) for v in items
        ):
            raise argparse.ArgumentTypeError(f"{text!r}: {rule}")
        return items

    return parse


def _parsing(info: FieldInfo, synonyms: Mapping[str, str]) -> dict[str, Any]:
    """argparse's type, choices and metavar of a field, by its type (module docstring)."""
    kind = _scalar(info.annotation)
    if get_origin(kind) is Literal:
        if not synonyms:
            return {"choices": get_args(kind)}
        return {"choices": get_args(kind), "type": lambda text: synonyms.get(text, text)}
    if get_origin(kind) is tuple and len(get_args(kind)) == 2 and get_args(kind)[1] is ...:
        item = get_args(kind)[0]
        if (get_args(item)[0] if get_origin(item) is Annotated else item) is int:
            one = _declared(info).metavar or "I"
            return {"type": _int_list(kind, info.metadata, one), "metavar": f"{one},{one},..."}
    return {"type": kind}


def shown(value: Any) -> str:
    """A default as the help states it (a tuple as ``a,b,c``)."""
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value)
    return "none" if value is None else str(value)


def add_params_flags(
    parser: argparse.ArgumentParser,
    *,
    defaults: Callable[[str, str], str | None] | None = None,
    synonyms: Mapping[str, Mapping[str, str]] | None = None,
    preset_help: str | None = None,
) -> dict[str, Any]:
    """``--preset`` and one argument group per registered algorithm with a parameters model
    (module docstring); the groups by algorithm.

    ``defaults(algorithm, field)``: the default the command applies, as the help states it
    (None: the model's); ``synonyms``: by flag, other words the command takes for a value
    (simulate's ``--initial dirty`` for ``labels``); ``preset_help``: the command's own help
    of ``--preset``. A flag the parser already has (the command's own) is read, not made, and
    :func:`check_params_flags` leaves it to the command."""
    presets = sorted({p for a in algorithms.names() for p in algorithms.get(a).presets})
    parser.add_argument(
        "--preset", choices=presets, default=None,
        help=preset_help or "a named set of the algorithm's parameters (code: the authors' "
        "code's defaults; paper: the paper's stated values; docs/fedcref.md, "
        "docs/fed-distill.md); the flags given override it",
    )
    groups: dict[str, Any] = {}
    made: dict[str, tuple[str, tuple[str, ...]]] = {}
    taken = parser._option_string_actions  # the flags the parser has so far
    for algorithm in algorithms.names():
        spec = algorithms.get(algorithm)
        if spec.params is None:
            continue
        group = groups[algorithm] = parser.add_argument_group(algorithm, spec.title)
        for name, flags in flag_fields(algorithm):
            info = spec.params.model_fields[name]
            default = defaults(algorithm, name) if defaults is not None else None
            if default is None and not info.is_required():
                default = shown(info.default)
            words = (synonyms or {}).get(flags[0], {})
            text = " ".join([
                info.description or name, *(f"{w!r} is {v!r}." for w, v in words.items()),
                *([f"(default {default})"] if default else []),
            ])
            for flag in flags:
                about = text if flag == flags[0] else f"same as {flags[0]}"
                if flag in taken:  # another algorithm's flag too, or the command's own
                    if _dest(flag) in made:
                        made[_dest(flag)] = (flag, (*made[_dest(flag)][1], algorithm))
                        taken[flag].help = f"{taken[flag].help}; {algorithm}: {about}"
                    continue
                group.add_argument(
                    flag, dest=_dest(flag), default=None, help=about,
                    **_parsing(info, words),
                )
                made[_dest(flag)] = (flag, (algorithm,))
    parser.set_defaults(**{_MADE: made})
    return groups


def check_params_flags(args: argparse.Namespace, algorithm: str) -> None:
    """Refuse a flag made for other algorithms' parameters (ValueError naming the flag and
    the algorithms that take it)."""
    for dest, (flag, owners) in getattr(args, _MADE, {}).items():
        if getattr(args, dest) is not None and algorithm not in owners:
            raise ValueError(
                f"{flag} applies only to --algorithm {' or '.join(owners)}, not {algorithm}"
            )


def params_from_flags(
    args: argparse.Namespace, algorithm: str, *, preset: bool = True
) -> dict[str, Any]:
    """The fields of ``algorithm``'s parameters given on the command line: its ``--preset``
    (ValueError for a preset it does not have: :meth:`AlgorithmSpec.preset`; left out with
    ``preset=False``, for a command that applies it itself), under the flags given
    (ValueError for a field given by two of its flags with different values)."""
    name = getattr(args, "preset", None)
    fields = {} if name is None or not preset else algorithms.get(algorithm).preset(name)
    for field, flags in flag_fields(algorithm):
        given = {f: getattr(args, _dest(f), None) for f in flags}
        values = {v for v in given.values() if v is not None}
        if len(values) > 1:
            raise ValueError(f"give {' or '.join(f for f in given if given[f] is not None)}, "
                             "not both")
        if values:
            fields[field] = values.pop()
    return fields
