"""Call an ASGI app with a streamed request body and count the body bytes it consumed."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any


@dataclass
class RawResponse:
    """The status and headers an app sent, and how many body bytes it read."""

    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    consumed: int = 0


def call(
    app: Any,
    method: str,
    path: str,
    *,
    headers: dict[str, str] | None = None,
    body_bytes: int = 0,
    chunk: int = 1 << 20,
    declare_length: bool = True,
) -> RawResponse:
    """:func:`call_async` on a fresh event loop."""
    return asyncio.run(call_async(
        app, method, path, headers=headers, body_bytes=body_bytes, chunk=chunk,
        declare_length=declare_length,
    ))


async def call_async(
    app: Any,
    method: str,
    path: str,
    *,
    headers: dict[str, str] | None = None,
    body_bytes: int = 0,
    chunk: int = 1 << 20,
    declare_length: bool = True,
) -> RawResponse:
    """Send ``body_bytes`` zero bytes in ``chunk``-sized messages (Content-Length declared
    unless ``declare_length`` is false: then Transfer-Encoding: chunked) and record what the
    app answered and how much of the body it pulled through ``receive``."""
    out = RawResponse()
    sent = 0
    raw_headers = [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    if declare_length:
        raw_headers.append((b"content-length", str(body_bytes).encode()))
    else:
        raw_headers.append((b"transfer-encoding", b"chunked"))
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
        "scheme": "http", "path": path, "raw_path": path.encode(), "root_path": "",
        "query_string": b"", "headers": raw_headers, "client": ("127.0.0.1", 1),
        "server": ("test", 80),
    }

    async def receive() -> dict[str, Any]:
        nonlocal sent
        size = min(chunk, body_bytes - sent)
        sent += size
        out.consumed = sent
        return {"type": "http.request", "body": b"\0" * size, "more_body": sent < body_bytes}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            out.status = message["status"]
            out.headers = {k.decode().lower(): v.decode() for k, v in message["headers"]}
        elif message["type"] == "http.response.body":
            out.body += message.get("body", b"")

    await app(scope, receive, send)
    return out
