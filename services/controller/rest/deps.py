"""Dependencies shared by every REST router: the controller's request layer (``services/controller/api``),
reached through the app, and the request context every route enters through (``shared.request_context``:
principal, client id, peer and the authorization hook, as on the services' gRPC doors).

``request_context`` is an app-wide dependency (``app.py``), so a route added later cannot skip it; a
route names it again (``Ctx``) to hand the context to its API function (FastAPI solves it once per request).

When security is on (``ControllerApi.security`` enabled, issue 23) it also authenticates the request
(HTTP Basic with a SCRAM user, ``auth.py``: 401 otherwise) and checks the route's rule (``rules.py``:
403 with Kafka's error name otherwise) before any route runs. Plaintext: everyone is ANONYMOUS and
allowed, as before. A route that changes something is marked for the audit log's ``admin_change``
(written by ``app.py`` once it succeeded).
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import Depends, HTTPException, Request

from services.controller.api import ControllerApi
from services.controller.authz import Op, Res, allowed, denied_error, require
from services.controller.rest.auth import BasicAuthenticator
from services.controller.rest.rules import Rule, rule_for
from shared.errors import NotActiveError
from shared.quota.entities import ANONYMOUS
from shared.request_context import ON_BEHALF_OF_HEADER, NotAuthorized, RequestContext, allow_all, enter, subject_role
from shared.security.access import DENY_ALL, access_of
from shared.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from shared.security.transport import PEER_SUBJECT_SCOPE_KEY

#: any right on a resource type lets a principal call its list route (READ, WRITE... imply DESCRIBE)
_ANY_RIGHT = (Op.DESCRIBE, Op.READ, Op.WRITE, Op.CREATE, Op.DELETE, Op.ALTER)


def controller_api(request: Request) -> ControllerApi:
    return request.app.state.controller


async def request_context(request: Request) -> RequestContext:
    """Every route's entry (an app-wide dependency): 401 without a valid credential and 403 without the
    route's rights when security is on; 403 when the hook says no."""
    route = request.scope.get("route")
    route_path = getattr(route, "path", request.url.path)
    api = f"{request.method} {route_path}"
    peer = f"ipv4:{request.client.host}:{request.client.port}" if request.client else ""
    authorize = getattr(request.app.state, "authorize", allow_all)
    c = request.app.state.controller
    access = access_of(c) if c is not None else None
    principal = ANONYMOUS if access is None else await _authenticate(request, c, access)
    try:
        ctx = enter(api, request.headers.get("x-client-id", ""), peer, authorize, principal=principal)
    except NotAuthorized as exc:
        raise HTTPException(status_code=403, detail=str(exc)) from None
    rule = rule_for(request.method, route_path)
    if access is not None:
        await _authorize(request, ctx, access, rule)
    elif rule is not None and rule.change:
        request.state.admin_change = await _resources(request, rule)
    request.state.context = ctx
    return ctx


def authenticator(request: Request) -> BasicAuthenticator:
    auth = getattr(request.app.state, "basic_auth", None)
    if auth is None:
        auth = request.app.state.basic_auth = BasicAuthenticator()
    return auth


async def _authenticate(request: Request, c: Any, access: Any) -> str:
    if access is DENY_ALL or getattr(c.security, "store", None) is None:
        raise NotActiveError("this controller's security is still starting; retry shortly")
    subject = request.scope.get(PEER_SUBJECT_SCOPE_KEY)
    if subject and not request.headers.get("authorization"):  # a verified client certificate (a service)
        name, dn = c.security.principal_for_subject(subject)
        if name != ANONYMOUS:
            behalf = request.headers.get(ON_BEHALF_OF_HEADER)
            return behalf if behalf and subject_role(dn) == "broker" else name  # a Kafka client's admin request
    host = request.client.host if request.client else ""
    return await authenticator(request).authenticate(request.headers.get("authorization"), host,
                                                     c.security.store.credential)


async def _body(request: Request) -> Any:
    try:
        return json.loads(await request.body() or b"null")
    except (ValueError, UnicodeDecodeError):
        return None  # the route's validation answers 400


async def _resources(request: Request, rule: Rule) -> str:
    body = await _body(request) if any(n.uses_body for n in rule.needs) else None
    names = [f"{n.rtype.name}:{n.name(request, body)}" for n in rule.needs]
    return ", ".join(names) or f"CLUSTER:{CLUSTER_NAME}"


async def _authorize(request: Request, ctx: RequestContext, access: Any, rule: Rule | None) -> None:
    if rule is None:  # a route without a rule is nobody's (and fails the unit tests)
        raise denied_error(ctx, Op.ALTER, Res.CLUSTER, CLUSTER_NAME, "no authorization rule for this route")
    if rule.listed and not any(_some_right(access, ctx, t) for t in rule.listed):
        raise denied_error(ctx, Op.DESCRIBE, rule.listed[0], "*", "no right on any of them")
    body = await _body(request) if any(n.uses_body for n in rule.needs) else None
    resources = []
    for n in rule.needs:
        name = n.name(request, body)
        if name is None:  # not in the request (its validation answers 400): a right on some resource will do
            if not any(_allowed_any(access, ctx, op, n.rtype) for op in n.ops):
                raise denied_error(ctx, n.ops[0], n.rtype, "*", "no right on any")
            continue
        if not (n.or_cluster and allowed(access, ctx, n.ops[0], Res.CLUSTER, CLUSTER_NAME)):
            require(access, ctx, n.ops, n.rtype, name)
        resources.append(f"{n.rtype.name}:{name}")
    if rule.change:
        request.state.admin_change = ", ".join(resources) or f"CLUSTER:{CLUSTER_NAME}"


def _allowed_any(access: Any, ctx: RequestContext, op: AclOperation, rtype: ResourceType) -> bool:
    """Kafka's ``authorizeByResourceType`` (``Access.allowed_any``)."""
    check = getattr(access, "allowed_any", None)
    return bool(check(ctx, op, rtype)) if check is not None else False


def _some_right(access: Any, ctx: RequestContext, rtype: ResourceType) -> bool:
    if rtype == Res.CLUSTER:
        return bool(access.allowed(ctx, Op.DESCRIBE, Res.CLUSTER, CLUSTER_NAME))
    return any(_allowed_any(access, ctx, op, rtype) for op in _ANY_RIGHT)


def forward_headers(request: Request) -> dict[str, str]:
    """What a standby passes on to the active controller: the body's type and the caller's credential
    (the active controller authenticates and authorizes the request again)."""
    headers = {"content-type": "application/json"}
    for name in ("authorization", "x-client-id"):
        value = request.headers.get(name)
        if value:
            headers[name] = value
    return headers


def forward_verify(c: ControllerApi) -> Any:
    """httpx's ``verify`` for a standby's call to the active controller: the cluster CA when TLS is on."""
    tls = getattr(getattr(c, "security", None), "tls", None)
    return getattr(tls, "cafile", None) or True


Api = Annotated[ControllerApi, Depends(controller_api)]
Ctx = Annotated[RequestContext, Depends(request_context)]
