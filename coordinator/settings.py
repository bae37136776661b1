"""The coordinator service's configuration (``coordinator.toml``).

Tables: ``[coordinator]`` (:class:`CoordinatorTable`: host, port, public_url, database_url,
counting_url, counting_token, task_timeout_seconds, metrics, uploads_in_flight),
``[[analysts]]`` (:class:`AnalystCredential`: name, token_sha256, role "analyst" or "admin"),
``[[participants]]`` (id, token_sha256) and the optional ``[tls]`` (:mod:`fedclust.infra.tls`);
:class:`CoordinatorFile` is the file's schema, :class:`CoordinatorSettings` the parsed file.

Contracts: credentials are stored only as the SHA-256 hex of each bearer token
(:func:`crypto.tokens.token_sha256`); the one secret kept in clear is the token presented to
the counting service; empty tokens and malformed hashes are refused when the file is read.
:meth:`CoordinatorSettings.load` lays the environment over the file, or reads it alone
(:mod:`fedclust.infra.config_env`).

Design notes: ``docs/services.md`` (§ Coordinator settings: an annotated example).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, Self

from pydantic import (
    Field,
    StrictFloat,
    StrictStr,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic import dataclasses as pydantic_dataclasses

from fedclust.crypto.tokens import check_sha256_hex
from fedclust.infra.auth import ParticipantCredential
from fedclust.infra.config_env import EnvSchema
from fedclust.infra.config_toml import (
    DATACLASS_TABLE,
    ConfigFile,
    fields_of,
    parse,
    resolve_sqlite_url,
)
from fedclust.infra.service_settings import DatabaseUrl, Port, ServedTable
from fedclust.infra.tls import ServerTls, TlsSettings
from fedclust.protocol.wire.admin import ServiceUrl

__all__ = [
    "AnalystCredential",
    "AnalystRole",
    "CoordinatorFile",
    "CoordinatorSettings",
    "CoordinatorTable",
    "ParticipantCredential",
]

#: An analyst sees and cancels the jobs it created; an admin sees and cancels every job.
AnalystRole = Literal["analyst", "admin"]
_URL = TypeAdapter(ServiceUrl)
_NON_EMPTY = r"\S"


@pydantic_dataclasses.dataclass(frozen=True, config=DATACLASS_TABLE)
class AnalystCredential:
    """An ``[[analysts]]`` entry: a name (the owner recorded on its jobs), the SHA-256 of its
    token and its role."""

    name: StrictStr = Field(min_length=1)
    token_sha256: StrictStr = Field(repr=False)
    role: AnalystRole = Field(default="analyst", description="'analyst' or 'admin'")

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "token_sha256", check_sha256_hex(
                self.token_sha256, where=f"analyst {self.name!r}: token_sha256"
            )
        )


@pydantic_dataclasses.dataclass(frozen=True, kw_only=True, config=DATACLASS_TABLE)
class CoordinatorTable(ServedTable):
    """The ``[coordinator]`` table (and :class:`ServedTable`'s keys).

    Attributes:
        counting_url: base URL of the counting service (``/api/v1`` is appended).
        counting_token: the bearer token the coordinator presents to the counting service.
        task_timeout_seconds: how long a job waits for one participant's answer.
        public_url: the URL participants reach the coordinator at (behind a proxy or a
            name other than ``host``); invitations carry it (``fedclust federation invite``).
    """

    port: Port = 8700
    database_url: DatabaseUrl = Field(default="sqlite:///coordinator.db", repr=False)
    counting_url: StrictStr = Field(pattern=_NON_EMPTY, description="a non-empty URL")
    counting_token: StrictStr = Field(
        repr=False, pattern=_NON_EMPTY, description="a non-empty string"
    )
    task_timeout_seconds: StrictFloat = Field(default=600.0, gt=0)
    public_url: StrictStr | None = Field(
        default=None, description=(
            "an http:// or https:// URL with a host (8 to 2048 characters, no spaces)"
        ),
    )

    @field_validator("public_url")
    @classmethod
    def _public_url(cls, url: str | None) -> str | None:
        """The invites carry it: the same rule (``protocol.wire.admin.ServiceUrl``)."""
        if url is None:
            return None
        try:
            return _URL.validate_python(url.rstrip("/"))
        except ValidationError:
            raise ValueError(
                "[coordinator] public_url must be an http:// or https:// URL with a host "
                "(8 to 2048 characters, no spaces)."
            ) from None


class CoordinatorFile(ConfigFile):
    """``coordinator.toml``: the schema of the file, its variables and secret files."""

    coordinator: CoordinatorTable
    analysts: list[AnalystCredential] = Field(default_factory=list)
    participants: list[ParticipantCredential] = Field(default_factory=list)
    tls: ServerTls | None = None


#: The settings ``FEDCLUST_...`` variables and secret files may give (infra.config_env).
_ENV = EnvSchema.of(CoordinatorFile)


@pydantic_dataclasses.dataclass(frozen=True, kw_only=True, config=DATACLASS_TABLE)
class CoordinatorSettings(CoordinatorTable):
    """Everything the coordinator app needs: the ``[coordinator]`` table's keys and the
    credentials and TLS of the file; build with :meth:`load` or directly.

    Attributes:
        analysts, participants: the credentials (hashes only), each name, id and token
            distinct.
        tls: HTTPS served, and used towards the counting service (``[tls]``).
    """

    analysts: tuple[AnalystCredential, ...]
    participants: tuple[ParticipantCredential, ...]
    tls: TlsSettings = dataclasses.field(default_factory=TlsSettings)

    @model_validator(mode="after")
    def _distinct(self) -> Self:
        ids = [p.id for p in self.participants]
        if len(set(ids)) != len(ids):
            raise ValueError("participant ids in the configuration must be distinct.")
        names = [a.name for a in self.analysts]
        if len(set(names)) != len(names):
            raise ValueError("analyst names in the configuration must be distinct.")
        hashes = [a.token_sha256 for a in self.analysts] + [
            p.token_sha256 for p in self.participants
        ]
        if len(set(hashes)) != len(hashes):
            raise ValueError("every analyst and participant needs its own token.")
        return self

    @classmethod
    def from_file(cls, path: str | Path) -> CoordinatorSettings:
        """Read ``coordinator.toml`` alone (its ``x_file`` keys read from their files);
        relative sqlite paths resolve beside the file.

        Errors start with the file's path.
        """
        return cls.load(path, environment=False)

    @classmethod
    def load(
        cls, path: str | Path | None = None, *, environment: bool = True
    ) -> CoordinatorSettings:
        """``coordinator.toml`` (optional) with the ``FEDCLUST_`` variables and secret files
        laid over it (:mod:`fedclust.infra.config_env`); without a file, relative paths
        resolve against the working directory.

        Errors start with the file's path (or "the environment") and name the variables.
        """
        layered = _ENV.load(
            path, what="the coordinator's config file", environment=environment
        )
        return layered.build(lambda doc, base: cls.from_mapping(doc, base_dir=base))

    @classmethod
    def from_mapping(
        cls, data: Mapping[str, Any], *, base_dir: Path | None = None
    ) -> CoordinatorSettings:
        """Build from the parsed TOML structure, validated by :class:`CoordinatorFile`;
        relative sqlite and TLS paths resolve against ``base_dir`` (None: the working
        directory, sqlite URLs unchanged)."""
        file = parse(CoordinatorFile, data)
        table = {key: getattr(file.coordinator, key) for key in fields_of(CoordinatorTable) or ()}
        if base_dir is not None:
            table["database_url"] = resolve_sqlite_url(table["database_url"], base_dir)
        return parse(cls, {
            **table, "analysts": tuple(file.analysts), "participants": tuple(file.participants),
            "tls": TlsSettings.from_model(file.tls, base=base_dir or Path.cwd()),
        })
