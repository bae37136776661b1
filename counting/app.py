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

from fastapi import FastAPI
from prometheus_client import CollectorRegistry

from fedclust.counting.api import BODY_LIMITS, caller_of, router
from fedclust.counting.db import CountingStore
from fedclust.counting.keyholder import PaillierKeyHolder
from fedclust.counting.members import Members
from fedclust.counting.settings import CountingSettings
from fedclust.infra.app import API_PREFIX, service_app
from fedclust.infra.logformat import service_url, startup_line, tls_mode

__all__ = ["API_PREFIX", "create_app"]

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


def create_app(settings: CountingSettings) -> FastAPI:
    """A counting service over the database named in ``settings``."""
    store = CountingStore(settings.database_url)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        log.info("%s", startup_line(
            "counting service",
            listens=service_url(settings.host, settings.port, settings.tls),
            database_url=settings.database_url, tls=tls_mode(settings.tls, serving=True),
        ))
        log.info(
            "counting service ready: %d enrolled participants, min_participants=%d",
            len(app.state.members),
            settings.min_participants,
        )
        try:
            yield
        finally:
            store.close()

    members = Members(settings, store)
    app = service_app(
        settings,
        routers=(router,),
        caller=lambda scope: caller_of(scope, settings, members),
        body_limits=BODY_LIMITS,
        registry=CollectorRegistry(),
        # A read of a roster no job has: one trivial query through the store's own engine.
        checks=lambda: {"database": lambda: store.roster("")},
        title="fedclust counting service",
        description=(
            "Receives each participant's N_l and releases only ΣN_l of a job, once every "
            "participant on its roster (at least the configured minimum) has reported. Holds "
            "each job's Paillier private key and decrypts only aggregates of at least the "
            "minimum cohort, each round once."
        ),
        openapi_tags=_TAGS,
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.store = store
    app.state.members = members
    app.state.keyholder = PaillierKeyHolder(
        store, bits=settings.paillier_bits, min_cohort=max(3, settings.min_participants)
    )
    return app
