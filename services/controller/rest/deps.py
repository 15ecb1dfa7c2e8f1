"""Dependencies shared by every REST router: the controller's request layer (``services/controller/api``),
reached through the app, and the request context every route enters through (``shared.request_context``:
principal, client id, peer and the authorization hook, as on the services' gRPC doors).

``request_context`` is an app-wide dependency (``app.py``), so a route added later cannot skip it; a
route names it again (``Ctx``) to hand the context to its API function (FastAPI solves it once per request).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, HTTPException, Request

from services.controller.api import ControllerApi
from shared.request_context import NotAuthorized, RequestContext, allow_all, enter


def controller_api(request: Request) -> ControllerApi:
    return request.app.state.controller


def request_context(request: Request) -> RequestContext:
    """Every route's entry (an app-wide dependency): refused with 403 when the hook says no."""
    route = request.scope.get("route")
    api = f"{request.method} {getattr(route, 'path', request.url.path)}"
    peer = f"ipv4:{request.client.host}:{request.client.port}" if request.client else ""
    authorize = getattr(request.app.state, "authorize", allow_all)
    try:
        ctx = enter(api, request.headers.get("x-client-id", ""), peer, authorize)
    except NotAuthorized as exc:
        raise HTTPException(status_code=403, detail=str(exc)) from None
    request.state.context = ctx
    return ctx


Api = Annotated[ControllerApi, Depends(controller_api)]
Ctx = Annotated[RequestContext, Depends(request_context)]
