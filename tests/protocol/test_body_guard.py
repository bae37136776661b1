"""The body guard: a stranger's body is refused unread (401), a body over its route's limit
too (413), and an authorised body within its limit reaches the app."""

from __future__ import annotations

import pytest
from fastapi import FastAPI, Request

from fedclust.protocol.body_limit import BodySizeLimit, bearer_token
from tests.asgi_raw import call

GOOD = {"Authorization": "Bearer good-token"}
MIB = 1 << 20


def make_app() -> FastAPI:
    app = FastAPI()

    @app.post("/small")
    async def small(request: Request) -> dict[str, int]:
        return {"read": len(await request.body())}

    @app.post("/large")
    async def large(request: Request) -> dict[str, int]:
        return {"read": len(await request.body())}

    app.add_middleware(
        BodySizeLimit, max_bytes=4 * MIB, routes=[("POST", "/small", 1024)],
        authorised=lambda token: token == "good-token",
    )
    return app


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


def test_a_declared_body_over_the_route_limit_is_refused_unread() -> None:
    response = call(make_app(), "POST", "/small", headers=GOOD, body_bytes=1025)
    assert (response.status, response.consumed) == (413, 0)
    assert b"1024 bytes" in response.body


def test_a_streamed_body_over_the_route_limit_stops_at_the_limit() -> None:
    response = call(make_app(), "POST", "/small", headers=GOOD, body_bytes=50 * MIB,
                    chunk=512, declare_length=False)
    assert response.status == 413
    assert response.consumed <= 1024 + 512


def test_other_routes_keep_the_large_limit() -> None:
    response = call(make_app(), "POST", "/large", headers=GOOD, body_bytes=2 * MIB)
    assert (response.status, response.consumed) == (200, 2 * MIB)
    assert response.body == b'{"read":%d}' % (2 * MIB)
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
