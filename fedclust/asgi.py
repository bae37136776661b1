"""A synchronous httpx transport that calls an ASGI app in process (no sockets).

httpx's own :class:`httpx.ASGITransport` is async-only and does not run the app's lifespan.
:class:`InProcessApp` runs the app on a private event-loop thread, enters its lifespan
(startup work such as resuming jobs happens as under uvicorn) and hands out
:class:`SyncASGITransport` objects that synchronous clients — the participant agent, the
coordinator's counting client, the CLI — use as if over HTTP.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import Any

import httpx

_STARTUP_TIMEOUT = 60.0


class SyncASGITransport(httpx.BaseTransport):
    """Send each request to the ASGI app on ``loop`` and wait for the whole response."""

    def __init__(self, app: Any, loop: asyncio.AbstractEventLoop) -> None:
        self._inner = httpx.ASGITransport(app=app)
        self._loop = loop

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        request.read()
        future = asyncio.run_coroutine_threadsafe(self._send(request), self._loop)
        return future.result()

    async def _send(self, request: httpx.Request) -> httpx.Response:
        response = await self._inner.handle_async_request(request)
        content = await response.aread()
        return httpx.Response(
            status_code=response.status_code,
            headers=response.headers,
            content=content,
            request=request,
        )


class InProcessApp:
    """An ASGI app served in this process, lifespan included; a context manager.

    ``lifespan`` is the app's lifespan context factory (FastAPI: ``app.router.lifespan_context``).
    """

    def __init__(
        self,
        app: Any,
        lifespan: Callable[[Any], AbstractAsyncContextManager[Any]] | None = None,
    ) -> None:
        self._app = app
        self._lifespan = lifespan
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._stop: asyncio.Event | None = None
        self._done: concurrent.futures.Future[None] | None = None

    def transport(self) -> SyncASGITransport:
        """A transport to this app (one per client; they share the app's loop)."""
        return SyncASGITransport(self._app, self._loop)

    def __enter__(self) -> InProcessApp:
        self._thread.start()
        started = threading.Event()
        done = asyncio.run_coroutine_threadsafe(self._serve(started), self._loop)
        self._done = done
        deadline = time.monotonic() + _STARTUP_TIMEOUT
        try:
            while not started.wait(0.05):
                if done.done():
                    done.result()  # re-raises the app's startup failure
                if time.monotonic() > deadline:
                    raise RuntimeError("the in-process app did not start within a minute")
        except BaseException:
            self._stop_loop()
            raise
        return self

    async def _serve(self, started: threading.Event) -> None:
        self._stop = asyncio.Event()
        async with self._lifespan_context():
            started.set()
            await self._stop.wait()

    def _lifespan_context(self) -> AbstractAsyncContextManager[Any]:
        if self._lifespan is not None:
            return self._lifespan(self._app)
        return contextlib.nullcontext()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._done is not None:
            self._done.result(timeout=_STARTUP_TIMEOUT)
        self._stop_loop()

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=_STARTUP_TIMEOUT)
        self._loop.close()


__all__ = ["InProcessApp", "SyncASGITransport"]
