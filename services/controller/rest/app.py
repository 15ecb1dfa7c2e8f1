"""Builds the FastAPI application served by every controller process.

Security (issue 23): the app-wide dependency (``deps.request_context``) authenticates and authorizes
every route when ``ControllerApi.security`` is on; 401 and 403 answers carry ``ErrorBody`` with Kafka's
names (``SASL_AUTHENTICATION_FAILED``, ``TOPIC_AUTHORIZATION_FAILED``, ...). A write that succeeded is
written to the audit log as an ``admin_change`` (who, what, from where), once, by the controller that
did it (a standby that forwarded the request leaves it to the active one)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import Depends, FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi_offline import FastAPIOffline

from services.controller.api import ControllerApi
from services.controller.authz import audit_change
from services.controller.rest import (
    acls,
    broker_configs,
    cleaner,
    cluster,
    groups,
    leaders,
    log_dirs,
    quotas,
    topics,
    transactions,
    users,
)
from services.controller.rest.balancer import router as balancer_router
from services.controller.rest.deps import request_context
from services.controller.rest.docs import keep_docs_offline
from services.controller.rest.errors import document_errors
from services.controller.rest.reassignments import router as reassignments_router
from shared.errors import ErrorCode, TidelogError
from shared.security.access import AuthorizationFailed

_STATUS = {
    ErrorCode.TOPIC_ALREADY_EXISTS: 409,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: 404,
    ErrorCode.NOT_CONTROLLER: 503,
    ErrorCode.GROUP_ID_NOT_FOUND: 404,
    ErrorCode.NON_EMPTY_GROUP: 409,
    ErrorCode.COORDINATOR_NOT_AVAILABLE: 503,
    ErrorCode.TRANSACTIONAL_ID_NOT_FOUND: 404,
    ErrorCode.SASL_AUTHENTICATION_FAILED: 401,
    ErrorCode.TOPIC_AUTHORIZATION_FAILED: 403,
    ErrorCode.GROUP_AUTHORIZATION_FAILED: 403,
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED: 403,
    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: 403,
}


def create_app(controller: ControllerApi | None) -> FastAPI:
    """The app over the controller's request layer (None: no route may reach a controller, as in tests
    of the app alone)."""
    # Swagger UI (/docs) and ReDoc (/redoc) from assets shipped in the fastapi-offline package: no CDN.
    app = FastAPIOffline(
        title="Tidelog admin API",
        version="1",
        description="Manage a Tidelog cluster: cluster state, topics, quotas, ACLs and users.",
        dependencies=[Depends(request_context)],  # every route enters through the request context
    )
    app.state.controller = controller
    keep_docs_offline(app)
    app.include_router(cluster.router)
    app.include_router(topics.router)
    app.include_router(leaders.router)
    app.include_router(cleaner.router)
    app.include_router(groups.router)
    app.include_router(quotas.router)
    app.include_router(transactions.router)
    app.include_router(broker_configs.router)
    app.include_router(log_dirs.router)
    app.include_router(reassignments_router)
    app.include_router(balancer_router)
    app.include_router(acls.router)  # /v1/acls and /v1/users (issue 23)
    app.include_router(users.router)
    document_errors(app)  # every route lists its error codes with ErrorBody (and 401/403); no FastAPI 422

    @app.middleware("http")
    async def audit_admin_changes(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        response = await call_next(request)
        state = request.scope.get("state") or {}
        change = state.get("admin_change")
        if change is not None and response.status_code < 400 and not state.get("forwarded"):
            ctx = state.get("context")
            if ctx is not None:
                audit_change(ctx, change, f"HTTP {response.status_code}")
        return response

    @app.exception_handler(TidelogError)
    async def tidelog_error(_: Request, exc: TidelogError) -> JSONResponse:
        status = _STATUS.get(exc.code, 400)
        return JSONResponse(status_code=status, content={"error": exc.code.name, "message": exc.args[0] if exc.args else exc.code.name})

    @app.exception_handler(AuthorizationFailed)
    async def not_authorized(_: Request, exc: AuthorizationFailed) -> JSONResponse:
        return JSONResponse(status_code=403, content={"error": exc.code.name, "message": exc.message})

    @app.exception_handler(RequestValidationError)
    async def bad_body(_: Request, exc: RequestValidationError) -> JSONResponse:
        details = [
            {"field": ".".join(str(p) for p in e["loc"]), "message": e["msg"]} for e in exc.errors()
        ]
        return JSONResponse(
            status_code=400,
            content={"error": "INVALID_REQUEST", "message": "; ".join(f"{d['field']}: {d['message']}" for d in details), "details": details},
        )

    return app
