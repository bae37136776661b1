"""A uvicorn server in a thread of the test process, on a real loopback socket."""

from __future__ import annotations

import threading
import time
from typing import Any

import uvicorn

__all__ = ["ServerThread"]


class ServerThread:
    """A uvicorn server for ``app`` on a loopback port (0: a free one), in a thread;
    ``options`` go to ``uvicorn.Config`` (e.g. TLS files)."""

    def __init__(self, app: Any, port: int, **options: Any) -> None:
        config = uvicorn.Config(
            app, host="127.0.0.1", port=port, log_level="warning", **options
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def start(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert self.thread.is_alive(), "the server thread died while starting"
            assert time.monotonic() < deadline, "the server did not start within 30 s"
            time.sleep(0.02)
        return self

    @property
    def port(self) -> int:
        return int(self.server.servers[0].sockets[0].getsockname()[1])

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)
