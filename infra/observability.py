"""Probes and Prometheus metrics shared by the coordinator and the counting service.

:func:`add_observability` adds three operator endpoints to an app, none of them in the
OpenAPI document (they are for the platform, not API clients; ``/api/v1/health`` stays the
documented health check):

- ``GET /healthz``: liveness, 200 ``{"status": "ok"}`` whenever the process serves requests.
- ``GET /readyz``: readiness, 200 when every named check passes, else 503 with
  ``{"status": "not ready", "not_ready": [names], "checks": {name: "ok" | reason}}``. A reason
  is the exception's type, never its text (which could carry a database URL).
- ``GET /metrics``: the app's own :class:`~prometheus_client.CollectorRegistry` in the
  Prometheus text format, only when the service's settings say ``metrics = true`` (404
  otherwise). It needs no token: scrapes come from inside the operator's network, and no
  metric carries a participant, a job id or a value of the data.

:class:`RequestMetrics` counts requests by method, route template (``/api/v1/jobs/{job_id}``,
never the concrete path, so the series stay few) and status.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest
from starlette.routing import Mount

__all__ = ["Check", "RequestMetrics", "add_observability", "route_template", "run_checks"]

#: A readiness check: ready when it returns (its value is ignored), not ready when it raises.
Check = Callable[[], object]
_UNMATCHED: Final = "unmatched"


class RequestMetrics:
    """ASGI middleware counting HTTP requests into ``fedclust_http_requests_total``."""

    def __init__(self, app: Any, *, registry: CollectorRegistry) -> None:
        self.app = app
        self.requests = Counter(
            "fedclust_http_requests",
            "HTTP requests by method, route template and status code.",
            ("method", "route", "status"),
            registry=registry,
        )

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500  # an exception escaping the app is answered 500 by the server

        async def observed_send(message: Any) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, observed_send)
        finally:
            self.requests.labels(scope.get("method", ""), route_template(scope), str(status)).inc()


def route_template(scope: Mapping[str, Any]) -> str:
    """The matched route's template, e.g. ``/api/v1/jobs/{job_id}``; ``unmatched`` when no route
    matched (a 404 of the router), so an attacker's paths never become series.

    It is rebuilt from the concrete path and the router's ``path_params`` (each value, in path
    order, put back as ``{name}``): a route of an included router knows only its path without
    the router's prefix, and the framework keeps the full template to itself. A mount answers
    ``<mount>/{path}``; a value that is not one path segment falls back to the route's own path.
    """
    route = scope.get("route")
    if route is None:
        return _UNMATCHED
    own = str(getattr(route, "path", "") or _UNMATCHED)
    if isinstance(route, Mount):
        return f"{own}/{{path}}"
    segments = str(scope.get("path", "")).split("/")
    cursor = 0
    for name, value in dict(scope.get("path_params", {})).items():
        try:
            found = segments.index(str(value), cursor)
        except ValueError:
            return own
        segments[found] = f"{{{name}}}"
        cursor = found + 1
    return "/".join(segments)


def run_checks(checks: Mapping[str, Check]) -> dict[str, str]:
    """Each check's outcome: ``"ok"`` or ``"failed: <exception type>"``."""
    outcomes: dict[str, str] = {}
    for name, check in checks.items():
        try:
            check()
        except Exception as exc:  # a probe reports every failure; it never raises
            outcomes[name] = f"failed: {type(exc).__name__}"
        else:
            outcomes[name] = "ok"
    return outcomes


def add_observability(
    app: FastAPI,
    *,
    registry: CollectorRegistry,
    checks: Callable[[], Mapping[str, Check]],
    metrics: bool,
) -> None:
    """Add ``/healthz``, ``/readyz`` and (served when ``metrics``) ``/metrics`` to ``app``,
    and the request counter; ``checks`` gives the readiness checks at each probe (the
    services exist only while the app runs)."""
    app.add_middleware(RequestMetrics, registry=registry)

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", include_in_schema=False)
    def readyz() -> JSONResponse:  # sync: the checks block (database, HTTP)
        outcomes = run_checks(checks())
        failed = [name for name, outcome in outcomes.items() if outcome != "ok"]
        if failed:
            return JSONResponse(
                status_code=503,
                content={"status": "not ready", "not_ready": failed, "checks": outcomes},
            )
        return JSONResponse(content={"status": "ready", "checks": outcomes})

    @app.get("/metrics", include_in_schema=False)
    def prometheus_metrics() -> Response:  # sync: collectors may query the database
        if not metrics:
            return JSONResponse(
                status_code=404,
                content={"detail": "metrics are off; set metrics = true in the config"},
            )
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
