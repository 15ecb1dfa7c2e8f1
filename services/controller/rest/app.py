"""Builds the FastAPI application served by every controller process."""

from __future__ import annotations

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi_offline import FastAPIOffline

from services.controller.api import ControllerApi
from services.controller.rest import (
    broker_configs,
    cleaner,
    cluster,
    groups,
    leaders,
    log_dirs,
    quotas,
    topics,
    transactions,
)
from services.controller.rest.balancer import router as balancer_router
from services.controller.rest.deps import request_context
from services.controller.rest.docs import keep_docs_offline
from services.controller.rest.errors import document_errors
from services.controller.rest.reassignments import router as reassignments_router
from shared.errors import ErrorCode, TidelogError

_STATUS = {
    ErrorCode.TOPIC_ALREADY_EXISTS: 409,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: 404,
    ErrorCode.NOT_CONTROLLER: 503,
    ErrorCode.GROUP_ID_NOT_FOUND: 404,
    ErrorCode.NON_EMPTY_GROUP: 409,
    ErrorCode.COORDINATOR_NOT_AVAILABLE: 503,
    ErrorCode.TRANSACTIONAL_ID_NOT_FOUND: 404,
}


def create_app(controller: ControllerApi | None) -> FastAPI:
    """The app over the controller's request layer (None: no route may reach a controller, as in tests
    of the app alone)."""
    # Swagger UI (/docs) and ReDoc (/redoc) from assets shipped in the fastapi-offline package: no CDN.
    app = FastAPIOffline(
        title="Tidelog admin API",
        version="1",
        description="Manage a Tidelog cluster: cluster state, topics and quotas.",
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
    document_errors(app)  # every route lists its error codes with ErrorBody; no FastAPI 422

    @app.exception_handler(TidelogError)
    async def tidelog_error(_: Request, exc: TidelogError) -> JSONResponse:
        status = _STATUS.get(exc.code, 400)
        return JSONResponse(status_code=status, content={"error": exc.code.name, "message": exc.args[0] if exc.args else exc.code.name})

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
