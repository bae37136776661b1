"""The coordinator service: ``create_app(settings)`` builds the FastAPI app (nothing at import).

The app's lifespan opens the database (an empty one is created at the newest schema
revision, one behind it is refused: :mod:`infra.schema`), the task broker, the
counting-service client and the job runner, and restarts every pending or running job; at
shutdown the job threads stop with their jobs left resumable. ``counting_transport`` lets
tests and the in-process mode reach the counting service without sockets.

Operators get ``/healthz``, ``/readyz`` (the database answers, the counting service's health
check answers) and, with ``metrics = true``, ``/metrics`` (:mod:`infra.observability`,
:mod:`coordinator.metrics`); they are left out of the OpenAPI document.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio.to_thread
import httpx
from fastapi import FastAPI
from sqlalchemy import text

from fedclust.coordinator.api import (
    admin,
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
from fedclust.infra.observability import Check
from fedclust.protocol.wire.messages import HealthStatus

__all__ = ["API_PREFIX", "create_app", "openapi_document"]

_WORKER_THREADS = 256
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
        authenticator.load(db.memberships())
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
        try:
            yield
        finally:
            runner.shutdown()
            app.state.services = None
            counting.close()
            db.dispose()

    authenticator = Authenticator(settings)
    metrics = CoordinatorMetrics(lambda: app.state.services and app.state.services.db)
    app = service_app(
        settings,
        routers=(participants.router, jobs.router, tasks.router, audit.router, admin.router,
                 participant_results.router),
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
