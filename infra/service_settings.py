"""What the services' settings have in common: the keys of every service's own table
(``host``, ``port``, ``database_url``, ``metrics``, ``uploads_in_flight``) as one table model,
which the coordinator's and the counting service's tables extend (:mod:`infra.config_toml`)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, Strict, StrictBool, StrictStr, field_validator
from pydantic.dataclasses import dataclass
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from fedclust.infra.body_limit import UPLOADS_IN_FLIGHT
from fedclust.infra.config_toml import DATACLASS_TABLE

__all__ = ["DatabaseUrl", "Port", "ServedTable"]

#: A TCP port.
Port = Annotated[int, Strict(), Field(ge=1, le=65535)]
#: A SQLAlchemy URL (a relative sqlite path resolves against the config file's folder).
DatabaseUrl = Annotated[StrictStr, Field(min_length=1, description="a SQLAlchemy URL")]


@dataclass(frozen=True, kw_only=True, config=DATACLASS_TABLE)
class ServedTable:
    """The keys every service's table has (a subclass gives ``port`` and ``database_url``
    their defaults).

    Attributes:
        host, port: where the service listens.
        database_url: any SQLAlchemy URL (hidden from reprs: it may hold a password).
        metrics: serve Prometheus metrics at ``GET /metrics``, without a token (an operator's
            scrape from inside; off by default, see :mod:`infra.observability`).
        uploads_in_flight: how many large bodies one caller may have in flight at once
            (:mod:`infra.body_limit`; more are answered 429).
    """

    host: StrictStr = Field(
        default="127.0.0.1", pattern=r"\S", description="a host name or address"
    )
    port: Port
    database_url: DatabaseUrl = Field(repr=False)
    metrics: StrictBool = False
    uploads_in_flight: Annotated[int, Strict()] = Field(
        default=UPLOADS_IN_FLIGHT, ge=1, description="an integer >= 1"
    )

    @field_validator("database_url")
    @classmethod
    def _sqlalchemy_url(cls, url: str) -> str:
        try:
            make_url(url)
        except (ArgumentError, ValueError):
            raise ValueError("database_url is not a valid SQLAlchemy URL.") from None
        return url
