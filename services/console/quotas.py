"""Quotas: every entity and its values, the quotas that apply to a user and client id (and why), and a form
that sets or removes one key of one entity. Pages and JSON."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from services.console.upstream import UpstreamError
from services.console.web import form, form_error, render, rest
from shared.quota.entities import QUOTA_KEYS

router = APIRouter()
DEFAULT = "<default>"


def entity_label(entity: dict[str, str | None]) -> str:
    """``user=alice, client-id=<default>``, as kafka-configs.sh prints entities."""
    return ", ".join(f"{k}={DEFAULT if v is None else v}" for k, v in entity.items())


def alteration(values: dict[str, str]) -> dict[str, Any]:
    """One entity's op from the form: its user and/or client id (a name typed, or a checked box: empty or
    ``<default>`` is the default), a key, and a value or removal."""
    entity: dict[str, str | None] = {}
    for kind in ("user", "client-id"):
        if values.get(f"{kind}-set") or values.get(kind, "").strip():
            name = values.get(kind, "").strip()
            entity[kind] = None if name in ("", DEFAULT) else name
    if not entity:
        raise ValueError("entity: choose a user, a client id or both (empty name: the default)")
    key = values.get("key", "")
    if values.get("remove"):
        return {"entity": entity, "ops": [{"key": key, "remove": True}]}
    raw = values.get("value", "").strip()
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"value: {raw[:40]!r} is not a number") from None
    return {"entity": entity, "ops": [{"key": key, "value": value}]}


async def quotas_data(request: Request, user: str | None, client_id: str | None) -> dict[str, Any]:
    entries = await rest(request).quotas()
    rows = [{"entity": e["entity"], "label": entity_label(e["entity"]), "values": e["values"]} for e in entries]
    effective = None
    if user is not None or client_id is not None:
        effective = await rest(request).effective_quotas(user or "ANONYMOUS", client_id or "")
    return {"entries": rows, "effective": effective, "keys": QUOTA_KEYS}


@router.get("/quotas", response_class=HTMLResponse)
async def quotas_page(request: Request, user: str | None = None, client_id: str | None = None) -> HTMLResponse:
    return render(request, "quotas.html", {"title": "Quotas", "d": await quotas_data(request, user, client_id),
                                           "error": None, "values": {}, "done": request.query_params.get("done")})


@router.get("/api/quotas")
async def quotas_json(request: Request, user: str | None = None, client_id: str | None = None) -> dict[str, Any]:
    return await quotas_data(request, user, client_id)


@router.post("/quotas", response_class=HTMLResponse)
async def alter_quota(request: Request) -> Response:
    values = await form(request)
    try:
        await rest(request).alter_quotas([alteration(values)])
    except (UpstreamError, ValueError) as exc:
        err = form_error(exc)
        return render(request, "quotas.html", {"title": "Quotas", "d": await quotas_data(request, None, None),
                                               "error": err, "values": values, "done": None},
                      err.status if err.status < 500 else 400)
    return RedirectResponse("/quotas?done=1", status_code=303)
