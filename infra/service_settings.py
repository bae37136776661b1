"""What the services' settings have in common: the keys of every service's own table
(``host``, ``port``, ``database_url``, ``metrics``, ``uploads_in_flight``) in the environment
schema of its config file (:mod:`infra.config_env`), and the checks of the served options."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fedclust.infra.config_env import EnvSchema, tls_schema

__all__ = ["check_served", "service_env"]


def service_env(
    table: str, own: Mapping[str, type], *, arrays: tuple[str, ...], tls_keys: frozenset[str]
) -> EnvSchema:
    """The schema of a service whose table ``[table]`` holds the common keys and ``own``
    (``{"min_participants": int}``), with the arrays of tables ``arrays`` and ``[tls]``."""
    keys = {"host": str, "port": int, "database_url": str, **own, "metrics": bool,
            "uploads_in_flight": int}
    sections: dict[str, Any] = {table: keys}
    sections |= {array: list[dict[str, Any]] for array in arrays}
    sections["tls"] = tls_schema(tls_keys)
    return EnvSchema(sections)


def check_served(metrics: object, uploads_in_flight: object, *, prefix: str = "") -> None:
    """Refuse a ``metrics`` that is not true or false, and an ``uploads_in_flight`` that is not
    an integer >= 1 (each message starts with ``prefix`` and the key)."""
    if not isinstance(metrics, bool):
        raise ValueError(f"{prefix}metrics must be true or false.")
    if isinstance(uploads_in_flight, bool) or not isinstance(
        uploads_in_flight, int
    ) or uploads_in_flight < 1:
        raise ValueError(f"{prefix}uploads_in_flight must be an integer >= 1.")
