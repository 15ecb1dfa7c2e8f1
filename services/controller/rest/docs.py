"""The API's documentation pages, fully offline: Swagger UI at /docs and ReDoc at /redoc are served from
the assets the ``fastapi-offline`` package ships (no CDN), and a Content-Security-Policy keeps the pages
from reaching anything but this server (ReDoc's footer would otherwise load its logo from the web)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import FastAPI, Request, Response

DOC_PATHS = ("/docs", "/redoc")
#: Inline scripts/styles: FastAPI's Swagger UI page starts the UI from an inline script; ReDoc runs a
#: web worker from a blob: URL and inlines its styles.
DOCS_CSP = ("default-src 'self'; script-src 'self' 'unsafe-inline' blob:; worker-src 'self' blob:; "
            "style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; font-src 'self' data:; connect-src 'self'")


def keep_docs_offline(app: FastAPI) -> None:
    @app.middleware("http")
    async def docs_csp(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        response = await call_next(request)
        if request.url.path in DOC_PATHS:
            response.headers["Content-Security-Policy"] = DOCS_CSP
        return response
