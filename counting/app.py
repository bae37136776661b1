"""The counting service's FastAPI application: ``create_app(settings)``.

No application is built at import time. The store (database) is opened when the app is
created and closed when the app shuts down. Operators get ``/healthz``, ``/readyz`` (the
database answers) and, with ``metrics = true``, ``/metrics`` with the request counter, all
left out of the OpenAPI document (:mod:`infra.observability`).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from prometheus_client import CollectorRegistry

from fedclust.counting.api import BODY_LIMITS, caller_of, router
from fedclust.counting.db import CountingStore
from fedclust.counting.keyholder import PaillierKeyHolder
from fedclust.counting.members import Members
from fedclust.counting.settings import CountingSettings
from fedclust.infra.allow import method_not_allowed
from fedclust.infra.body_limit import BodySizeLimit
from fedclust.infra.observability import add_observability
from fedclust.protocol.wire.messages import MAX_BODY_BYTES, PROTOCOL_VERSION

__all__ = ["API_PREFIX", "create_app"]

API_PREFIX = "/api/v1"

log = logging.getLogger("fedclust.counting")

_TAGS = [
    {"name": "counts", "description": "Rosters, participants' counts and the released total."},
    {
        "name": "paillier",
        "description": "Each job's Paillier public key, participants' announcements of their "
        "contributions, and the decryption of aggregates of at least the minimum cohort.",
    },
    {
        "name": "members",
        "description": "The coordinator's requests for a member's credential (accepted once "
        "the counting operator approves them: fedclust counter members approve) and "
        "revocations.",
    },
    {"name": "meta", "description": "Service health."},
]


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    """422 naming the offending fields and the rule, without echoing submitted values."""
    assert isinstance(exc, RequestValidationError)
    detail = [
        {"loc": list(err.get("loc", ())), "msg": err.get("msg", ""), "type": err.get("type", "")}
        for err in exc.errors()
    ]
    return JSONResponse(status_code=422, content={"detail": detail})


def create_app(settings: CountingSettings) -> FastAPI:
    """A counting service over the database named in ``settings``."""
    store = CountingStore(settings.database_url)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        log.info(
            "counting service ready: %d enrolled participants, min_participants=%d",
            len(app.state.members),
            settings.min_participants,
        )
        try:
            yield
        finally:
            store.close()

    app = FastAPI(
        title="fedclust counting service",
        description=(
            "Receives each participant's N_l and releases only ΣN_l of a job, once every "
            "participant on its roster (at least the configured minimum) has reported. Holds "
            "each job's Paillier private key and decrypts only aggregates of at least the "
            "minimum cohort, each round once."
        ),
        version=f"{PROTOCOL_VERSION}",
        openapi_tags=_TAGS,
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.store = store
    app.state.members = Members(settings, store)
    app.state.keyholder = PaillierKeyHolder(
        store, bits=settings.paillier_bits, min_cohort=max(3, settings.min_participants)
    )
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(405, method_not_allowed)
    members = app.state.members
    app.add_middleware(BodySizeLimit, max_bytes=MAX_BODY_BYTES, routes=BODY_LIMITS,
                       caller=lambda scope: caller_of(scope, settings, members),
                       uploads_in_flight=settings.uploads_in_flight)
    app.include_router(router, prefix=API_PREFIX)
    add_observability(
        app,
        registry=CollectorRegistry(),
        # A read of a roster no job has: one trivial query through the store's own engine.
        checks=lambda: {"database": lambda: store.roster("")},
        metrics=settings.metrics,
    )
    return app
