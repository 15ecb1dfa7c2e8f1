"""The console's FastAPI application: server-rendered pages (Jinja2, autoescaped) and a JSON API behind each.

Every asset is served from ``/static`` (htmx vendored, pinned; our CSS and script); the Content-Security-
Policy allows nothing from another origin and no inline script, so even markup that slipped through could
not run. The cluster is reached only through ``upstream.RestApi`` (REST) and ``logs`` (client gRPC).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from fastapi.staticfiles import StaticFiles

from services.console import groups, messages, overview, quotas, topics, transactions
from services.console.logs import LogReader, RecordSender
from services.console.metrics import MetricsSampler
from services.console.upstream import RestApi, UpstreamError
from services.console.web import render, templates

HERE = os.path.dirname(os.path.abspath(__file__))
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")


@dataclass
class ConsoleConfig:
    rest_urls: list[str]
    bootstrap: str  # brokers' gRPC addresses, "host:port,host:port"
    metrics_interval_s: float = 10.0  # how often the brokers' /metrics are read (traffic, disk use, sizes)


async def _brokers(api: RestApi) -> list[dict[str, Any]]:
    return (await api.cluster())["brokers"]


def create_app(config: ConsoleConfig) -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.metrics.start()
        lag_task = asyncio.create_task(groups.follow(app, config.metrics_interval_s))
        yield
        lag_task.cancel()
        await app.state.metrics.close()
        await app.state.rest.close()
        await asyncio.to_thread(app.state.sender.close)
        await asyncio.to_thread(app.state.reader.close)

    app = FastAPI(title="Tidelog console", version="1", lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url="/api/openapi.json")
    app.state.config = config
    app.state.rest = RestApi(config.rest_urls)
    app.state.reader = LogReader(config.bootstrap)
    app.state.sender = RecordSender(config.bootstrap)
    app.state.templates = templates()
    app.state.lag_watch = groups.LagWatch()
    app.state.metrics = MetricsSampler(lambda: _brokers(app.state.rest), config.metrics_interval_s)
    app.mount("/static", StaticFiles(directory=os.path.join(HERE, "static")), name="static")
    for module in (overview, topics, messages, groups, transactions, quotas):
        app.include_router(module.router)

    @app.middleware("http")
    async def guard(request: Request, call_next: Any) -> Response:
        # A form posted from another site must not act with this console's rights.
        if request.method not in ("GET", "HEAD") and request.headers.get("sec-fetch-site") in ("cross-site", "same-site"):
            return JSONResponse({"error": "CLUSTER_AUTHORIZATION_FAILED", "message": "cross-site request refused"},
                                status_code=403)
        response: Response = await call_next(request)
        response.headers.setdefault("Content-Security-Policy", CSP)
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers.setdefault("Referrer-Policy", "same-origin")
        return response

    @app.exception_handler(UpstreamError)
    async def upstream_error(request: Request, exc: UpstreamError) -> Response:
        status = exc.status if 400 <= exc.status < 600 else 502
        if request.url.path.startswith("/api/"):
            return JSONResponse({"error": exc.error, "message": exc.message}, status_code=status)
        return render(request, "error.html", {"title": exc.error, "error": exc}, status)

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return app
