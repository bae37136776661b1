"""Reading the services' TOML config files: what the coordinator, the counting service and the
participant agent share (kept out of the command-line layer, which only writes configs).

A config file is typed by pydantic models, one per table (:data:`TABLE`: unknown keys refused,
no coercion of TOML's types); :func:`parse` validates a parsed file against its model and turns
the first error into one line naming the key (``[data] memory_mb``, ``[[analysts]] entry 2
role``) and what is expected: a field's ``description``, its bounds, or its type. A validator's
own ``ValueError`` is its message, whole.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Final, TypeVar, Union, get_args, get_origin, get_type_hints

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

__all__ = [
    "DATACLASS_TABLE", "TABLE", "ConfigFile", "fields_of", "parse", "read_toml",
    "resolve_sqlite_url", "value_type",
]

#: The configuration of every table's model: unknown keys refused, TOML's types kept (no
#: string read as a number, no 1 as true; a table that is a pydantic dataclass, which strict
#: mode would accept only as an instance, types its keys ``Strict`` one by one).
TABLE: Final = ConfigDict(extra="forbid", strict=True, hide_input_in_errors=True)
#: :data:`TABLE` for a pydantic dataclass.
DATACLASS_TABLE: Final = ConfigDict(extra="forbid", hide_input_in_errors=True)

M = TypeVar("M")

_TYPE_PHRASES: Final = {
    "int_type": "must be an integer",
    "float_type": "must be a number",
    "finite_number": "must be a finite number",
    "bool_type": "must be true or false",
    "string_type": "must be a string",
    "string_too_short": "must not be empty",
    "list_type": "must be a list",
    "tuple_type": "must be a list",
    "dict_type": "must be a table",
    "model_type": "must be a table",
    "dataclass_type": "must be a table",
}
_BOUNDS: Final = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}
_UNKNOWN: Final = frozenset({"extra_forbidden", "unexpected_keyword_argument"})


class ConfigFile(BaseModel):
    """A whole config file: a field per table (a model with :data:`TABLE`, which types its
    keys strictly) or array of tables; unknown tables refused."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def read_toml(path: str | os.PathLike[str], *, what: str) -> tuple[dict[str, Any], Path]:
    """The parsed TOML file and the folder relative paths in it resolve against.

    Raises:
        ValueError: the file is missing or not TOML; the message starts with its path and
            names ``what`` it should be (e.g. "the coordinator's config file").
    """
    file = Path(path)
    try:
        with file.open("rb") as fh:
            doc = tomllib.load(fh)
    except FileNotFoundError:
        raise ValueError(f"{file}: {what} is missing.") from None
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{file}: not valid TOML ({exc}).") from None
    return doc, file.resolve().parent


def parse(model: type[M], doc: Mapping[str, Any]) -> M:
    """``doc`` validated by ``model`` (a pydantic model or dataclass).

    Raises:
        ValueError: one line naming the key and what it must be (never its value, but for a
            number out of its bounds).
    """
    try:
        value: M = TypeAdapter(model).validate_python(doc)
        return value
    except ValidationError as exc:
        raise ValueError(_describe(exc, model)) from None


def fields_of(kind: Any) -> dict[str, FieldInfo] | None:
    """The fields of a table's type (a model, a pydantic or plain dataclass), else None."""
    found = getattr(kind, "__pydantic_fields__", None)
    if isinstance(found, dict):
        return found
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        hints = get_type_hints(kind)
        return {
            f.name: FieldInfo(annotation=hints[f.name]) for f in dataclasses.fields(kind) if f.init
        }
    return None


def value_type(kind: Any) -> Any:
    """The type a value of ``kind`` is validated as: Annotated and Optional unwrapped."""
    while True:
        origin = get_origin(kind)
        if origin is Annotated:
            kind = get_args(kind)[0]
        elif origin in (Union, types.UnionType):
            kind = next(a for a in get_args(kind) if a is not type(None))
        else:
            return kind


def _describe(exc: ValidationError, model: type[Any]) -> str:
    """The first error of ``exc`` as one line (see the module docstring)."""
    error = exc.errors()[0]
    loc = tuple(error["loc"])
    if error["type"] in ("value_error", "assertion_error"):
        return str(error["ctx"]["error"])
    if error["type"] in _UNKNOWN:
        parent = loc[:-1]
        unknown = sorted(
            str(e["loc"][-1]) for e in exc.errors()
            if e["type"] in _UNKNOWN and tuple(e["loc"][:-1]) == parent
        )
        expected = ", ".join(sorted(fields_of(_walk(model, parent)[0]) or ()))
        return (
            f"unknown key(s) {', '.join(repr(k) for k in unknown)} in {_where(model, parent)}; "
            f"expected: {expected}."
        )
    if error["type"] == "missing":
        if len(loc) == 1:
            return f"missing the [{loc[0]}] table."
        return f"{_where(model, loc[:-1])} is missing {loc[-1]!r}."
    kind, field, depth = _walk(model, loc)
    items = get_args(kind)
    if error["type"] == "list_type" and items and fields_of(value_type(items[-1])) is not None:
        return f"{_where(model, loc[:depth])} must be an array of tables."
    return f"{_where(model, loc[:depth])} {_phrase(error, field)}."


def _phrase(error: Any, field: FieldInfo | None) -> str:
    """What a value must be: the field's description, else its bounds or its type."""
    kind = error["type"]
    bounds = {
        k: getattr(m, k) for m in (field.metadata if field else ()) for k in _BOUNDS
        if getattr(m, k, None) is not None
    }
    if field is not None and field.description:
        return f"must be {field.description}"
    if kind.startswith(("greater_than", "less_than")) and bounds:
        low, high = bounds.get("ge"), bounds.get("le")
        if low is not None and high is not None:
            text = f"must be in [{low}, {high}]"
        else:
            text = "must be " + " and ".join(f"{_BOUNDS[k]} {v}" for k, v in bounds.items())
        return f"{text}; got {error['input']}"
    if kind == "literal_error":
        return f"must be {error['ctx']['expected']}"
    if kind == "string_pattern_mismatch" and error["ctx"]["pattern"] == r"\S":
        return "must not be empty"
    phrase = _TYPE_PHRASES.get(kind)
    return phrase or error["msg"][:1].lower() + error["msg"][1:]


def _walk(model: Any, loc: tuple[Any, ...]) -> tuple[Any, FieldInfo | None, int]:
    """The type at ``loc`` inside ``model``, the last field on the way and how many parts of
    ``loc`` name a key or an entry of an array of tables (the rest are items of a value, or
    pydantic's labels of a union's members). The walk stops at a field with a description:
    what the whole value must be."""
    kind, field, depth = model, None, 0
    for i, part in enumerate(loc):
        kind = value_type(kind)
        fields = fields_of(kind)
        if isinstance(part, int) or fields is None:
            args = get_args(kind)
            kind = args[-1] if args else Any
            if isinstance(part, int) and fields_of(value_type(kind)) is not None:
                depth = i + 1  # an entry of an array of tables
            continue
        field = fields.get(str(part))
        kind = field.annotation if field is not None else Any
        depth = i + 1
        if field is not None and field.description:
            break
    return value_type(kind), field, depth


def _where(model: Any, loc: tuple[Any, ...]) -> str:
    """How a message names ``loc``: ``[table] key``, ``[[array]] entry 2 key``, the file."""
    if not loc:
        return "the file"
    head, rest = str(loc[0]), loc[1:]
    top = fields_of(model) or {}
    is_array = head in top and get_origin(value_type(top[head].annotation)) in (list, tuple)
    if is_array and rest and isinstance(rest[0], int):
        where, rest = f"[[{head}]] entry {rest[0] + 1}", rest[1:]
    else:
        where = f"[[{head}]]" if is_array else f"[{head}]"
    return " ".join([where, *(str(p) for p in rest)])


def resolve_sqlite_url(url: str, base: Path) -> str:
    """Make the file of a ``sqlite:///relative.db`` URL relative to ``base``; others unchanged."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError) as exc:
        raise ValueError("database_url is not a valid SQLAlchemy URL.") from exc
    database = parsed.database
    if parsed.get_backend_name() != "sqlite" or not database or database == ":memory:":
        return url
    if database.startswith("file:") or Path(database).is_absolute():
        return url
    return parsed.set(database=str(base / database)).render_as_string(hide_password=False)
