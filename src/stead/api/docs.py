"""``/docs`` (Swagger UI) and ``/redoc``, rendered from files shipped in the
installed packages: no CDN at run time, so they render offline.

The scripts and styles come from the ``fastapi-offline`` wheel (a locked
dependency that vendors swagger-ui-dist and ReDoc); this module only serves
them under ``/docs/static``.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from starlette.staticfiles import StaticFiles

ASSETS_PACKAGE = "fastapi_offline"
STATIC = "/docs/static"
TITLE = "stead API"


def assets_dir() -> Path:
    return Path(str(files(ASSETS_PACKAGE) / "static"))


def install(app: FastAPI) -> None:
    """Adds the two pages and their assets; call on an app made with
    ``docs_url=None, redoc_url=None`` (FastAPI's own pages load from a CDN)."""
    app.mount(STATIC, StaticFiles(directory=assets_dir()), name="docs-static")

    async def swagger(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_swagger_ui_html(
            openapi_url=f"{root}/openapi.json",
            title=TITLE,
            swagger_js_url=f"{root}{STATIC}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{STATIC}/swagger-ui.css",
            swagger_favicon_url=f"{root}{STATIC}/favicon.png",
        )

    async def redoc(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_redoc_html(
            openapi_url=f"{root}/openapi.json",
            title=TITLE,
            redoc_js_url=f"{root}{STATIC}/redoc.standalone.js",
            redoc_favicon_url=f"{root}{STATIC}/favicon.png",
            with_google_fonts=False,
        )

    app.add_route("/docs", swagger, include_in_schema=False)
    app.add_route("/redoc", redoc, include_in_schema=False)
