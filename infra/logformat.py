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
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from datetime import UTC, datetime
from typing import Final, Literal, TextIO

__all__ = [
    "ENV_VAR",
    "FORMATS",
    "JsonFormatter",
    "LogFormat",
    "RedactingTextFormatter",
    "configure_logging",
    "redact",
    "resolve_format",
]

LogFormat = Literal["text", "json"]
FORMATS: Final[tuple[LogFormat, ...]] = ("text", "json")
ENV_VAR: Final = "FEDCLUST_LOG_FORMAT"
_CONTEXT: Final = ("job_id", "round", "task_id")
_TEXT_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s: %(message)s"

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
