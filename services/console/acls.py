"""ACLs and users (issue 23): the ACL bindings (Kafka's DescribeAcls, filtered by principal and resource
type) with a form that adds one (CreateAcls) and a button per binding that removes it (DeleteAcls with that
exact binding as the filter); the SCRAM users, their mechanisms and iteration counts (never a credential).
Pages and JSON, over ``/v1/acls`` and ``/v1/users``.

On a secure cluster every call is the signed-in user's: only a user with CLUSTER DESCRIBE sees the lists
and only one with CLUSTER ALTER changes an ACL; others see ``CLUSTER_AUTHORIZATION_FAILED`` in the page.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from services.console.upstream import UpstreamError
from services.console.web import form, form_error, render, rest

router = APIRouter()
RESOURCE_TYPES = ("TOPIC", "GROUP", "CLUSTER", "TRANSACTIONAL_ID", "USER")
OPERATIONS = ("ALL", "READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS",
              "ALTER_CONFIGS", "IDEMPOTENT_WRITE", "CREATE_TOKENS", "DESCRIBE_TOKENS")
PATTERN_TYPES = ("LITERAL", "PREFIXED")
PERMISSIONS = ("ALLOW", "DENY")
BINDING_FIELDS = ("resource_type", "resource_name", "pattern_type", "principal", "host", "operation",
                  "permission_type")
CLUSTER_NAME = "kafka-cluster"  # Kafka's name of the one CLUSTER resource


def _choice(values: dict[str, str], key: str, allowed: tuple[str, ...], default: str | None = None) -> str:
    raw = (values.get(key) or "").strip().upper() or (default or "")
    if raw not in allowed:
        raise ValueError(f"{key}: one of {', '.join(allowed)}")
    return raw


def principal_of(text: str) -> str:
    """``alice`` -> ``User:alice``; ``User:alice`` and ``User:*`` as they are."""
    text = text.strip()
    if not text:
        raise ValueError("principal: a user name, or User:<name> (User:* for everyone)")
    return text if text.startswith("User:") else f"User:{text}"


def binding_from_form(values: dict[str, str]) -> dict[str, str]:
    """One binding (``/v1/acls``' shape) from the add form; the CLUSTER's name is filled in."""
    rtype = _choice(values, "resource_type", RESOURCE_TYPES)
    name = (values.get("resource_name") or "").strip()
    if rtype == "CLUSTER":
        name = name or CLUSTER_NAME
    if not name:
        raise ValueError("resource_name: a name, '*' for every resource of the type, or a prefix (PREFIXED)")
    return {"resource_type": rtype, "resource_name": name,
            "pattern_type": _choice(values, "pattern_type", PATTERN_TYPES, "LITERAL"),
            "principal": principal_of(values.get("principal", "")),
            "host": (values.get("host") or "").strip() or "*",
            "operation": _choice(values, "operation", OPERATIONS),
            "permission_type": _choice(values, "permission_type", PERMISSIONS, "ALLOW")}


def exact_filter(binding: dict[str, str]) -> dict[str, str]:
    """``DELETE /v1/acls``' query selecting exactly ``binding`` (its permission is ``permission``)."""
    out = {k: binding[k] for k in BINDING_FIELDS if k != "permission_type"}
    out["permission"] = binding["permission_type"]
    return out


def list_filter(params: Any) -> dict[str, str]:
    """The list's filter from the query string: a principal and / or a resource type (empty: any)."""
    out: dict[str, str] = {}
    principal = (params.get("principal") or "").strip()
    if principal:
        out["principal"] = principal_of(principal)
    rtype = (params.get("resource_type") or "").strip().upper()
    if rtype and rtype != "ANY":
        if rtype not in RESOURCE_TYPES:
            raise ValueError(f"resource_type: one of {', '.join(RESOURCE_TYPES)}")
        out["resource_type"] = rtype
    return out


def sort_key(b: dict[str, Any]) -> tuple[str, ...]:
    return (b["resource_type"], b["resource_name"], b["pattern_type"], b["principal"], b["operation"],
            b["permission_type"], b["host"])


async def acls_data(request: Request, flt: dict[str, str]) -> dict[str, Any]:
    """The bindings, or why they cannot be listed (the form is shown either way)."""
    rows, list_error = None, None
    try:
        rows = sorted(await rest(request).acls(flt), key=sort_key)
    except UpstreamError as exc:
        if exc.status == 401:
            raise
        list_error = exc
    return {"acls": rows, "list_error": list_error, "filter": flt, "resource_types": RESOURCE_TYPES,
            "operations": OPERATIONS, "pattern_types": PATTERN_TYPES, "permissions": PERMISSIONS}


def _context(d: dict[str, Any], error: Any, values: dict[str, str], done: str | None) -> dict[str, Any]:
    return {"title": "ACLs", "d": d, "error": error, "values": values, "done": done}


@router.get("/acls", response_class=HTMLResponse)
async def acls_page(request: Request) -> HTMLResponse:
    try:
        flt = list_filter(request.query_params)
    except ValueError as exc:
        return render(request, "acls.html", _context(await acls_data(request, {}), form_error(exc), {}, None), 400)
    d = await acls_data(request, flt)
    status = d["list_error"].status if d["list_error"] is not None and 400 <= d["list_error"].status < 500 else 200
    return render(request, "acls.html", _context(d, None, {}, request.query_params.get("done")), status)


@router.get("/api/acls")
async def acls_json(request: Request) -> dict[str, Any]:
    """``GET /v1/acls`` with the same query (a filter), passed on."""
    return {"acls": await rest(request).acls(dict(request.query_params))}


async def _refused(request: Request, exc: Exception, values: dict[str, str]) -> HTMLResponse:
    err = form_error(exc)
    if err.status == 401:
        raise err
    return render(request, "acls.html", _context(await acls_data(request, {}), err, values, None),
                  err.status if err.status < 500 else 400)


@router.post("/acls", response_class=HTMLResponse)
async def add_acl(request: Request) -> Response:
    values = await form(request)
    try:
        binding = binding_from_form(values)
        result = await rest(request).create_acls([binding])
    except (UpstreamError, ValueError) as exc:
        return await _refused(request, exc, values)
    done = "ACL added." if result.get("created") else "That ACL was already there."
    return RedirectResponse("/acls?" + urlencode({"done": done}), status_code=303)


@router.post("/acls/remove", response_class=HTMLResponse)
async def remove_acl(request: Request) -> Response:
    values = await form(request)
    try:
        binding = binding_from_form(values)
        removed = await rest(request).delete_acls(exact_filter(binding))
    except (UpstreamError, ValueError) as exc:
        return await _refused(request, exc, {})
    done = "ACL removed." if removed else "That ACL was not there (any more)."
    return RedirectResponse("/acls?" + urlencode({"done": done}), status_code=303)


@router.post("/api/acls")
async def add_acls_json(request: Request) -> dict[str, Any]:
    """``{"acls": [binding, ...]}``, passed on to ``POST /v1/acls``."""
    try:
        body = await request.json()
        if not isinstance(body, dict) or not isinstance(body.get("acls"), list):
            raise ValueError('the body must be {"acls": [binding, ...]}')
    except ValueError as exc:
        raise form_error(exc) from None
    return await rest(request).create_acls(body["acls"])


@router.delete("/api/acls")
async def delete_acls_json(request: Request) -> dict[str, Any]:
    """``DELETE /v1/acls`` with the same query (a filter): the bindings deleted."""
    if not request.query_params:
        raise UpstreamError("INVALID_REQUEST", "give a filter (delete every ACL with the REST API itself)", 400)
    return {"acls": await rest(request).delete_acls(dict(request.query_params))}


# -- users ----------------------------------------------------------------------------------------------------

@router.get("/users", response_class=HTMLResponse)
async def users_page(request: Request) -> HTMLResponse:
    users = sorted(await rest(request).users(), key=lambda u: u["name"])
    return render(request, "users.html", {"title": "Users", "users": users})


@router.get("/api/users")
async def users_json(request: Request) -> dict[str, Any]:
    return {"users": await rest(request).users()}
