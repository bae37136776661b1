"""The coordinator service: ``create_app(settings)`` builds the FastAPI app (nothing at import).

The app's lifespan opens the database (an empty one is created at the newest schema
revision, one behind it is refused: :mod:`infra.schema`), the task broker, the
counting-service client and the job runner, and restarts every pending or running job; at
shutdown the job threads stop with their jobs left resumable. It logs one start-up line (URL,
database without its password, TLS mode, version: :func:`infra.logformat.startup_line`), and
keeps each member's last contact in the database (:class:`_LastSeen`), so the member list
shows it across restarts. ``counting_transport`` lets tests and the in-process mode reach the
counting service without sockets.

Operators get ``/healthz``, ``/readyz`` (the database answers, the counting service's health
check answers) and, with ``metrics = true``, ``/metrics`` (:mod:`infra.observability`,
:mod:`coordinator.metrics`); they are left out of the OpenAPI document.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

import anyio.to_thread
import httpx
from fastapi import FastAPI
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from fedclust.coordinator.api import (
    admin,
    algorithms,
    audit,
    jobs,
    participant_results,
    participants,
    tasks,
)
from fedclust.coordinator.api.deps import Authenticator, Services
from fedclust.coordinator.api.limits import BODY_LIMITS, PUBLIC_BODIES
from fedclust.coordinator.api.ui import mount_ui
from fedclust.coordinator.broker import Broker
from fedclust.coordinator.counting_client import CountingClient
from fedclust.coordinator.db import Database
from fedclust.coordinator.metrics import CoordinatorMetrics
from fedclust.coordinator.runner import JobRunner
from fedclust.coordinator.settings import AnalystCredential, CoordinatorSettings
from fedclust.crypto.tokens import token_sha256
from fedclust.infra.app import API_PREFIX, service_app
from fedclust.infra.logformat import service_url, startup_line, tls_mode
from fedclust.infra.observability import Check
from fedclust.protocol.wire.messages import HealthStatus

__all__ = ["API_PREFIX", "create_app", "openapi_document"]

_WORKER_THREADS = 256
#: How often the members' last contacts go to the database (one transaction for all).
LAST_SEEN_SECONDS = 30.0
_log = logging.getLogger("fedclust.coordinator")


def create_app(
    settings: CoordinatorSettings, *, counting_transport: httpx.BaseTransport | None = None
) -> FastAPI:
    """The coordinator app for ``settings``."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Long polls hold a worker thread each: leave room for many participants.
        limiter = anyio.to_thread.current_default_thread_limiter()
        limiter.total_tokens = max(limiter.total_tokens, _WORKER_THREADS)
        db = Database(settings.database_url)
        db.create_all()  # a database behind the schema is closed, and the start refused
        _log.info("%s", startup_line(
            "coordinator", listens=service_url(settings.host, settings.port, settings.tls),
            database_url=settings.database_url, tls=tls_mode(settings.tls, serving=True),
        ))
        authenticator.load(db.memberships())
        last_seen = _LastSeen(db, authenticator.last_contact)
        broker = Broker(db, timeout=settings.task_timeout_seconds)
        counting = CountingClient(
            settings.counting_url, settings.counting_token, transport=counting_transport,
            verify=settings.tls.httpx_verify(),
        )
        runner = JobRunner(db, broker, counting, metrics)
        app.state.services = Services(
            settings=settings, db=db, broker=broker, counting=counting, runner=runner
        )
        resumed = runner.resume_all()
        if resumed:
            _log.info("resumed %d job(s)", len(resumed))
        keeper = asyncio.create_task(last_seen.keep(LAST_SEEN_SECONDS))
        try:
            yield
        finally:
            keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keeper
            runner.shutdown()
            last_seen.save(dict(authenticator.last_contact))
            app.state.services = None
            counting.close()
            db.dispose()

    authenticator = Authenticator(settings)
    metrics = CoordinatorMetrics(lambda: app.state.services and app.state.services.db)
    app = service_app(
        settings,
        routers=(tasks.router, participants.router, jobs.router, audit.router, admin.router,
                 participant_results.router, algorithms.router),
        caller=authenticator.caller, body_limits=BODY_LIMITS, public=PUBLIC_BODIES,
        registry=metrics.registry, checks=lambda: _readiness(app),
        title="fedclust coordinator",
        summary="Federated cluster analysis: jobs, participants and their tasks.",
        lifespan=lifespan,
        docs_url=None,  # served by mount_ui from local assets, not a CDN
        redoc_url=None,
    )
    app.state.authenticator = authenticator
    app.state.services = None
    mount_ui(app)

    @app.get(
        f"{API_PREFIX}/health",
        response_model=HealthStatus,
        operation_id="health",
        tags=["meta"],
        summary="Liveness",
    )
    def health() -> HealthStatus:
        return HealthStatus()

    return app


class _LastSeen:
    """Writes the members' last contacts (kept in memory by the authenticator on every
    authenticated participant request) to the database: only the changed ones, every
    ``seconds``, so a poll costs no write; at start the stored ones are read back into the
    authenticator's map."""

    def __init__(self, db: Database, contacts: dict[str, datetime]) -> None:
        self._db = db
        contacts.update(db.last_seen())
        self._contacts = contacts
        self._saved = dict(contacts)

    def save(self, now: Mapping[str, datetime]) -> None:
        """Store the contacts in ``now`` (a copy of the map) that changed since the last
        save; a failed write (a busy or unreachable database) is logged, and the next save
        tries those contacts again."""
        changed = {pid: at for pid, at in now.items() if self._saved.get(pid) != at}
        try:
            self._db.record_last_seen(changed)
        except SQLAlchemyError as exc:
            _log.warning("could not store the members' last contact: %s", exc)
            return
        self._saved = dict(now)

    async def keep(self, seconds: float) -> None:
        """Save every ``seconds`` (in a worker thread) until cancelled."""
        while True:
            await asyncio.sleep(seconds)
            snapshot = dict(self._contacts)  # on the event loop, where requests update it
            await anyio.to_thread.run_sync(self.save, snapshot)


def _readiness(app: FastAPI) -> dict[str, Check]:
    """The coordinator is ready when its database and the counting service answer."""
    services = app.state.services
    if services is None:
        return {"started": _not_started}
    return {
        "database": lambda: _ping(services.db),
        "counting": services.counting.check_health,
    }


def _not_started() -> None:
    raise RuntimeError("the coordinator has not started or is shutting down")


def _ping(db: Database) -> None:
    with db.engine.connect() as connection:
        connection.execute(text("SELECT 1"))


def openapi_document() -> dict[str, Any]:
    """The OpenAPI document of the coordinator (built from dummy settings)."""
    dummy = CoordinatorSettings(
        counting_url="http://counting.invalid",
        counting_token="unused",
        analysts=(AnalystCredential(name="analyst", token_sha256=token_sha256("unused")),),
        participants=(),
        database_url="sqlite://",
    )
    return create_app(dummy).openapi()
