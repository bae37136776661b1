"""ASGI middleware bounding a request body, shared by the coordinator and the counting service."""

from __future__ import annotations

from typing import Any

__all__ = ["BodySizeLimit"]


class _TooLargeError(Exception):
    pass


class BodySizeLimit:
    """ASGI middleware answering 413 to a request body over ``max_bytes``.

    A declared Content-Length over the limit is refused before anything is read; a body
    sent without one is counted as it streams and refused once it passes the limit, so a
    hostile client cannot make a service buffer an unbounded body.
    """

    def __init__(self, app: Any, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers", [])).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(send)
            return
        seen = 0
        started = False

        async def counted_receive() -> Any:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise _TooLargeError
            return message

        async def tracked_send(message: Any) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted_receive, tracked_send)
        except _TooLargeError:
            if not started:
                await self._refuse(send)

    async def _refuse(self, send: Any) -> None:
        body = b'{"detail":"request body larger than %d bytes"}' % self.max_bytes
        await send({
            "type": "http.response.start",
            "status": 413,
            "headers": [(b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode())],
        })
        await send({"type": "http.response.body", "body": body})
