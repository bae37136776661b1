"""A 405 that names every method of the path in ``Allow`` (RFC 9110 §15.5.6).

Starlette answers 405 with the methods of the first route whose path matched; where one
path has several routes (``GET`` and ``POST /jobs``) that ``Allow`` is incomplete. This
handler asks every route which methods it fully matches for the path.
"""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import JSONResponse
from starlette.routing import Match

__all__ = ["method_not_allowed"]

_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


async def method_not_allowed(request: Request, exc: Exception) -> JSONResponse:
    """405 with ``Allow`` listing every method the request's path accepts."""
    methods = [
        method for method in _METHODS
        if any(
            route.matches({**request.scope, "method": method})[0] is Match.FULL
            for route in request.app.routes
        )
    ]
    return JSONResponse(
        status_code=405,
        content={"detail": f"method {request.method} is not allowed here"},
        headers={"Allow": ", ".join(methods)},
    )
