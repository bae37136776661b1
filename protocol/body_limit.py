"""ASGI middleware guarding request bodies, shared by the coordinator and the counting service.

A body is the most a hostile client can make a service hold. :class:`BodySizeLimit`
refuses, before the body is read or parsed:

- a request carrying a body without a known bearer token (401), when the app passes
  ``authorised``: every route that takes a body is authenticated, so a stranger's body is
  never worth reading (but the few ``public`` routes, e.g. redeeming an invitation, which
  keep their small limit); a request that ``certified`` accepts (its verified client
  certificate names a member, where the service lets a certificate stand for the token)
  counts as known;
- a body over its route's limit (413): ``routes`` gives small limits to small messages
  (enrolment, audit heads), every other route has ``max_bytes``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["BodySizeLimit", "RouteLimit", "bearer_token"]

#: ``(method, path pattern, max bytes)``: the pattern must match the whole request path.
RouteLimit = tuple[str, str, int]


class _TooLargeError(Exception):
    pass


def bearer_token(headers: Sequence[tuple[bytes, bytes]]) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, if there is one."""
    for name, value in headers:
        if name.lower() == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            token = token.strip()
            return token if scheme.lower() == "bearer" and token else None
    return None


class BodySizeLimit:
    """ASGI middleware answering 401 to an unauthenticated body and 413 to a body over limit.

    A declared Content-Length over the route's limit is refused before anything is read; a
    body sent without one is counted as it streams and refused once it passes the limit, so a
    hostile client cannot make a service buffer an unbounded body. With ``authorised`` (does
    this bearer token belong to a known caller?), a request that declares a body (a nonzero
    Content-Length, or Transfer-Encoding) without a token it accepts is answered 401 with
    ``WWW-Authenticate: Bearer`` and its body is never read, unless it has no token and
    ``certified(scope)`` accepts its client certificate; ``public`` lists the
    ``(method, path pattern)`` routes exempt from that (their body limit still applies).
    """

    def __init__(
        self,
        app: Any,
        *,
        max_bytes: int,
        routes: Sequence[RouteLimit] = (),
        authorised: Callable[[str], bool] | None = None,
        public: Sequence[tuple[str, str]] = (),
        certified: Callable[[Mapping[str, Any]], bool] | None = None,
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.routes = [(m.upper(), re.compile(p), n) for m, p, n in routes]
        self.authorised = authorised
        self.public = [(m.upper(), re.compile(p)) for m, p in public]
        self.certified = certified

    def _public(self, method: str, path: str) -> bool:
        return any(m == method and p.fullmatch(path) for m, p in self.public)

    def limit(self, method: str, path: str) -> int:
        """The body limit of a request to ``method path``."""
        for route_method, pattern, max_bytes in self.routes:
            if route_method == method and pattern.fullmatch(path):
                return max_bytes
        return self.max_bytes

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers: list[tuple[bytes, bytes]] = list(scope.get("headers", []))
        fields = {name.lower(): value for name, value in headers}
        declared = fields.get(b"content-length")
        has_body = b"transfer-encoding" in fields or (
            declared is not None and declared.strip() not in (b"", b"0")
        )
        if has_body and self.authorised is not None and not self._public(
            scope.get("method", "GET"), scope.get("path", "")
        ):
            token = bearer_token(headers)
            known = token is not None and self.authorised(token)
            if not known and token is None and self.certified is not None:
                known = self.certified(scope)
            if not known:
                await _answer(send, 401, b'{"detail":"a valid bearer token is required"}',
                              [(b"www-authenticate", b"Bearer")])
                return
        max_bytes = self.limit(scope.get("method", "GET"), scope.get("path", ""))
        if declared is not None and declared.isdigit() and int(declared) > max_bytes:
            await self._refuse(send, max_bytes)
            return
        seen = 0
        started = False

        async def counted_receive() -> Any:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > max_bytes:
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
                await self._refuse(send, max_bytes)

    async def _refuse(self, send: Any, max_bytes: int) -> None:
        await _answer(send, 413, b'{"detail":"request body larger than %d bytes"}' % max_bytes)


async def _answer(
    send: Any, status: int, body: bytes, headers: Sequence[tuple[bytes, bytes]] = ()
) -> None:
    await send({
        "type": "http.response.start",
        "status": status,
        "headers": [(b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()), *headers],
    })
    await send({"type": "http.response.body", "body": body})
