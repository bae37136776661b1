"""The skeleton of both services' FastAPI apps: :func:`service_app`, and
:func:`identifier_path`, their path parameters that name a participant or a job.

An app at the protocol's version with its routers under :data:`API_PREFIX`; 422 naming the
offending fields without echoing values, 405 with a complete ``Allow`` (:mod:`infra.allow`);
the body guard (:mod:`infra.body_limit`), refusing unauthenticated and oversized bodies unread;
outside it the request counter, and the operators' ``/healthz``, ``/readyz`` and ``/metrics``
(:mod:`infra.observability`).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, Final, Protocol

from fastapi import APIRouter, FastAPI, Path, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from prometheus_client import CollectorRegistry

from fedclust.core.validation import IDENTIFIER_MAX_LENGTH, IDENTIFIER_PATTERN
from fedclust.infra.allow import method_not_allowed
from fedclust.infra.body_limit import BodySizeLimit, RouteLimit
from fedclust.infra.observability import Check, add_observability
from fedclust.protocol.wire.messages import MAX_BODY_BYTES, PROTOCOL_VERSION

__all__ = ["API_PREFIX", "ServiceSettings", "identifier_path", "service_app"]

API_PREFIX: Final = "/api/v1"


class ServiceSettings(Protocol):
    """What the skeleton reads of a service's settings."""

    @property
    def metrics(self) -> bool: ...

    @property
    def uploads_in_flight(self) -> int: ...


def service_app(
    settings: ServiceSettings,
    *,
    routers: Sequence[APIRouter],
    caller: Callable[[Mapping[str, Any]], Hashable],
    body_limits: Sequence[RouteLimit],
    registry: CollectorRegistry,
    checks: Callable[[], Mapping[str, Check]],
    public: Sequence[tuple[str, str]] = (),
    **metadata: Any,
) -> FastAPI:
    """A service's app: FastAPI's ``metadata`` (title, lifespan, ...), ``routers`` under
    :data:`API_PREFIX`; bodies up to ``body_limits`` (else ``MAX_BODY_BYTES``) read only once
    ``caller`` accepts the request, unless the route is ``public``; ``registry`` and the
    readiness ``checks`` for the probes (``/metrics`` served where ``settings.metrics``)."""
    app = FastAPI(version=f"{PROTOCOL_VERSION}", **metadata)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(405, method_not_allowed)
    app.add_middleware(BodySizeLimit, max_bytes=MAX_BODY_BYTES, routes=body_limits,
                       caller=caller, public=public,
                       uploads_in_flight=settings.uploads_in_flight)
    for router in routers:
        app.include_router(router, prefix=API_PREFIX)
    # After the body guard: the request counter sees its refusals (401, 413) too.
    add_observability(app, registry=registry, checks=checks, metrics=settings.metrics)
    return app


def identifier_path(description: str | None = None) -> Any:
    """A path parameter that must be an identifier (:data:`core.models.Identifier`'s rule), as
    ``Annotated[str, identifier_path()]``; otherwise 422."""
    return Path(
        min_length=1, max_length=IDENTIFIER_MAX_LENGTH, pattern=IDENTIFIER_PATTERN,
        description=description,
    )


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    """422 naming the offending fields and the rule, without echoing submitted values."""
    assert isinstance(exc, RequestValidationError)
    detail = [
        {"loc": list(e.get("loc", ())), "msg": str(e.get("msg", "")), "type": str(e["type"])}
        for e in exc.errors()
    ]
    return JSONResponse(status_code=422, content={"detail": detail})
