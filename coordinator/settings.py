"""The coordinator service's configuration (``coordinator.toml``).

Tables: ``[coordinator]`` (host, port, public_url, database_url, counting_url, counting_token,
task_timeout_seconds, metrics, uploads_in_flight), ``[[analysts]]`` (name, token_sha256,
role "analyst" or "admin"), ``[[participants]]`` (id, token_sha256) and the optional ``[tls]``
(:mod:`fedclust.infra.tls`). :class:`CoordinatorSettings` is the parsed file.

Contracts: credentials are stored only as the SHA-256 hex of each bearer token
(:func:`crypto.tokens.token_sha256`); the one secret kept in clear is the token presented to
the counting service; empty tokens and malformed hashes are refused when the file is read.
:meth:`CoordinatorSettings.load` lays the environment over the file, or reads it alone
(:mod:`fedclust.infra.config_env`).

Design notes: ``docs/services.md`` (§ Coordinator settings: an annotated example).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import TypeAdapter, ValidationError

from fedclust.crypto.tokens import check_sha256_hex
from fedclust.infra.auth import ParticipantCredential
from fedclust.infra.body_limit import UPLOADS_IN_FLIGHT
from fedclust.infra.config_toml import resolve_sqlite_url
from fedclust.infra.service_settings import check_served, service_env
from fedclust.infra.tls import SERVER_KEYS, TlsSettings
from fedclust.protocol.wire.admin import ServiceUrl

__all__ = [
    "AnalystCredential",
    "AnalystRole",
    "CoordinatorSettings",
    "ParticipantCredential",
]

#: An analyst sees and cancels the jobs it created; an admin sees and cancels every job.
AnalystRole = Literal["analyst", "admin"]

#: The settings ``FEDCLUST_...`` variables and secret files may give (infra.config_env).
_ENV = service_env(
    "coordinator",
    {"counting_url": str, "counting_token": str, "task_timeout_seconds": float, "public_url": str},
    arrays=("analysts", "participants"), tls_keys=SERVER_KEYS,
)


@dataclass(frozen=True)
class AnalystCredential:
    """An analyst: a name (the owner recorded on its jobs), the SHA-256 of its token and
    its role."""

    name: str
    token_sha256: str = field(repr=False)
    role: AnalystRole = "analyst"

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("analyst name must be non-empty.")
        if self.role not in get_args(AnalystRole):
            raise ValueError(
                f"analyst {self.name!r}: role must be 'analyst' or 'admin'; got {self.role!r}."
            )
        object.__setattr__(
            self, "token_sha256", check_sha256_hex(
                self.token_sha256, where=f"analyst {self.name!r}: token_sha256"
            )
        )


@dataclass(frozen=True)
class CoordinatorSettings:
    """Everything the coordinator app needs; build with :meth:`from_file` or directly.

    Attributes:
        counting_url: base URL of the counting service (``/api/v1`` is appended).
        counting_token: the bearer token the coordinator presents to the counting service.
        analysts, participants: the credentials (hashes only).
        database_url: any SQLAlchemy URL; sqlite by default.
        task_timeout_seconds: how long a job waits for one participant's answer.
        tls: HTTPS served, and used towards the counting service (``[tls]``).
        metrics: serve Prometheus metrics at ``GET /metrics``, without a token (an operator's
            scrape from inside; off by default, see :mod:`infra.observability`).
        uploads_in_flight: how many large bodies one caller may have in flight at once
            (:mod:`infra.body_limit`; more are answered 429).
        public_url: the URL participants reach the coordinator at (behind a proxy or a
            name other than ``host``); invitations carry it (``fedclust federation invite``).
    """

    counting_url: str
    counting_token: str = field(repr=False)
    analysts: tuple[AnalystCredential, ...]
    participants: tuple[ParticipantCredential, ...]
    database_url: str = field(default="sqlite:///coordinator.db", repr=False)  # a password?
    host: str = "127.0.0.1"
    port: int = 8700
    task_timeout_seconds: float = 600.0
    tls: TlsSettings = field(default_factory=TlsSettings)
    metrics: bool = False
    uploads_in_flight: int = UPLOADS_IN_FLIGHT
    public_url: str | None = None

    def __post_init__(self) -> None:
        check_served(self.metrics, self.uploads_in_flight, prefix="coordinator.")
        if self.public_url is not None:
            url = self.public_url.rstrip("/") if isinstance(self.public_url, str) else None
            try:  # the invites carry it: the same rule (protocol.wire.admin.ServiceUrl)
                TypeAdapter(ServiceUrl).validate_python(url)
            except ValidationError:
                raise ValueError(
                    "coordinator.public_url must be an http:// or https:// URL with a host "
                    f"(8 to 2048 characters, no spaces); got {self.public_url!r}."
                ) from None
            object.__setattr__(self, "public_url", url)
        if not isinstance(self.counting_token, str) or not self.counting_token:
            raise ValueError("coordinator.counting_token must be a non-empty string.")
        if not self.counting_url:
            raise ValueError("coordinator.counting_url must be a non-empty URL.")
        if not self.database_url:
            raise ValueError("coordinator.database_url must be a non-empty SQLAlchemy URL.")
        if not 1 <= self.port <= 65535:
            raise ValueError(f"coordinator.port must be in [1, 65535]; got {self.port}.")
        if not self.task_timeout_seconds > 0:
            raise ValueError("coordinator.task_timeout_seconds must be > 0.")
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
        """Build from the parsed TOML structure (see the module docstring)."""
        section = data.get("coordinator")
        if not isinstance(section, Mapping):
            raise ValueError("the configuration needs a [coordinator] table.")
        unknown = sorted(set(section) - set(_ENV.sections["coordinator"]))
        if unknown:
            raise ValueError(f"unknown keys in [coordinator]: {', '.join(unknown)}.")
        for key in ("counting_url", "counting_token"):
            if not isinstance(section.get(key), str):
                raise ValueError(f"coordinator.{key} must be a string.")
        analysts = tuple(
            AnalystCredential(
                name=str(a.get("name", "")), token_sha256=a.get("token_sha256", ""),
                role=a.get("role", "analyst"),
            )
            for a in _tables(data, "analysts")
        )
        participants = tuple(
            ParticipantCredential(id=p.get("id", ""), token_sha256=p.get("token_sha256", ""))
            for p in _tables(data, "participants")
        )
        url = str(section.get("database_url", "sqlite:///coordinator.db"))
        return cls(
            counting_url=section["counting_url"],
            counting_token=section["counting_token"],
            analysts=analysts,
            participants=participants,
            database_url=url if base_dir is None else resolve_sqlite_url(url, base_dir),
            host=str(section.get("host", "127.0.0.1")),
            port=int(section.get("port", 8700)),
            task_timeout_seconds=float(section.get("task_timeout_seconds", 600.0)),
            tls=TlsSettings.from_table(data.get("tls"), base=base_dir or Path.cwd()),
            metrics=section.get("metrics", False),
            uploads_in_flight=section.get("uploads_in_flight", UPLOADS_IN_FLIGHT),
            public_url=section.get("public_url"),
        )


def _tables(data: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    tables = data.get(key, [])
    if not isinstance(tables, list) or not all(isinstance(t, Mapping) for t in tables):
        raise ValueError(f"[[{key}]] must be an array of tables.")
    return tables


