"""Transactions: every coordinator's transactional ids with a state filter; one id's state, producer id and
epoch, timeout, start and partitions; find the hanging transactions of a topic and abort one after typing
its producer id (``kafka-transactions.sh list|describe|find-hanging|abort`` through ``/v1/transactions``).
Pages and JSON."""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from services.console.upstream import UpstreamError
from services.console.web import form, form_error, parse_int, render, rest

router = APIRouter()
#: Kafka's transaction states, the list's filter
STATES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "Dead",
          "PrepareEpochFence")


def split_partition(name: str) -> tuple[str, int | None]:
    """``"orders-3"`` -> ``("orders", 3)``; a name without a partition number as it is, with None."""
    topic, _, number = name.rpartition("-")
    return (topic, int(number)) if topic and number.isdigit() else (name, None)


def list_states(params: Any) -> list[str]:
    """The state filter of a query string (repeatable ``state``; empty values ignored)."""
    return [s for s in params.getlist("state") if s]


def hanging_query(params: Any) -> tuple[str, int | None] | None:
    """The find-hanging search of a query string: its ``topic`` and optional ``max_transaction_timeout_ms``
    (None without a topic); ValueError on a bad timeout."""
    topic = (params.get("topic") or "").strip()
    if not topic:
        return None
    return topic, parse_int(params.get("max_transaction_timeout_ms"), "max_transaction_timeout_ms", 0)


def abort_body(values: dict[str, str]) -> dict[str, Any]:
    """The body of ``POST /v1/transactions/abort`` from a hanging row's form, once its producer id was typed
    again in ``confirm``; ValueError otherwise."""
    topic = values.get("topic", "").strip()
    if not topic:
        raise ValueError("topic: required")
    body: dict[str, Any] = {"topic": topic}
    for field in ("partition", "producer_id", "producer_epoch"):
        value = parse_int(values.get(field), field, 0)
        if value is None:
            raise ValueError(f"{field}: required")
        body[field] = value
    coordinator_epoch = parse_int(values.get("coordinator_epoch"), "coordinator_epoch", -1)
    body["coordinator_epoch"] = -1 if coordinator_epoch is None else coordinator_epoch
    if values.get("confirm", "").strip() != str(body["producer_id"]):
        raise ValueError(f"type the producer id {body['producer_id']} exactly to confirm aborting its transaction")
    return body


async def list_data(request: Request, states: list[str], search: tuple[str, int | None] | None) -> dict[str, Any]:
    """The list (filtered by state) and, with a search, the topic's hanging transactions; an error of either
    goes in ``error`` (Kafka's name) with the rest still shown."""
    out: dict[str, Any] = {"states": states, "transactions": [], "hanging": None, "search": search, "error": None}
    try:
        out["transactions"] = await rest(request).transactions(states)
    except UpstreamError as exc:
        out["error"] = exc
    if search is not None and out["error"] is None:
        try:
            out["hanging"] = await rest(request).hanging_transactions(*search)
        except UpstreamError as exc:
            out["error"] = exc
    return out


def _page(request: Request, d: dict[str, Any], status: int = 200, done: str | None = None) -> HTMLResponse:
    error = d["error"]
    if error is not None and status == 200:
        status = error.status if 400 <= error.status < 500 else 400
    return render(request, "transactions.html", {"title": "Transactions", "d": d, "all_states": STATES,
                                                 "error": error, "done": done}, status)


@router.get("/transactions", response_class=HTMLResponse)
async def transactions_page(request: Request) -> HTMLResponse:
    states = list_states(request.query_params)
    try:
        search = hanging_query(request.query_params)
    except ValueError as exc:
        d = await list_data(request, states, None)
        d["error"] = form_error(exc)
        return _page(request, d)
    done = None
    if request.query_params.get("aborted"):
        done = f"Aborted the transaction of producer {request.query_params['aborted']}."
    return _page(request, await list_data(request, states, search), done=done)


@router.get("/api/transactions")
async def transactions_json(request: Request) -> dict[str, Any]:
    """``{"transactions": [...]}`` (``state`` filters, repeatable); with ``topic`` (and
    ``max_transaction_timeout_ms``) also ``"hanging"``: find-hanging's answer for that topic."""
    out: dict[str, Any] = {"transactions": await rest(request).transactions(list_states(request.query_params))}
    try:
        search = hanging_query(request.query_params)
    except ValueError as exc:
        raise form_error(exc) from None
    if search is not None:
        out["hanging"] = await rest(request).hanging_transactions(*search)
    return out


@router.post("/transactions/abort", response_class=HTMLResponse)
async def abort_page(request: Request) -> Response:
    values = await form(request)
    topic = values.get("topic", "").strip()
    try:
        body = abort_body(values)
        await rest(request).abort_transaction(body)
    except (UpstreamError, ValueError) as exc:
        try:
            search = hanging_query(values)
        except ValueError:
            search = (topic, None) if topic else None
        d = await list_data(request, [], search)
        d["error"] = form_error(exc)
        return _page(request, d)
    query = {"topic": topic, "aborted": f"{body['producer_id']} on {topic}-{body['partition']}"}
    if values.get("max_transaction_timeout_ms", "").strip():
        query["max_transaction_timeout_ms"] = values["max_transaction_timeout_ms"].strip()
    return RedirectResponse(f"/transactions?{urlencode(query)}", status_code=303)


@router.post("/api/transactions/abort")
async def abort_json(request: Request) -> dict[str, Any]:
    """The body of ``POST /v1/transactions/abort``, passed on."""
    return await rest(request).abort_transaction(await request.json())


async def transaction_data(request: Request, transactional_id: str) -> dict[str, Any]:
    t = await rest(request).transaction(transactional_id)
    start = t.get("transaction_start_time_ms")
    running = max(0, int(time.time() * 1000) - int(start)) if start is not None and t.get("state") == "Ongoing" else None
    partitions = [{"name": name, "topic": topic, "partition": p}
                  for name in t.get("topic_partitions", []) for topic, p in [split_partition(name)]]
    return {"transaction": t, "running_ms": running, "partitions": partitions}


@router.get("/transactions/{transactional_id}", response_class=HTMLResponse)
async def transaction_page(request: Request, transactional_id: str) -> HTMLResponse:
    return render(request, "transaction.html", {"title": f"Transaction {transactional_id}",
                                                "d": await transaction_data(request, transactional_id)})


@router.get("/api/transactions/{transactional_id}")
async def transaction_json(request: Request, transactional_id: str) -> dict[str, Any]:
    return await transaction_data(request, transactional_id)
