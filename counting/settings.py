"""Settings of the counting service, read from ``counting.toml``.

Tables: ``[counting]`` (host, port, database_url, min_participants (3), paillier_bits (2048,
>= 1024), coordinator_token_sha256, metrics, uploads_in_flight), ``[[participants]]`` (id,
token_sha256) and the optional ``[tls]`` (:mod:`fedclust.infra.tls`). :class:`CountingFile`
is the file's schema (a model per table), :class:`CountingSettings` the parsed file.

Contracts: only SHA-256 digests of tokens are stored (:func:`crypto.tokens.token_sha256`), 64
hex digits each. :meth:`CountingSettings.load` lays the environment over the file, or reads it
alone (:mod:`fedclust.infra.config_env`).

Design notes: ``docs/services.md`` (§ Counting service settings: an annotated example).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Self

from pydantic import Field, Strict, StrictStr, model_validator
from pydantic import dataclasses as pydantic_dataclasses

from fedclust.crypto.tokens import check_sha256_hex
from fedclust.infra import auth
from fedclust.infra.config_env import EnvSchema
from fedclust.infra.config_toml import (
    DATACLASS_TABLE,
    ConfigFile,
    fields_of,
    parse,
    resolve_sqlite_url,
)
from fedclust.infra.service_settings import DatabaseUrl, Port, ServedTable
from fedclust.infra.tls import CountingTls, TlsSettings

__all__ = ["CountingFile", "CountingSettings", "CountingTable", "ParticipantCredential"]


class ParticipantCredential(auth.ParticipantCredential):
    """A participant allowed to report counts: its id and the SHA-256 of its token; the
    digest named in the counting service's wording."""

    DIGEST_WHERE = "token_sha256 of participant {id!r}"


@pydantic_dataclasses.dataclass(frozen=True, kw_only=True, config=DATACLASS_TABLE)
class CountingTable(ServedTable):
    """The ``[counting]`` table (and :class:`ServedTable`'s keys).

    Attributes:
        coordinator_token_sha256: digest of the token the coordinator presents.
        min_participants: the smallest roster whose total is ever released (>= 1); the
            Paillier key holder decrypts aggregates of at least max(3, this) contributions.
        paillier_bits: the modulus size of each job's Paillier key pair (>= 1024).
    """

    port: Port = 8701
    database_url: DatabaseUrl = Field(default="sqlite:///counting.db", repr=False)
    coordinator_token_sha256: StrictStr = Field(repr=False)
    min_participants: Annotated[int, Strict()] = Field(default=3, ge=1)
    paillier_bits: Annotated[int, Strict()] = Field(default=2048, ge=1024)

    def __post_init__(self) -> None:
        object.__setattr__(
            self,
            "coordinator_token_sha256",
            check_sha256_hex(
                self.coordinator_token_sha256, where="[counting] coordinator_token_sha256"
            ),
        )


class CountingFile(ConfigFile):
    """``counting.toml``: the schema of the file, its variables and secret files."""

    counting: CountingTable
    participants: list[ParticipantCredential] = Field(default_factory=list)
    tls: CountingTls | None = None


#: The settings ``FEDCLUST_...`` variables and secret files may give (infra.config_env).
_ENV = EnvSchema.of(CountingFile)


@pydantic_dataclasses.dataclass(frozen=True, kw_only=True, config=DATACLASS_TABLE)
class CountingSettings(CountingTable):
    """Configuration of one counting service: the ``[counting]`` table's keys, and

    Attributes:
        participants: the enrolled participants; only they may report counts (ids and
            tokens distinct, none the coordinator's).
        tls: HTTPS and mutual TLS (``[tls]``, with ``coordinator_name``: the name the
            coordinator's client certificate must carry for its token to count).
    """

    participants: tuple[ParticipantCredential, ...] = ()
    tls: TlsSettings = dataclasses.field(default_factory=TlsSettings)

    @model_validator(mode="after")
    def _distinct(self) -> Self:
        seen: set[str] = set()
        digests = {self.coordinator_token_sha256}
        for p in self.participants:
            if p.id in seen:
                raise ValueError(f"participant {p.id!r} is listed more than once.")
            if p.token_sha256 in digests:
                raise ValueError(
                    f"participant {p.id!r} shares a token with another principal; every "
                    "participant and the coordinator need their own token."
                )
            seen.add(p.id)
            digests.add(p.token_sha256)
        return self

    @cached_property
    def _by_id(self) -> dict[str, ParticipantCredential]:
        return {p.id: p for p in self.participants}

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
        file = parse(CountingFile, doc)
        table = {key: getattr(file.counting, key) for key in fields_of(CountingTable) or ()}
        given = doc.get("counting")
        if isinstance(given, Mapping) and "database_url" in given:  # the default: the cwd's
            table["database_url"] = resolve_sqlite_url(table["database_url"], base)
        return parse(cls, {
            **table, "participants": tuple(file.participants),
            "tls": TlsSettings.from_model(file.tls, base=base),
        })
