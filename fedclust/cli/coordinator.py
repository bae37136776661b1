"""``fedclust coordinator serve|migrate|check``: run the coordinator service, upgrade its
database, check its configuration."""

from __future__ import annotations

import argparse
from types import FrameType

from fedclust.cli._service import (
    _GRACEFUL_SHUTDOWN,
    _add_check_parser,
    _add_migrate_parser,
    _add_service_actions,
    _checked,
    _database_errors,
    _freeze_start_up,
    _log_to_stderr,
    _migrated,
    _server_problems,
)


def add_arguments(command: argparse.ArgumentParser) -> None:
    actions = _add_service_actions(command, "coordinator", "serve")
    _add_migrate_parser(actions, "coordinator")
    _add_check_parser(actions, "coordinator")


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from fedclust.coordinator.app import create_app
    from fedclust.coordinator.db import Database
    from fedclust.coordinator.settings import CoordinatorSettings

    if args.action == "check":
        return _checked(
            "coordinator", args.config, lambda: CoordinatorSettings.load(args.config),
            lambda settings: _server_problems(settings, database_key="coordinator.database_url"),
        )
    settings = CoordinatorSettings.load(args.config)
    with _database_errors(settings.database_url):
        database = Database(settings.database_url)
        try:  # an empty database is created at head; one behind it is refused in one line
            if args.action == "migrate":
                return _migrated("coordinator", settings.database_url, database.migrate())
            database.create_all()
        finally:
            database.dispose()
    _log_to_stderr(args)
    app = create_app(settings)

    class Server(uvicorn.Server):
        """On the exit signal, first end the parked long polls (the broker returns 204
        to them and leaves running jobs resumable), so the graceful shutdown has nothing
        to wait for."""

        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            services = app.state.services
            if services is not None:
                services.broker.close()
            super().handle_exit(sig, frame)

    config = uvicorn.Config(
        app, host=settings.host, port=settings.port, log_level="warning", log_config=None,
        timeout_graceful_shutdown=_GRACEFUL_SHUTDOWN, **settings.tls.uvicorn_options(),
    )
    _freeze_start_up()
    Server(config).run()
    return 0
