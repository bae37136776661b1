"""The analysts' dashboard at ``/ui`` and the API documentation at ``/docs`` and ``/redoc``.

The dashboard is static HTML, JavaScript and CSS shipped in this package (``ui/``); it holds
no data: it asks for the analyst token and calls the JSON API with it, so every data request
is authenticated as any other client's. It is served with a Content-Security-Policy that lets
it load and contact nothing but this origin. The Swagger UI and ReDoc assets come from the
installed ``fastapi-offline`` package, served from this origin too, never from a CDN.
"""

from __future__ import annotations

from pathlib import Path

import fastapi_offline
from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from starlette.responses import Response
from starlette.types import Scope

__all__ = ["DOCS_ASSETS", "UI_DIR", "UI_PATH", "mount_ui"]

UI_PATH = "/ui"
DOCS_ASSETS = "/docs-assets"
UI_DIR = Path(__file__).resolve().parent.parent / "ui"
# The Swagger UI and ReDoc bundles of the installed fastapi-offline.
_DOCS_DIR = Path(fastapi_offline.__file__).resolve().parent / "static"

_UI_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


class _PolicedFiles(StaticFiles):
    """Static files sent with a same-origin-only Content-Security-Policy, not sniffed."""

    async def get_response(self, path: str, scope: Scope) -> Response:
        response = await super().get_response(path, scope)
        response.headers["Content-Security-Policy"] = _UI_POLICY
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Cache-Control"] = "no-cache"
        return response


def mount_ui(app: FastAPI, *, openapi_url: str = "/openapi.json") -> None:
    """Serve the dashboard at ``/ui/`` and the local-asset API documentation on ``app``.

    ``app`` must be created with ``docs_url=None, redoc_url=None`` (FastAPI's own pages load
    their assets from a CDN).
    """
    app.mount(UI_PATH, _PolicedFiles(directory=UI_DIR, html=True), name="ui")
    app.mount(DOCS_ASSETS, StaticFiles(directory=_DOCS_DIR), name="docs-assets")
    title = app.title

    @app.get(UI_PATH, include_in_schema=False)
    def ui_root() -> RedirectResponse:
        return RedirectResponse(f"{UI_PATH}/")

    @app.get("/docs", include_in_schema=False)
    def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url,
            title=f"{title} — API",
            swagger_js_url=f"{DOCS_ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{DOCS_ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{DOCS_ASSETS}/favicon.png",
        )

    @app.get("/redoc", include_in_schema=False)
    def redoc() -> HTMLResponse:
        return get_redoc_html(
            openapi_url=openapi_url,
            title=f"{title} — API",
            redoc_js_url=f"{DOCS_ASSETS}/redoc.standalone.js",
            redoc_favicon_url=f"{DOCS_ASSETS}/favicon.png",
            with_google_fonts=False,
        )
