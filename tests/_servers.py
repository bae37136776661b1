"""A uvicorn server in a thread of the test process, on a real loopback socket; a
federation's counting service and coordinator served that way."""

from __future__ import annotations

import threading
import time
from typing import Any

import uvicorn

from fedclust.config_files import FederationFiles
from fedclust.coordinator.app import create_app as create_coordinator
from fedclust.coordinator.settings import CoordinatorSettings
from fedclust.counting.app import create_app as create_counting
from fedclust.counting.settings import CountingSettings

__all__ = ["ServerThread", "serve_coordinator", "serve_counting"]


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


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def serve_counting(files: FederationFiles) -> ServerThread:
    """The federation's counting service from its config file, on its configured port."""
    app = create_counting(CountingSettings.from_file(files.counting))
    return ServerThread(app, _port(files.counting_url)).start()


def serve_coordinator(files: FederationFiles) -> ServerThread:
    """The federation's coordinator from its config file, on its configured port."""
    app = create_coordinator(CoordinatorSettings.from_file(files.coordinator))
    return ServerThread(app, _port(files.coordinator_url)).start()
