"""The console's FastAPI application: server-rendered pages (Jinja2, autoescaped) and a JSON API behind each.

Every asset is served from ``/static`` (htmx vendored, pinned; our CSS and script); the Content-Security-
Policy allows nothing from another origin and no inline script, so even markup that slipped through could
not run. The cluster is reached only through ``upstream.RestApi`` (REST) and ``logs`` (client gRPC).

On a secure cluster (``ConsoleConfig.security``) every route but ``/static`` and ``/healthz`` needs a
signed-in user (``auth.SignIn``: HTTP Basic, the browser's prompt) and runs as that user; a 401 from the
cluster (the password changed) ends the session and prompts again.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from fastapi.staticfiles import StaticFiles

from services.console import acls, groups, messages, overview, quotas, topics, transactions
from services.console.auth import CHALLENGE, PUBLIC_PREFIXES, ConsoleSecurity, SignIn
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
    security: ConsoleSecurity | None = None  # a secure cluster: HTTPS, sign-in, everything as the user


async def _brokers(api: RestApi, secure: bool) -> list[dict[str, Any]]:
    if secure:  # the console has no rights of its own: the brokers a signed-in user's page saw last
        return list(api.seen.get("brokers", []))
    return (await api.cluster())["brokers"]


def same_origin(request: Request) -> bool:
    """No ``Origin`` header (not a browser's cross-origin request), or the console's own origin."""
    origin = request.headers.get("origin")
    if not origin:
        return True
    return urlsplit(origin).netloc.lower() == (request.headers.get("host") or "").lower()


def _unauthorized(request: Request, exc: UpstreamError) -> Response:
    """401 with the Basic challenge (the browser prompts again), as a page or JSON."""
    headers = {"WWW-Authenticate": CHALLENGE, "Cache-Control": "no-store"}
    if request.url.path.startswith("/api/"):
        return JSONResponse({"error": exc.error, "message": exc.message}, status_code=401, headers=headers)
    response = render(request, "error.html", {"title": exc.error, "error": exc}, 401)
    response.headers.update(headers)
    return response


def create_app(config: ConsoleConfig) -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.metrics.start()
        lag_task = asyncio.create_task(groups.follow(app, config.metrics_interval_s))
        yield
        lag_task.cancel()
        await app.state.metrics.close()
        if app.state.sign_in is not None:
            await asyncio.to_thread(app.state.sign_in.close)
        await app.state.rest.close()
        if app.state.sender is not None:
            await asyncio.to_thread(app.state.sender.close)
        if app.state.reader is not None:
            await asyncio.to_thread(app.state.reader.close)

    app = FastAPI(title="Tidelog console", version="1", lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url="/api/openapi.json")
    app.state.config = config
    security = config.security
    app.state.rest = RestApi(config.rest_urls, verify=ssl.create_default_context(cafile=security.cafile)
                             if security is not None else True)
    app.state.sign_in = SignIn(security, app.state.rest, config.bootstrap) if security is not None else None
    # the console's own gRPC clients: plaintext only (on a secure cluster each user has theirs)
    app.state.reader = LogReader(config.bootstrap) if security is None else None
    app.state.sender = RecordSender(config.bootstrap) if security is None else None
    app.state.templates = templates()
    app.state.lag_watch = groups.LagWatch()
    app.state.metrics = MetricsSampler(lambda: _brokers(app.state.rest, security is not None),
                                       config.metrics_interval_s)
    app.mount("/static", StaticFiles(directory=os.path.join(HERE, "static")), name="static")
    for module in (overview, topics, messages, groups, transactions, quotas, acls):
        app.include_router(module.router)

    @app.middleware("http")
    async def guard(request: Request, call_next: Any) -> Response:
        # A form posted from another site must not act with this console's rights.
        if request.method not in ("GET", "HEAD") and request.headers.get("sec-fetch-site") in ("cross-site", "same-site"):
            return JSONResponse({"error": "CLUSTER_AUTHORIZATION_FAILED", "message": "cross-site request refused"},
                                status_code=403)
        sign_in: SignIn | None = request.app.state.sign_in
        if sign_in is not None and request.method not in ("GET", "HEAD") and not same_origin(request):
            # the browser sends a signed-in user's Basic credential with any site's form: refuse another origin's
            return JSONResponse({"error": "CLUSTER_AUTHORIZATION_FAILED", "message": "cross-origin request refused"},
                                status_code=403)
        if sign_in is not None and not request.url.path.startswith(PUBLIC_PREFIXES):
            try:
                request.state.session_key, request.state.session = await sign_in.session(
                    request.headers.get("authorization"), request.client.host if request.client else "")
            except UpstreamError as exc:
                response = _unauthorized(request, exc) if exc.status == 401 else await upstream_error(request, exc)
                return _secured(response)
            response = await call_next(request)
            response.headers.setdefault("Cache-Control", "no-store")  # a user's view of the cluster: not cached
            return _secured(response)
        return _secured(await call_next(request))

    def _secured(response: Response) -> Response:
        response.headers.setdefault("Content-Security-Policy", CSP)
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers.setdefault("Referrer-Policy", "same-origin")
        return response

    @app.exception_handler(UpstreamError)
    async def upstream_error(request: Request, exc: UpstreamError) -> Response:
        if exc.status == 401 and request.app.state.sign_in is not None:
            # the cluster no longer takes this user's credential: forget the session, prompt again
            request.app.state.sign_in.sessions.drop(getattr(request.state, "session_key", None))
            return _unauthorized(request, exc)
        status = exc.status if 400 <= exc.status < 600 else 502
        if request.url.path.startswith("/api/"):
            return JSONResponse({"error": exc.error, "message": exc.message}, status_code=status)
        return render(request, "error.html", {"title": exc.error, "error": exc}, status)

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return app
