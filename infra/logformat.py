"""How the services log: text (the default) or one JSON object per line, secrets redacted.

``configure_logging("json")`` (``--log-format json``, or ``FEDCLUST_LOG_FORMAT=json`` when no
flag is given) makes every record one line of JSON with ``timestamp`` (UTC, ISO 8601),
``level``, ``logger`` and ``message``, plus ``job_id``, ``round`` and ``task_id`` when a caller
passes them with ``extra=``, and ``exception`` for a logged traceback. Log shippers read these
lines without a parsing rule.

Both formats pass every message through :func:`redact`: a bearer token, a ``token=...``
pair, a ``token = "..."`` TOML line or a ``"token": "..."`` mapping entry becomes
``[redacted]``, so a request or config
logged by mistake does not leak a credential (the code itself never logs tokens).

Each service logs one line at start (:func:`startup_line`): its version, the URL it listens
on (the agent: the services it calls), its database without the password
(:func:`shown_database_url`) and its TLS mode (:func:`tls_mode`).
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from importlib import metadata
from typing import TYPE_CHECKING, Final, Literal, TextIO

if TYPE_CHECKING:
    from fedclust.infra.tls import TlsSettings

__all__ = [
    "ENV_VAR",
    "FORMATS",
    "JsonFormatter",
    "LogFormat",
    "RedactingTextFormatter",
    "configure_logging",
    "redact",
    "resolve_format",
    "service_url",
    "shown_database_url",
    "startup_line",
    "tls_mode",
]

LogFormat = Literal["text", "json"]
FORMATS: Final[tuple[LogFormat, ...]] = ("text", "json")
ENV_VAR: Final = "FEDCLUST_LOG_FORMAT"
_CONTEXT: Final = ("job_id", "round", "task_id")
_TEXT_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s: %(message)s"

#: ``user:password@`` in a URL that SQLAlchemy cannot parse (the password is dropped anyway).
_URL_PASSWORD: Final = re.compile(r"(//[^/:@]*):[^/@]*@")
_SECRETS: Final = (
    re.compile(r"(?i)(bearer\s+)[^\s,;\"']+"),  # an Authorization header's value
    re.compile(r"(?i)(\b\w*token\w*\s*=\s*[\"']?)[^\s,;&\"']+"),  # token=..., token = "..."
    re.compile(r"(?i)([\"']\w*token\w*[\"']\s*:\s*[\"'])[^\"']+"),  # {"token": "..."}
)


def redact(text: str) -> str:
    """``text`` with bearer tokens and ``...token=value`` pairs replaced by ``[redacted]``."""
    for pattern in _SECRETS:
        text = pattern.sub(r"\1[redacted]", text)
    return text


class RedactingTextFormatter(logging.Formatter):
    """The usual one-line text format, redacted (:func:`redact`)."""

    def __init__(self) -> None:
        super().__init__(_TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


class JsonFormatter(logging.Formatter):
    """One JSON object per record (module docstring), redacted (:func:`redact`)."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, object] = {
            "timestamp": datetime.fromtimestamp(record.created, UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "message": redact(record.getMessage()),
        }
        for key in _CONTEXT:
            value = record.__dict__.get(key)
            if value is not None:
                doc[key] = value if isinstance(value, int | float) else redact(str(value))
        if record.exc_info:
            doc["exception"] = redact(self.formatException(record.exc_info))
        return json.dumps(doc, ensure_ascii=False, default=str)


def resolve_format(flag: str | None) -> LogFormat:
    """The flag's format, else ``$FEDCLUST_LOG_FORMAT``, else text; a ValueError names a bad one."""
    value = flag if flag is not None else os.environ.get(ENV_VAR, "text")
    value = value.strip().lower() or "text"
    for known in FORMATS:
        if value == known:
            return known
    raise ValueError(f"log format must be one of {', '.join(FORMATS)}; got {value!r}.")


def configure_logging(
    flag: str | None = None, *, stream: TextIO | None = None, level: int = logging.INFO
) -> LogFormat:
    """Send the root logger's records to ``stream`` (stderr) in the resolved format.

    Replaces the root logger's handlers (a service configures logging once, at start-up) and
    quiets httpx's one line per request (one per long poll otherwise). Returns the format.
    """
    chosen = resolve_format(flag)
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if chosen == "json" else RedactingTextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("httpcore").setLevel(logging.WARNING)
    return chosen


def shown_database_url(url: str) -> str:
    """A database URL to print or log: its password replaced by ``***``."""
    from sqlalchemy.engine import make_url  # the services load SQLAlchemy anyway
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):
        return _URL_PASSWORD.sub(r"\1:***@", url)


def tls_mode(tls: TlsSettings, *, serving: bool, url: str = "") -> str:
    """"off", "server TLS" or "mutual TLS": a service's (``serving``) by its ``[tls]``
    table; a client's by the scheme of the ``url`` it calls and whether it presents a
    certificate."""
    if serving:
        secure, mutual = tls.serves_https, tls.verifies_clients
    else:
        secure, mutual = url.startswith("https://"), tls.certificate is not None
    if not secure:
        return "off"
    return "mutual TLS" if mutual else "server TLS"


def service_url(host: str, port: int, tls: TlsSettings) -> str:
    """The URL a service with these settings listens on (an IPv6 host in brackets)."""
    shown = f"[{host}]" if ":" in host else host
    return f"{'https' if tls.serves_https else 'http'}://{shown}:{port}"


def package_version() -> str:
    """fedclust's installed version ("unknown" when run from a tree not installed)."""
    try:
        return metadata.version("fedclust")
    except metadata.PackageNotFoundError:
        return "unknown"


def startup_line(
    service: str, *, tls: str, listens: str | None = None,
    calls: Sequence[tuple[str, str]] = (), database_url: str | None = None,
) -> str:
    """The line a service logs at start: ``service``, fedclust's version, the URL it
    ``listens`` on or the ``calls`` it makes (name, URL), the database (password hidden) and
    the TLS mode; redacted (:func:`redact`) like every logged line."""
    parts = [f"{service} starting: fedclust {package_version()}"]
    if listens is not None:
        parts.append(f"listening on {listens}")
    parts += [f"{name} {url}" for name, url in calls]
    if database_url is not None:
        parts.append(f"database {shown_database_url(database_url)}")
    parts.append(f"TLS {tls}")
    return redact(", ".join(parts))
