"""ASGI middleware guarding request bodies, shared by the coordinator and the counting service.

:class:`BodySizeLimit` refuses, before a body is read or parsed: a body from a caller the
service does not accept (401, or 403 for another principal's client certificate; ``public``
routes excepted); a body over its route's limit (413; ``routes``, else ``max_bytes``); a large
body (over :data:`LARGE_BODY_BYTES` or of undeclared length) beyond ``uploads_in_flight``, or a
small one beyond :data:`SMALL_UPLOADS_IN_FLIGHT`, in flight from one caller (429 with
``Retry-After``); and any body when the caller cannot be determined because the service failed
(503 with ``Retry-After``). Every refusal closes the connection. With
:func:`deferred_body_protocol` the server parses at most :data:`PARSE_AHEAD_BYTES` of a body
before the guard has answered.

Design notes: ``docs/services.md`` (§ The guard on request bodies).
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import re
import threading
from collections import Counter
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from starlette.exceptions import HTTPException

if TYPE_CHECKING:
    from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = [
    "LARGE_BODY_BYTES", "PARSE_AHEAD_BYTES", "SMALL_UPLOADS_IN_FLIGHT", "UPLOADS_IN_FLIGHT",
    "BodySizeLimit", "RouteLimit", "bearer_token", "deferred_body_protocol",
]

#: ``(method, path pattern, max bytes)``: the pattern must match the whole request path.
RouteLimit = tuple[str, str, int]

#: A body over this many bytes (or of undeclared length) counts as a large upload.
LARGE_BODY_BYTES: Final = 1024 * 1024
#: The default number of large uploads one caller may have in flight at once.
UPLOADS_IN_FLIGHT: Final = 2
#: The number of bodies of at most :data:`LARGE_BODY_BYTES` one caller may have in flight.
SMALL_UPLOADS_IN_FLIGHT: Final = 32
#: The most bytes after a request's head that the server parses before its app has run once.
PARSE_AHEAD_BYTES: Final = 8 * 1024
_RETRY_AFTER_SECONDS: Final = 1
_CLOSE: Final = (b"connection", b"close")
_UNAVAILABLE: Final = (
    b'{"detail":"the service cannot authenticate requests right now; try again later"}'
)

log = logging.getLogger(__name__)


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
    """ASGI middleware refusing unauthenticated, oversized and excess large bodies unread.

    A declared Content-Length over the route's limit is refused before anything is read; a
    body sent without one is counted as it streams and refused once it passes the limit, so a
    hostile client cannot make a service buffer an unbounded body. With ``caller`` (the
    request's principal, from its scope: a hashable identity, or ``HTTPException`` 401/403),
    a request that declares a body (a nonzero Content-Length, or Transfer-Encoding) on a route
    not in ``public`` (``(method, path pattern)`` pairs) is answered with the exception's
    status and detail and its body is never read unless ``caller`` accepts it (any other
    error of ``caller``: 503); an accepted caller may have at most ``uploads_in_flight`` large
    bodies (:data:`LARGE_BODY_BYTES`) and :data:`SMALL_UPLOADS_IN_FLIGHT` others in the app at
    once. Every refusal closes the connection.
    """

    def __init__(
        self,
        app: Any,
        *,
        max_bytes: int,
        routes: Sequence[RouteLimit] = (),
        caller: Callable[[Mapping[str, Any]], Hashable] | None = None,
        public: Sequence[tuple[str, str]] = (),
        uploads_in_flight: int = UPLOADS_IN_FLIGHT,
    ) -> None:
        if isinstance(uploads_in_flight, bool) or not (
            isinstance(uploads_in_flight, int) and uploads_in_flight >= 1
        ):
            raise ValueError("uploads_in_flight must be an integer >= 1.")
        self.app = app
        self.max_bytes = max_bytes
        self.routes = [(m.upper(), re.compile(p), n) for m, p, n in routes]
        self.caller = caller
        self.public = [(m.upper(), re.compile(p)) for m, p in public]
        self.uploads_in_flight = uploads_in_flight
        self._in_flight: Counter[tuple[Hashable, bool]] = Counter()  # (caller, large)
        self._lock = threading.Lock()  # TestClients may drive one app from several loops

    def _public(self, method: str, path: str) -> bool:
        return any(m == method and p.fullmatch(path) for m, p in self.public)

    def limit(self, method: str, path: str) -> int:
        """The body limit of a request to ``method path``."""
        for route_method, pattern, max_bytes in self.routes:
            if route_method == method and pattern.fullmatch(path):
                return max_bytes
        return self.max_bytes

    def in_flight(self, caller: Hashable, *, large: bool = True) -> int:
        """How many large (else smaller) bodies of ``caller`` the app is handling now."""
        with self._lock:
            return self._in_flight[caller, large]

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method, path = scope.get("method", "GET"), scope.get("path", "")
        fields = {name.lower(): value for name, value in scope.get("headers", [])}
        declared = fields.get(b"content-length")
        length = int(declared) if declared is not None and declared.isdigit() else None
        has_body = b"transfer-encoding" in fields or (
            declared is not None and declared.strip() not in (b"", b"0")
        )
        principal: Hashable = None
        if has_body and self.caller is not None and not self._public(method, path):
            try:
                principal = self.caller(scope)
            except HTTPException as exc:
                await _answer(send, exc.status_code, _detail(exc.detail),
                              list((exc.headers or {}).items()))
                return
            except Exception:  # the service failed, not the caller: 503, the body unread
                log.exception("body guard: the caller of %s %s could not be determined; "
                              "answered 503", method, path)
                await _answer(send, 503, _UNAVAILABLE,
                              [("Retry-After", str(_RETRY_AFTER_SECONDS))])
                return
        max_bytes = self.limit(method, path)
        if length is not None and length > max_bytes:
            await self._refuse(send, max_bytes)
            return
        share = (principal, has_body and (length is None or length > LARGE_BODY_BYTES))
        if principal is not None and not self._admit(share):
            await _answer(
                send, 429,
                b'{"detail":"at most %d uploads %s %d bytes at once per caller; send this '
                b'one when another has finished"}' % (
                    (self.uploads_in_flight, b"over", LARGE_BODY_BYTES) if share[1]
                    else (SMALL_UPLOADS_IN_FLIGHT, b"of at most", LARGE_BODY_BYTES)
                ),
                [("Retry-After", str(_RETRY_AFTER_SECONDS))],
            )
            return
        try:
            await self._forward(scope, receive, send, max_bytes)
        finally:
            if principal is not None:
                with self._lock:
                    self._in_flight[share] -= 1
                    if not self._in_flight[share]:
                        del self._in_flight[share]

    def _admit(self, share: tuple[Hashable, bool]) -> bool:
        """Count one more upload of a ``(caller, large)`` kind, unless that caller has its
        share of that kind in flight."""
        limit = self.uploads_in_flight if share[1] else SMALL_UPLOADS_IN_FLIGHT
        with self._lock:
            if self._in_flight[share] >= limit:
                return False
            self._in_flight[share] += 1
            return True

    async def _forward(self, scope: Any, receive: Any, send: Any, max_bytes: int) -> None:
        """The app, with the body counted as it streams: 413 once it passes ``max_bytes``
        (whatever the app makes of the body cut off, e.g. FastAPI's 400 for a body that
        failed to arrive), unless the app had started its answer before."""
        seen = 0
        started = too_large = False

        async def counted_receive() -> Any:
            nonlocal seen, too_large
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > max_bytes:
                    too_large = True
                    raise _TooLargeError
            return message

        async def tracked_send(message: Any) -> None:
            nonlocal started
            if too_large and not started:
                return  # the app's answer to the cut-off body: the 413 below replaces it
            started = started or message["type"] == "http.response.start"
            await send(message)

        with contextlib.suppress(_TooLargeError):
            await self.app(scope, counted_receive, tracked_send)
        if too_large and not started:
            await self._refuse(send, max_bytes)

    async def _refuse(self, send: Any, max_bytes: int) -> None:
        await _answer(send, 413, b'{"detail":"request body larger than %d bytes"}' % max_bytes)


def _detail(detail: object) -> bytes:
    """The JSON error body ``{"detail": ...}`` of a refusal."""
    return json.dumps({"detail": detail}).encode("utf-8")


async def _answer(
    send: Any, status: int, body: bytes, headers: Sequence[tuple[str, str]] = ()
) -> None:
    """Send a JSON response that closes the connection, the request's body left unread."""
    await send({
        "type": "http.response.start",
        "status": status,
        "headers": [(b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()), _CLOSE,
                    *((k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers)],
    })
    await send({"type": "http.response.body", "body": body})


@functools.cache
def deferred_body_protocol() -> type[H11Protocol]:
    """Uvicorn's h11 protocol, parsing little of a body before the request's app ran once.

    Uvicorn hands all that one socket read brought (up to 256 KiB) to h11 before the app sees
    the request, and h11 parses a body event by event: a body of one-byte chunks costs the
    event loop microseconds per byte, a refused one included. This protocol feeds the parser
    :data:`PARSE_AHEAD_BYTES` at a time and, once a new request's head is parsed, keeps the
    rest of what arrived until the loop's next turn, after the app's first step, in which
    :class:`BodySizeLimit` answers a refused request and closes its connection; what is kept
    is then dropped unparsed. An accepted request's body is parsed one turn later.
    """
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class DeferredBodyProtocol(H11Protocol):
        _waiting: bytearray | None = None

        def data_received(self, data: bytes) -> None:
            if self._waiting is not None:  # a new request's app has not run yet
                self._waiting += data
                return
            cycle = self.cycle
            for start in range(0, len(data), PARSE_AHEAD_BYTES):
                end = start + PARSE_AHEAD_BYTES
                super().data_received(data[start:end])
                if self.cycle is not cycle and end < len(data):
                    self._waiting = bytearray(data[end:])
                    self.loop.call_soon(self._resume)
                    return

        def _resume(self) -> None:
            waiting, self._waiting = self._waiting, None
            if waiting and not self.transport.is_closing():
                self.data_received(bytes(waiting))

    return DeferredBodyProtocol
