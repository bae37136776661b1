"""Settings of the counting service, read from ``counting.toml``.

Tables: ``[counting]`` (host, port, database_url, min_participants (3), paillier_bits (2048,
>= 1024), coordinator_token_sha256, metrics, uploads_in_flight), ``[[participants]]`` (id,
token_sha256) and the optional ``[tls]`` (:mod:`fedclust.infra.tls`).
:class:`CountingSettings` is the parsed file.

Contracts: only SHA-256 digests of tokens are stored (:func:`crypto.tokens.token_sha256`), 64
hex digits each. :meth:`CountingSettings.load` lays the environment over the file, or reads it
alone (:mod:`fedclust.infra.config_env`).

Design notes: ``docs/services.md`` (§ Counting service settings: an annotated example).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from fedclust.crypto.tokens import check_sha256_hex
from fedclust.infra import auth
from fedclust.infra.body_limit import UPLOADS_IN_FLIGHT
from fedclust.infra.config_toml import only_keys, resolve_sqlite_url
from fedclust.infra.service_settings import check_served, service_env
from fedclust.infra.tls import COUNTING_KEYS, TlsSettings

__all__ = ["CountingSettings", "ParticipantCredential"]

#: The settings ``FEDCLUST_...`` variables and secret files may give (infra.config_env).
_ENV = service_env(
    "counting", {"min_participants": int, "paillier_bits": int, "coordinator_token_sha256": str},
    arrays=("participants",), tls_keys=COUNTING_KEYS,
)


class ParticipantCredential(auth.ParticipantCredential):
    """A participant allowed to report counts: its id and the SHA-256 of its token; errors
    in the counting service's wording."""

    ID_ERROR = "participant id must be 1-64 characters of letters, digits, '_', '.', '-'."
    DIGEST_WHERE = "token_sha256 of participant {id!r}"


@dataclass(frozen=True)
class CountingSettings:
    """Configuration of one counting service.

    Attributes:
        coordinator_token_sha256: digest of the token the coordinator presents.
        participants: the enrolled participants; only they may report counts.
        database_url: any SQLAlchemy URL (SQLite file by default).
        min_participants: the smallest roster whose total is ever released (>= 1); the
            Paillier key holder decrypts aggregates of at least max(3, this) contributions.
        paillier_bits: the modulus size of each job's Paillier key pair (>= 1024).
        host, port: where ``fedclust counter serve`` listens.
        tls: HTTPS and mutual TLS (``[tls]``, with ``coordinator_name``: the name the
            coordinator's client certificate must carry for its token to count).
        metrics: serve Prometheus metrics at ``GET /metrics`` without a token (off by
            default; see :mod:`infra.observability`).
        uploads_in_flight: how many large bodies one caller may have in flight at once
            (:mod:`infra.body_limit`; more are answered 429).
    """

    coordinator_token_sha256: str = field(repr=False)
    participants: tuple[ParticipantCredential, ...] = ()
    database_url: str = field(default="sqlite:///counting.db", repr=False)  # a password?
    min_participants: int = 3
    paillier_bits: int = 2048
    host: str = "127.0.0.1"
    port: int = 8701
    tls: TlsSettings = field(default_factory=TlsSettings)
    metrics: bool = False
    uploads_in_flight: int = UPLOADS_IN_FLIGHT
    _by_id: Mapping[str, ParticipantCredential] = field(
        init=False, repr=False, compare=False, default_factory=dict
    )

    def __post_init__(self) -> None:
        object.__setattr__(
            self,
            "coordinator_token_sha256",
            check_sha256_hex(self.coordinator_token_sha256, where="coordinator_token_sha256"),
        )
        if isinstance(self.min_participants, bool) or not isinstance(self.min_participants, int):
            raise ValueError("min_participants must be an integer >= 1.")
        if self.min_participants < 1:
            raise ValueError(f"min_participants must be >= 1; got {self.min_participants}.")
        if isinstance(self.paillier_bits, bool) or not isinstance(self.paillier_bits, int):
            raise ValueError("paillier_bits must be an integer >= 1024.")
        if self.paillier_bits < 1024:
            raise ValueError(f"paillier_bits must be >= 1024; got {self.paillier_bits}.")
        check_served(self.metrics, self.uploads_in_flight)
        if isinstance(self.port, bool) or not isinstance(self.port, int):
            raise ValueError("port must be an integer in 1..65535.")
        if not 1 <= self.port <= 65535:
            raise ValueError(f"port must be in 1..65535; got {self.port}.")
        if not isinstance(self.host, str) or not self.host:
            raise ValueError("host must be a non-empty string.")
        try:
            make_url(self.database_url)
        except (ArgumentError, ValueError, TypeError) as exc:
            raise ValueError("database_url is not a valid SQLAlchemy URL.") from exc
        by_id: dict[str, ParticipantCredential] = {}
        digests = {self.coordinator_token_sha256}
        for p in self.participants:
            if p.id in by_id:
                raise ValueError(f"participant {p.id!r} is listed more than once.")
            if p.token_sha256 in digests:
                raise ValueError(
                    f"participant {p.id!r} shares a token with another principal; every "
                    "participant and the coordinator need their own token."
                )
            by_id[p.id] = p
            digests.add(p.token_sha256)
        object.__setattr__(self, "_by_id", by_id)

    def participant(self, participant_id: str) -> ParticipantCredential | None:
        """The credential of an enrolled participant, or None."""
        return self._by_id.get(participant_id)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> CountingSettings:
        """Read ``counting.toml`` alone (its ``x_file`` keys read from their files); errors
        name the file and the key."""
        return cls.load(path, environment=False)

    @classmethod
    def load(
        cls, path: str | os.PathLike[str] | None = None, *, environment: bool = True
    ) -> CountingSettings:
        """``counting.toml`` (optional) with the ``FEDCLUST_`` variables and secret files laid
        over it (:mod:`fedclust.infra.config_env`); without a file, relative paths resolve
        against the working directory. Errors name the file or the variable and the key."""
        layered = _ENV.load(
            path, what="the counting service's config file", environment=environment
        )
        return layered.build(lambda doc, base: cls._from_mapping(doc, base=base))

    @classmethod
    def _from_mapping(cls, doc: Mapping[str, Any], *, base: Path) -> CountingSettings:
        only_keys(doc, {"counting", "participants", "tls"}, where="the file")
        section = doc.get("counting")
        if not isinstance(section, dict):
            raise ValueError("missing the [counting] table.")
        only_keys(section, set(_ENV.sections["counting"]), where="[counting]")
        if "coordinator_token_sha256" not in section:
            raise ValueError("[counting] is missing 'coordinator_token_sha256'.")
        entries = doc.get("participants", [])
        if not isinstance(entries, list):
            raise ValueError("participants must be an array of tables ([[participants]]).")
        creds = []
        for i, entry in enumerate(entries):
            if not isinstance(entry, dict):
                raise ValueError(f"[[participants]] entry {i + 1} is not a table.")
            only_keys(entry, {"id", "token_sha256"}, where=f"[[participants]] entry {i + 1}")
            for key in ("id", "token_sha256"):
                if key not in entry:
                    raise ValueError(f"[[participants]] entry {i + 1} is missing {key!r}.")
            creds.append(ParticipantCredential(id=entry["id"], token_sha256=entry["token_sha256"]))
        kwargs: dict[str, Any] = {
            k: section[k]
            for k in (
                "host", "port", "min_participants", "paillier_bits", "metrics",
                "uploads_in_flight",
            )
            if k in section
        }
        if "database_url" in section:
            if not isinstance(section["database_url"], str):
                raise ValueError("[counting] database_url must be a string.")
            kwargs["database_url"] = resolve_sqlite_url(section["database_url"], base)
        return cls(
            coordinator_token_sha256=section["coordinator_token_sha256"],
            participants=tuple(creds),
            tls=TlsSettings.from_table(doc.get("tls"), base=base, allowed=COUNTING_KEYS),
            **kwargs,
        )


