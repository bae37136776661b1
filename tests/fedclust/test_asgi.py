"""The in-process ASGI transport: lifespan, concurrent clients, startup failures."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import httpx
import pytest
from fastapi import FastAPI, Request

from fedclust.asgi import InProcessApp
from fedclust.infra.body_limit import BodySizeLimit

BASE = "http://fedclust.local"


def make_app(events: list[str]) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        events.append("startup")
        yield
        events.append("shutdown")

    app = FastAPI(lifespan=lifespan)
    release = asyncio.Event()

    @app.get("/wait")
    async def wait() -> dict[str, str]:
        await asyncio.wait_for(release.wait(), timeout=10)
        return {"waited": "yes"}

    @app.post("/release")
    async def do_release() -> dict[str, str]:
        release.set()
        return {"released": "yes"}

    return app


def test_lifespan_runs_around_the_requests() -> None:
    events: list[str] = []
    app = make_app(events)
    with InProcessApp(app, app.router.lifespan_context) as served:
        assert events == ["startup"]
        client = httpx.Client(transport=served.transport(), base_url=BASE)
        assert client.post("/release").json() == {"released": "yes"}
    assert events == ["startup", "shutdown"]


def test_a_long_poll_does_not_block_other_clients() -> None:
    app = make_app([])
    with InProcessApp(app, app.router.lifespan_context) as served:
        waiting = httpx.Client(transport=served.transport(), base_url=BASE)
        other = httpx.Client(transport=served.transport(), base_url=BASE)
        result: dict[str, object] = {}
        poller = threading.Thread(target=lambda: result.update(waiting.get("/wait").json()))
        poller.start()
        time.sleep(0.2)
        assert poller.is_alive()  # still parked in the long poll
        assert other.post("/release").status_code == 200
        poller.join(timeout=10)
        assert result == {"waited": "yes"}


def test_a_failing_startup_is_raised_at_once() -> None:
    @asynccontextmanager
    async def broken(app: FastAPI) -> AsyncIterator[None]:
        raise RuntimeError("database unreachable")
        yield

    app = FastAPI(lifespan=broken)
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="database unreachable"), InProcessApp(
        app, app.router.lifespan_context
    ):
        pass
    assert time.monotonic() - started < 5


def limited_app() -> FastAPI:
    app = FastAPI()
    app.add_middleware(BodySizeLimit, max_bytes=1000)

    @app.post("/echo")
    async def echo(request: Request) -> dict[str, int]:
        return {"received": len(await request.body())}

    return app


def test_a_declared_oversize_body_is_refused_before_reading() -> None:
    app = limited_app()
    with InProcessApp(app) as served:
        client = httpx.Client(transport=served.transport(), base_url=BASE)
        assert client.post("/echo", content=b"x" * 1000).json() == {"received": 1000}
        refused = client.post("/echo", content=b"x" * 1001)
        assert refused.status_code == 413
        assert "larger than 1000 bytes" in refused.json()["detail"]


def test_a_streamed_oversize_body_is_refused_as_it_arrives() -> None:
    app = limited_app()

    def chunks() -> Iterator[bytes]:
        for _ in range(50):  # no Content-Length: the body arrives in chunks
            yield b"y" * 100

    with InProcessApp(app) as served:
        client = httpx.Client(transport=served.transport(), base_url=BASE)
        assert client.post("/echo", content=chunks()).status_code == 413
        assert client.post("/echo", content=b"ok").json() == {"received": 2}
