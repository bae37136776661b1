"""The services' settings from a TOML file, environment variables and secret files.

Three layers, a later one winning key by key: the TOML file (``--config FILE``, optional), the
secrets directory ``FEDCLUST_SECRETS_DIR`` (one file per setting, named like its variable),
and the variables ``FEDCLUST_<TABLE>__<KEY>`` (one key of a table) and ``FEDCLUST_<ARRAY>``
(JSON for a whole top-level value such as ``[[participants]]``). Any key ``x`` may instead be
``x_file`` / ``FEDCLUST_<TABLE>__<X>_FILE``: a file whose stripped content is the value.

Contracts: the variables a service reads come from the model of its config file
(:meth:`EnvSchema.of`, the one schema of :mod:`infra.config_toml`); values are text converted
to the key's type (lists and tables as JSON), then the model validates the merged settings;
``x`` and ``x_file`` in one layer, or an unknown key of a table the service reads, are errors;
variables of other tables are ignored. Errors name the variable or the file, never a value.

Design notes: ``docs/services.md`` (§ Settings from the environment).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Final, TypeVar, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Json, ValidationError, create_model
from pydantic_settings import BaseSettings, EnvSettingsSource, SettingsConfigDict
from pydantic_settings.exceptions import SettingsError
from pydantic_settings.sources import NestedSecretsSettingsSource, SecretsSettingsSource

from fedclust.infra.config_toml import fields_of, read_toml, value_type

__all__ = ["ENV_PREFIX", "SECRETS_DIR_VAR", "EnvSchema", "LayeredConfig"]

ENV_PREFIX: Final = "FEDCLUST_"
SECRETS_DIR_VAR: Final = "FEDCLUST_SECRETS_DIR"
_DELIMITER: Final = "__"
_SUFFIX: Final = "_file"
_MAX_SECRET_BYTES: Final = 1 << 20
_NO_FILE: Final = "the environment (no config file)"

T = TypeVar("T")
#: One top-level entry of a config: a table (key -> type) or a whole value's type.
Section = Mapping[str, Any] | Any
_Setting = tuple[str, ...]  # ("coordinator", "port") or ("participants",)

_MESSAGES: Final = {
    "int_parsing": "must be an integer",
    "int_from_float": "must be an integer",
    "float_parsing": "must be a number",
    "bool_parsing": "must be true or false (or 1/0, yes/no, on/off)",
    "list_type": "must be a JSON list",
    "dict_type": "must be a JSON object",
}


def _table_keys(model: Any) -> dict[str, Any]:
    """A table model's keys and their annotations (the model's validators run again on the
    merged settings)."""
    return {name: info.annotation for name, info in (fields_of(model) or {}).items()}


def _variable(setting: _Setting) -> str:
    """The environment variable of a setting: ``("coordinator", "port")`` ->
    ``FEDCLUST_COORDINATOR__PORT``."""
    return ENV_PREFIX + _DELIMITER.join(setting).upper()


@dataclass(frozen=True)
class LayeredConfig:
    """A service's merged settings mapping and where its values came from.

    Attributes:
        doc: the TOML document with the secrets directory's and the environment's values laid
            over it (``x_file`` keys replaced by the files' contents).
        base: the folder relative paths in ``doc`` resolve against (the file's, else the
            working directory).
        origin: the config file, or "the environment" without one; errors start with it.
        sources: setting -> the variable or file that set it, for error messages.
    """

    doc: dict[str, Any]
    base: Path
    origin: str
    sources: Mapping[_Setting, str] = field(default_factory=dict)

    def build(self, make: Callable[[dict[str, Any], Path], T]) -> T:
        """``make(doc, base)``; a ValueError gains the origin and the variables it concerns.

        Raises:
            ValueError: from ``make``, or nothing configures the service at all.
        """
        if not self.doc and not self.sources and self.origin == _NO_FILE:
            raise ValueError(
                f"no config file and no {ENV_PREFIX}<TABLE>__<KEY> variables: give --config "
                "FILE, or the settings as variables or secret files."
            )
        try:
            return make(self.doc, self.base)
        except ValueError as exc:
            raise ValueError(self.explain(str(exc))) from None

    def explain(self, message: str) -> str:
        """``message`` starting with the origin, ending with the variables or files that set
        a key it names."""
        hits = [
            label for setting, label in self.sources.items()
            if re.search(rf"(?<![\w-]){_key_pattern(setting)}(?![\w-])", message)
        ]
        suffix = f" (set by {', '.join(hits)})" if hits else ""
        return f"{self.origin}: {message}{suffix}"


class _EnvBase(BaseSettings):
    """The variables' naming scheme: ``FEDCLUST_<TABLE>__<KEY>``, any case."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_nested_delimiter=_DELIMITER, case_sensitive=False,
        extra="ignore",
    )


class EnvSchema:
    """The settings of one kind of config file, for reading them from the environment.

    ``sections`` maps each table of the file to its keys and their types (``{"port": int}``),
    or a whole top-level value (an array of tables) to its type, read as JSON.
    """

    def __init__(self, sections: Mapping[str, Section]) -> None:
        self.sections = dict(sections)

    @classmethod
    def of(cls, model: type[BaseModel]) -> EnvSchema:
        """The schema of a config file's model (:class:`infra.config_toml.ConfigFile`): a
        table per field whose type has fields (:func:`_table_keys`), a JSON value per other
        field, an array of tables read as a list of JSON objects (typed by the model)."""
        sections: dict[str, Section] = {}
        for name, info in model.model_fields.items():
            kind = value_type(info.annotation)
            if fields_of(kind) is not None:
                sections[name] = _table_keys(kind)
            elif get_origin(kind) in (list, tuple):
                sections[name] = list[dict[str, Any]]
            else:
                sections[name] = kind
        return cls(sections)

    def is_table(self, name: str) -> bool:
        """Whether ``name`` is a table (a variable per key) rather than one JSON value."""
        return isinstance(self.sections.get(name), Mapping)

    @cached_property
    def _fields(self) -> dict[str, Any]:
        """A field per table (a strict sub-model of its keys) and per whole value."""
        fields: dict[str, Any] = {}
        for name, spec in self.sections.items():
            if isinstance(spec, Mapping):
                sub: dict[str, Any] = {k: (_as_json(t) | None, None) for k, t in spec.items()}
                table = create_model(
                    f"_{name.title()}Table", __config__=ConfigDict(extra="forbid"), **sub
                )
                fields[name] = (table | None, None)
            else:
                fields[name] = (_as_json(spec) | None, None)
                fields[name + _SUFFIX] = (str | None, None)
        return fields

    @cached_property
    def model(self) -> type[BaseSettings]:
        """The pydantic-settings model the sources read variables and secret files for."""
        model: type[BaseSettings] = create_model(
            "_EnvSettings", __base__=_EnvBase, **self._fields
        )
        return model

    @cached_property
    def values_model(self) -> type[BaseModel]:
        """The same fields as a plain model: validates one layer without reading any other."""
        model: type[BaseModel] = create_model(
            "_EnvValues", __config__=ConfigDict(extra="ignore"), **self._fields
        )
        return model

    # -- the layers ------------------------------------------------------------------------
    def load(
        self, path: str | os.PathLike[str] | None, *, what: str, environment: bool = True,
        aliases: Mapping[str, _Setting] | None = None,
    ) -> LayeredConfig:
        """The TOML file at ``path`` (None: none) with, when ``environment``, the secrets
        directory and the ``FEDCLUST_`` variables laid over it.

        ``aliases`` maps extra variable names to settings, read below the ``FEDCLUST_<TABLE>__``
        ones (older names such as ``FEDCLUST_TOKEN``).

        Raises:
            ValueError: the file is missing or not TOML, a variable or secret file is
                unknown, unreadable or of the wrong type (one line naming it).
        """
        if path is not None:
            doc, base = read_toml(path, what=what)
            origin = str(path)
        else:
            doc, base, origin = {}, Path.cwd(), _NO_FILE
        sources: dict[_Setting, str] = {}
        doc = self._toml_files(doc, base, origin, sources)
        if not environment:
            return LayeredConfig(doc, base, origin, sources)
        layers: list[tuple[dict[str, Any], Callable[[_Setting], str]]] = []
        secrets_dir = os.environ.get(SECRETS_DIR_VAR)
        if secrets_dir:
            layers.append(self._secrets_layer(Path(secrets_dir)))
        for name, setting in (aliases or {}).items():
            if name in os.environ:
                layers.append((_nest(setting, os.environ[name]), _named(name)))
        layers.append(self._env_layer())
        for raw, label in layers:
            raw_sources: dict[_Setting, str] = {}
            values = self._validate(_resolve_files(raw, self, Path.cwd(), label, raw_sources),
                                    label, raw_sources)
            for setting in _settings(values, self):
                sources[setting] = raw_sources.get(setting, label(setting))
            doc = _overlay(doc, values, self)
        return LayeredConfig(doc, base, origin, sources)

    def _env_layer(self) -> tuple[dict[str, Any], Callable[[_Setting], str]]:
        try:
            raw = EnvSettingsSource(
                self.model, case_sensitive=False, env_prefix=ENV_PREFIX,
                env_nested_delimiter=_DELIMITER,
            )()
        except SettingsError as exc:  # a variable that is not of its field's shape
            raise ValueError(f"the environment: {exc}.") from None
        return raw, _variable

    def _secrets_layer(self, folder: Path) -> tuple[dict[str, Any], Callable[[_Setting], str]]:
        if not folder.is_dir():
            raise ValueError(f"{SECRETS_DIR_VAR}: no folder at {folder}.")
        try:
            raw = NestedSecretsSettingsSource(
                SecretsSettingsSource(self.model, secrets_dir=folder), secrets_dir_missing="error",
                secrets_case_sensitive=False, secrets_prefix=ENV_PREFIX,
                secrets_nested_delimiter=_DELIMITER,
            )()
        except (SettingsError, OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"{SECRETS_DIR_VAR} ({folder}): {exc}.") from None

        def label(setting: _Setting) -> str:
            return f"the file {_variable(setting).lower()} in {SECRETS_DIR_VAR} ({folder})"

        return raw, label

    def _toml_files(
        self, doc: dict[str, Any], base: Path, origin: str, sources: dict[_Setting, str]
    ) -> dict[str, Any]:
        """``doc`` with every ``x_file`` key of the schema's tables replaced by ``x``."""

        def label(setting: _Setting) -> str:
            where = f"[{setting[0]}] " if len(setting) > 1 else ""
            return f"{origin}: {where}{setting[-1]}{_SUFFIX}"

        raw_sources: dict[_Setting, str] = {}
        files = _resolve_files(doc, self, base, label, raw_sources, only_files=True)
        if not raw_sources:
            return doc
        values = self._validate(files, label, raw_sources)
        sources.update(raw_sources)
        return _overlay(_without_files(doc, self), values, self)

    def _validate(
        self, raw: dict[str, Any], label: Callable[[_Setting], str],
        file_sources: Mapping[_Setting, str],
    ) -> dict[str, Any]:
        """``raw`` (text) converted to the schema's types; one line naming the variable."""
        try:
            model = self.values_model.model_validate(raw)
        except ValidationError as exc:
            error = exc.errors()[0]
            loc = tuple(str(p) for p in error["loc"])
            setting = loc[:2] if self.is_table(loc[0]) and len(loc) > 1 else loc[:1]
            where = file_sources.get(setting) or label(setting)
            if error["type"] == "extra_forbidden":
                known = ", ".join(sorted(self.sections[setting[0]]))
                raise ValueError(
                    f"{where}: [{setting[0]}] has no key {setting[-1]!r}; known: {known}."
                ) from None
            message = _MESSAGES.get(error["type"]) or error["msg"][:1].lower() + error["msg"][1:]
            raise ValueError(f"{where}: {message}.") from None
        dumped: dict[str, Any] = model.model_dump(exclude_unset=True)
        return dumped


def _as_json(kind: Any) -> Any:
    """Lists and tables arrive as JSON text (pydantic's ``Json``); scalars as they are."""

    def structured(t: Any) -> bool:
        return get_origin(t) in (list, tuple, dict) or any(structured(a) for a in get_args(t))

    json: Any = Json
    return json[kind] if structured(kind) else kind


def _key_pattern(setting: _Setting) -> str:
    """How a message names a setting: its key, or for an array (``participants``) also one
    entry (``participant 'x'``)."""
    key = re.escape(setting[-1])
    return key[:-1] + "s?" if len(setting) == 1 and key.endswith("s") else key


def _named(name: str) -> Callable[[_Setting], str]:
    """A layer's label: the one variable it comes from."""
    return lambda _: name


def _nest(setting: _Setting, value: Any) -> dict[str, Any]:
    return {setting[0]: {setting[1]: value}} if len(setting) > 1 else {setting[0]: value}


def _settings(values: Mapping[str, Any], schema: EnvSchema) -> list[_Setting]:
    """The settings present in a validated layer."""
    out: list[_Setting] = []
    for name, value in values.items():
        if schema.is_table(name) and isinstance(value, Mapping):
            out.extend((name, key) for key in value)
        else:
            out.append((name,))
    return out


def _overlay(doc: dict[str, Any], values: Mapping[str, Any], schema: EnvSchema) -> dict[str, Any]:
    """``doc`` with ``values`` laid over it: tables key by key, whole values replaced."""
    out = dict(doc)
    for name, value in values.items():
        below = out.get(name)
        if schema.is_table(name) and isinstance(below, Mapping) and isinstance(value, Mapping):
            out[name] = {**below, **value}
        else:
            out[name] = value
    return out


def _without_files(doc: Mapping[str, Any], schema: EnvSchema) -> dict[str, Any]:
    """``doc`` without its ``x_file`` keys of known ``x``."""
    out: dict[str, Any] = {}
    for name, value in doc.items():
        if name.endswith(_SUFFIX) and name[: -len(_SUFFIX)] in schema.sections and not (
            schema.is_table(name[: -len(_SUFFIX)])
        ):
            continue
        if schema.is_table(name) and isinstance(value, Mapping):
            keys = schema.sections[name]
            value = {
                k: v for k, v in value.items()
                if not (k.endswith(_SUFFIX) and k[: -len(_SUFFIX)] in keys)
            }
        out[name] = value
    return out


def _resolve_files(
    raw: Mapping[str, Any], schema: EnvSchema, base: Path, label: Callable[[_Setting], str],
    sources: dict[_Setting, str], *, only_files: bool = False,
) -> dict[str, Any]:
    """``raw`` with each ``x_file`` replaced by ``x``: the named file's stripped content.

    With ``only_files``, just the values read from files (the TOML layer keeps its own
    typed values). ``sources`` receives the file each setting came from.
    """
    out: dict[str, Any] = {}

    def read(setting: _Setting, given: Any, siblings: Mapping[str, Any]) -> str:
        named = label((*setting[:-1], setting[-1] + _SUFFIX))
        if setting[-1] in siblings:
            raise ValueError(f"{named}: give {setting[-1]} or {setting[-1]}{_SUFFIX}, not both.")
        if not isinstance(given, str) or not given.strip():
            raise ValueError(f"{named}: must be the path of a file.")
        file = Path(given).expanduser()
        file = file if file.is_absolute() else base / file
        sources[setting] = f"the file {file} ({named})"
        return _read_secret(file, named)

    for name, value in raw.items():
        stem = name[: -len(_SUFFIX)] if name.endswith(_SUFFIX) else None
        if stem is not None and stem in schema.sections and not schema.is_table(stem):
            out[stem] = read((stem,), value, raw)
        elif schema.is_table(name) and isinstance(value, Mapping):
            keys = schema.sections[name]
            table: dict[str, Any] = {}
            for key, item in value.items():
                if key.endswith(_SUFFIX) and key[: -len(_SUFFIX)] in keys:
                    table[key[: -len(_SUFFIX)]] = read(
                        (name, key[: -len(_SUFFIX)]), item, value
                    )
                elif not only_files:
                    table[key] = item
            if table or not only_files:
                out[name] = table
        elif not only_files:
            out[name] = value
    return out


def _read_secret(file: Path, named: str) -> str:
    """A secret file's content without surrounding whitespace (at most 1 MiB of UTF-8)."""
    try:
        if not file.is_file():
            raise ValueError(f"{named}: no file at {file}.")
        if file.stat().st_size > _MAX_SECRET_BYTES:
            raise ValueError(f"{named}: {file} is larger than 1 MiB; is it the right file?")
        return file.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ValueError(f"{named}: cannot read {file} ({exc.strerror}).") from None
    except UnicodeDecodeError:
        raise ValueError(f"{named}: {file} is not UTF-8 text.") from None
