"""A fast path for the participants' per-round requests, beside FastAPI's own handling.

FastAPI handles a request by solving the route's dependency tree: each dependency, path,
query, header and cookie parameter resolved and validated anew (and the JSON body parsed into
a dict, then validated into its model). For the routes every participant calls once per round
that is most of the coordinator's work per request. A route of a router with
``route_class=FastPathRoute`` whose endpoint was registered with :func:`fast_path` first
offers each request to that fast path: a function reading the request's canonical form
itself (path and query parameters as plain text of one accepted form, a JSON body parsed once
by its pydantic model from the raw bytes) and answering it with the endpoint's own logic; it
returns None for anything else, and FastAPI's handler then answers as without it (the body is
read once, cached on the request). So every error, status and message is FastAPI's, the
OpenAPI document is the endpoint's declaration, and a request either path accepts gets the
same values and answer.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any, Final, TypeVar

from fastapi import HTTPException, Request, Response, status
from fastapi.routing import APIRoute

__all__ = [
    "FastPath", "FastPathRoute", "body_bytes", "canonical_query", "fast_path", "json_body",
]

#: A fast path: the response, or None to leave the request to FastAPI's handler.
FastPath = Callable[[Request], Awaitable[Response | None]]
E = TypeVar("E", bound=Callable[..., Any])

_FAST_PATHS: dict[Callable[..., Any], FastPath] = {}
#: One ``name=value`` pair of a query string that needs no decoding.
_PAIR: Final = re.compile(rb"([A-Za-z0-9_]+)=([A-Za-z0-9_.-]*)")


def fast_path(path: FastPath) -> Callable[[E], E]:
    """Register ``path`` as the fast path of the decorated endpoint (put it below the
    router's decorator)."""

    def register(endpoint: E) -> E:
        _FAST_PATHS[endpoint] = path
        return endpoint

    return register


class FastPathRoute(APIRoute):
    """An APIRoute whose requests go to its endpoint's fast path (:func:`fast_path`) first,
    and to FastAPI's handler when it returns None (or when the endpoint has none)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        general = super().get_route_handler()
        fast = _FAST_PATHS.get(self.endpoint)
        if fast is None:
            return general

        async def handler(request: Request) -> Response:
            response = await fast(request)
            return response if response is not None else await general(request)

        return handler


def canonical_query(query_string: bytes) -> Mapping[str, str] | None:
    """The parameters of a query string whose every pair is ``name=value`` of letters,
    digits and ``_.-`` (nothing to decode) and whose names are distinct; None otherwise."""
    params: dict[str, str] = {}
    if not query_string:
        return params
    for pair in query_string.split(b"&"):
        match = _PAIR.fullmatch(pair)
        if match is None:
            return None
        name = match[1].decode("ascii")
        if name in params:
            return None
        params[name] = match[2].decode("ascii")
    return params


def json_body(request: Request) -> bool:
    """Whether the request declares a JSON body plainly (``Content-Type: application/json``,
    any parameters after it)."""
    content_type = request.headers.get("content-type")
    return (
        content_type is not None
        and content_type.partition(";")[0].strip().lower() == "application/json"
    )


async def body_bytes(request: Request) -> bytes:
    """The request's body, read as FastAPI's handler reads it: an error while it arrives
    (the client gone) answers 400 (the body guard answers 413 instead for a body passing its
    limit as it streams)."""
    try:
        return await request.body()
    except HTTPException:
        raise
    except Exception as exc:  # FastAPI's handler answers these so
        raise HTTPException(
            status.HTTP_400_BAD_REQUEST, "There was an error parsing the body"
        ) from exc
