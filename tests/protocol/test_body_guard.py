"""The body guard: a stranger's body is refused unread (401), a token presented with another
principal's certificate too (403, the service's own refusal), a body over its route's limit too
(413), a caller's large uploads beyond its share in flight too (429); every refusal closes the
connection, and an authorised body within its limit reaches the app."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Mapping
from typing import Any

import pytest
import uvicorn
from fastapi import FastAPI, HTTPException, Request
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState

from fedclust.infra.body_limit import (
    LARGE_BODY_BYTES,
    PARSE_AHEAD_BYTES,
    SMALL_UPLOADS_IN_FLIGHT,
    BodySizeLimit,
    bearer_token,
    deferred_body_protocol,
)
from tests.asgi_raw import RawResponse, call, call_async

GOOD = {"Authorization": "Bearer good-token"}
MIB = 1 << 20


def caller(scope: Mapping[str, Any]) -> str:
    """``good-*`` tokens are their own principals; ``stolen`` is refused as a service refuses
    a token presented with another principal's certificate."""
    token = bearer_token(scope.get("headers", []))
    if token == "stolen":
        raise HTTPException(403, "the client certificate does not name participant 'p1'")
    if token is None or not token.startswith("good-"):
        raise HTTPException(401, "a valid bearer token is required",
                            headers={"WWW-Authenticate": "Bearer"})
    return token


def make_app() -> FastAPI:
    app = FastAPI()

    @app.post("/small")
    async def small(request: Request) -> dict[str, int]:
        return {"read": len(await request.body())}

    @app.post("/large")
    async def large(request: Request) -> dict[str, int]:
        return {"read": len(await request.body())}

    app.add_middleware(
        BodySizeLimit, max_bytes=4 * MIB, routes=[("POST", "/small", 1024)], caller=caller,
    )
    return app


def _closes(response: RawResponse) -> bool:
    return response.headers.get("connection") == "close"


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic good-token"},
     {"Authorization": "Bearer "}],
    ids=["none", "unknown", "basic", "empty"],
)
@pytest.mark.parametrize("declare_length", [True, False], ids=["length", "chunked"])
def test_an_unauthenticated_50_mb_body_is_refused_unread(
    headers: dict[str, str], declare_length: bool
) -> None:
    response = call(make_app(), "POST", "/large", headers=headers, body_bytes=50 * MIB,
                    declare_length=declare_length)
    assert (response.status, response.consumed) == (401, 0)
    assert response.headers["www-authenticate"] == "Bearer"
    assert _closes(response)
    assert response.body == b'{"detail": "a valid bearer token is required"}'


def test_the_services_403_for_a_token_with_another_certificate_is_sent_unread() -> None:
    response = call(make_app(), "POST", "/large", headers={"Authorization": "Bearer stolen"},
                    body_bytes=50 * MIB)
    assert (response.status, response.consumed) == (403, 0)
    assert b"does not name participant 'p1'" in response.body
    assert _closes(response)


def test_a_declared_body_over_the_route_limit_is_refused_unread() -> None:
    response = call(make_app(), "POST", "/small", headers=GOOD, body_bytes=1025)
    assert (response.status, response.consumed) == (413, 0)
    assert b"1024 bytes" in response.body
    assert _closes(response)


def test_a_streamed_body_over_the_route_limit_stops_at_the_limit() -> None:
    response = call(make_app(), "POST", "/small", headers=GOOD, body_bytes=50 * MIB,
                    chunk=512, declare_length=False)
    assert response.status == 413
    assert response.consumed <= 1024 + 512
    assert _closes(response)


def test_other_routes_keep_the_large_limit() -> None:
    response = call(make_app(), "POST", "/large", headers=GOOD, body_bytes=2 * MIB)
    assert (response.status, response.consumed) == (200, 2 * MIB)
    assert response.body == b'{"read":%d}' % (2 * MIB)
    assert not _closes(response)
    too_large = call(make_app(), "POST", "/large", headers=GOOD, body_bytes=5 * MIB)
    assert (too_large.status, too_large.consumed) == (413, 0)


def test_a_request_without_a_body_reaches_the_app_to_authenticate() -> None:
    response = call(make_app(), "POST", "/small", body_bytes=0)
    assert response.status == 200  # this app has no auth of its own; the services do


def test_bearer_token_reads_only_the_bearer_scheme() -> None:
    assert bearer_token([(b"authorization", b"Bearer abc")]) == "abc"
    assert bearer_token([(b"Authorization", b"bearer  abc ")]) == "abc"
    assert bearer_token([(b"authorization", b"Basic abc")]) is None
    assert bearer_token([]) is None


# -- large uploads in flight, per caller --------------------------------------------------------
class HeldUploads:
    """An app whose every request waits at ``gate`` before reading its body; ``guarded`` is it
    behind a guard letting each caller have two large uploads in flight."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.entered = 0
        self.guarded = BodySizeLimit(self, max_bytes=100 * MIB, caller=caller,
                                     uploads_in_flight=2)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.entered += 1
        await self.gate.wait()
        while (await receive()).get("more_body"):
            pass
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def upload(self, token: str, size: int, **options: Any) -> RawResponse:
        return await call_async(self.guarded, "POST", "/upload", body_bytes=size,
                                headers={"Authorization": f"Bearer {token}"}, **options)

    async def until_entered(self, count: int) -> None:
        while self.entered < count:
            await asyncio.sleep(0)


def test_a_callers_third_large_upload_in_flight_gets_429_unread() -> None:
    async def scenario() -> None:
        held = HeldUploads()
        first = [asyncio.create_task(held.upload("good-a", 50 * MIB)) for _ in range(2)]
        await held.until_entered(2)
        third = await held.upload("good-a", 50 * MIB)
        assert (third.status, third.consumed) == (429, 0)
        assert third.headers["retry-after"] == "1" and _closes(third)
        assert b"at most 2 uploads" in third.body
        chunked = await held.upload("good-a", 10 * MIB, declare_length=False)  # size unknown
        assert (chunked.status, chunked.consumed) == (429, 0)
        assert held.guarded.in_flight("good-a") == 2
        # Another caller has its own share; small bodies have theirs.
        other = asyncio.create_task(held.upload("good-b", 50 * MIB))
        small = asyncio.create_task(held.upload("good-a", LARGE_BODY_BYTES))
        await held.until_entered(4)
        held.gate.set()
        assert [r.status for r in await asyncio.gather(*first, other, small)] == [204] * 4
        assert held.guarded.in_flight("good-a") == held.guarded.in_flight("good-b") == 0
        # Once the first two finished, the share is free again.
        assert (await held.upload("good-a", 50 * MIB)).status == 204

    asyncio.run(scenario())


def test_a_callers_small_bodies_in_flight_are_bounded_too() -> None:
    """Bodies of at most LARGE_BODY_BYTES were never counted: one caller could hold any
    number of them in the app over parallel connections."""
    async def scenario() -> None:
        held = HeldUploads()
        small = [asyncio.create_task(held.upload("good-a", LARGE_BODY_BYTES))
                 for _ in range(SMALL_UPLOADS_IN_FLIGHT)]
        await held.until_entered(SMALL_UPLOADS_IN_FLIGHT)
        excess = await asyncio.wait_for(held.upload("good-a", 100), 10)  # not held: refused
        assert (excess.status, excess.consumed) == (429, 0)
        assert held.guarded.in_flight("good-a", large=False) == SMALL_UPLOADS_IN_FLIGHT
        assert excess.headers["retry-after"] == "1" and _closes(excess)
        assert b"at most %d uploads of at most" % SMALL_UPLOADS_IN_FLIGHT in excess.body
        # Its large share, and another caller's small share, are apart.
        others = [asyncio.create_task(held.upload("good-a", 50 * MIB)),
                  asyncio.create_task(held.upload("good-b", 100))]
        await held.until_entered(SMALL_UPLOADS_IN_FLIGHT + 2)
        held.gate.set()
        statuses = [r.status for r in await asyncio.gather(*small, *others)]
        assert statuses == [204] * (SMALL_UPLOADS_IN_FLIGHT + 2)
        assert held.guarded.in_flight("good-a", large=False) == 0

    asyncio.run(scenario())


def test_a_caller_check_that_fails_is_a_503_sent_unread(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Any other error of the service's caller check (its database locked, say) became a 500
    without ``Connection: close``: the server then read and discarded the whole body."""
    def failing(scope: Mapping[str, Any]) -> str:
        raise sqlite3.OperationalError("database is locked")

    guard = BodySizeLimit(make_app(), max_bytes=4 * MIB, caller=failing)
    response = call(guard, "POST", "/large", headers=GOOD, body_bytes=50 * MIB)
    assert (response.status, response.consumed) == (503, 0)
    assert _closes(response) and response.headers["retry-after"] == "1"
    assert b"database" not in response.body and b"try again later" in response.body
    assert "could not be determined" in caplog.text and "database is locked" in caplog.text


def test_an_upload_that_fails_in_the_app_frees_its_share() -> None:
    async def failing(scope: Any, receive: Any, send: Any) -> None:
        raise RuntimeError("the handler failed")

    guard = BodySizeLimit(failing, max_bytes=100 * MIB, caller=caller, uploads_in_flight=1)
    for _ in range(2):
        with pytest.raises(RuntimeError, match="the handler failed"):
            call(guard, "POST", "/upload", headers=GOOD, body_bytes=50 * MIB)
    assert guard.in_flight("good-token") == 0


@pytest.mark.parametrize("share", [0, -1, True])
def test_the_share_must_be_a_positive_integer(share: int) -> None:
    with pytest.raises(ValueError, match="uploads_in_flight must be an integer >= 1"):
        BodySizeLimit(make_app(), max_bytes=MIB, uploads_in_flight=share)


# -- the server parses little of a body before the guard answers --------------------------------
class _Transport(asyncio.Transport):
    """A socket's transport, recording what the server wrote and whether it closed."""

    def __init__(self) -> None:
        super().__init__()
        self.written = bytearray()
        self.closed = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 40000), "sockname": ("127.0.0.1", 8700)}.get(
            name, default
        )

    def write(self, data: Any) -> None:
        self.written += data

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


@pytest.mark.parametrize("deferred", [True, False], ids=["deferred", "uvicorn"])
def test_a_refused_body_is_parsed_only_a_little_ahead_of_the_guard(deferred: bool) -> None:
    """One read bringing a request head and 200 KiB of its body: the body-deferring protocol
    parses at most ``PARSE_AHEAD_BYTES`` of it before the guard answers 401 and closes, and
    nothing after; uvicorn's own protocol parses all of it first (the control)."""
    body = bytes(200 * 1024)
    head = b"POST /large HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (50 * MIB)

    async def scenario() -> tuple[int, int, _Transport]:
        config = uvicorn.Config(make_app(), log_level="warning")
        config.load()
        kind = deferred_body_protocol() if deferred else H11Protocol
        server = kind(config=config, server_state=ServerState(), app_state={},
                      _loop=asyncio.get_running_loop())
        transport = _Transport()
        server.connection_made(transport)
        server.data_received(head + body)
        parsed_before = len(server.cycle.body)
        for _ in range(10):  # a few turns of the loop: the app runs, the rest is resumed
            await asyncio.sleep(0)
        return parsed_before, len(server.cycle.body), transport

    parsed_before, parsed_after, transport = asyncio.run(scenario())
    assert transport.written.startswith(b"HTTP/1.1 401 ") and transport.closed
    if deferred:
        assert parsed_before <= PARSE_AHEAD_BYTES
        assert parsed_after == parsed_before
    else:
        assert parsed_before == len(body)
