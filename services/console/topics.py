"""Topics: list and search, create with configs, a topic's partitions (leader, replicas, ISR, start and end
offsets) and configs, alter configs, add partitions, delete with a typed confirmation. Pages and JSON."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from services.console.overview import describe_all, partition_counts
from services.console.upstream import UpstreamError, seg
from services.console.web import form, form_error, metrics, parse_int, reader, render, rest

router = APIRouter()


def parse_configs(text: str) -> dict[str, str]:
    """Configs typed one per line as ``name=value``; blank lines ignored."""
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        name, sep, value = line.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"config line {line[:60]!r}: write name=value")
        out[name.strip()] = value.strip()
    return out


async def topics_data(request: Request, query: str = "") -> dict[str, Any]:
    cluster, described = await describe_all(request)
    counts = partition_counts(described, {b["id"] for b in cluster["brokers"]})
    sizes, rates = metrics(request).topic_sizes(), metrics(request).history.topic_rates()
    rows = [{**t, "size_bytes": sizes.get(t["name"]), "bytes_in_per_s": rates.get(t["name"])}
            for t in counts["topics"] if query.lower() in t["name"].lower()]
    return {"topics": sorted(rows, key=lambda t: t["name"]), "query": query, "total": len(counts["topics"])}


@router.get("/topics", response_class=HTMLResponse)
async def topics_page(request: Request, q: str = "", fragment: bool = False) -> HTMLResponse:
    data = await topics_data(request, q[:249])
    if fragment:  # htmx: only the table, as the search box is typed into
        return render(request, "topic_rows.html", {"d": data})
    return render(request, "topics.html", {"title": "Topics", "d": data, "error": None, "values": {}})


@router.get("/api/topics")
async def topics_json(request: Request, q: str = "") -> dict[str, Any]:
    return await topics_data(request, q[:249])


@router.post("/topics", response_class=HTMLResponse)
async def create_topic(request: Request) -> Response:
    values = await form(request)
    name = values.get("name", "").strip()
    try:
        partitions = parse_int(values.get("partitions"), "partitions", 1) or 1
        rf = parse_int(values.get("replication_factor"), "replication factor", 1) or 1
        await rest(request).create_topic(name, partitions, rf, parse_configs(values.get("configs", "")))
    except (UpstreamError, ValueError) as exc:
        data = await topics_data(request)
        err = form_error(exc)
        return render(request, "topics.html", {"title": "Topics", "d": data, "error": err, "values": values},
                      err.status if err.status < 500 else 400)
    return RedirectResponse(f"/topics/{seg(name)}", status_code=303)


async def topic_data(request: Request, name: str) -> dict[str, Any]:
    desc = await rest(request).topic(name)
    parts = [p["partition"] for p in desc["partitions"]]
    try:
        bounds = await asyncio.to_thread(reader(request).bounds, name, parts)
        offsets_error = None
    except Exception as exc:  # the partitions still show; the offsets say why they are missing
        bounds, offsets_error = {}, form_error(exc)
    for p in desc["partitions"]:
        lo, hi = bounds.get(p["partition"], (None, None))
        p["start_offset"], p["end_offset"] = lo, hi
    return {"topic": desc, "offsets_error": offsets_error,
            "records": sum(p["end_offset"] - p["start_offset"] for p in desc["partitions"] if p["end_offset"] is not None)}


@router.get("/topics/{name}", response_class=HTMLResponse)
async def topic_page(request: Request, name: str) -> HTMLResponse:
    return render(request, "topic.html", {"title": f"Topic {name}", "d": await topic_data(request, name),
                                          "error": None, "done": request.query_params.get("done")})


@router.get("/api/topics/{name}")
async def topic_json(request: Request, name: str) -> dict[str, Any]:
    data = await topic_data(request, name)
    err = data.pop("offsets_error")
    return {**data, "offsets_error": None if err is None else {"error": err.error, "message": err.message}}


async def _topic_action(request: Request, name: str, action: Any, done: str) -> Response:
    values = await form(request)
    try:
        await action(values)
    except (UpstreamError, ValueError) as exc:
        err = form_error(exc)
        if err.error == "UNKNOWN_TOPIC_OR_PARTITION" and err.status == 404:
            raise err from None
        return render(request, "topic.html", {"title": f"Topic {name}", "d": await topic_data(request, name),
                                              "error": err, "done": None}, err.status if err.status < 500 else 400)
    return RedirectResponse(f"/topics/{seg(name)}?done={done}", status_code=303)


@router.post("/topics/{name}/configs", response_class=HTMLResponse)
async def alter_configs(request: Request, name: str) -> Response:
    async def act(values: dict[str, str]) -> None:
        changes: dict[str, Any] = dict(parse_configs(values.get("set", "")))
        for key in filter(None, (k.strip() for k in values.get("remove", "").replace("\n", ",").split(","))):
            changes[key] = None
        if not changes:
            raise ValueError("no config to set or remove")
        await rest(request).alter_configs(name, changes)

    return await _topic_action(request, name, act, "configs")


@router.post("/topics/{name}/partitions", response_class=HTMLResponse)
async def add_partitions(request: Request, name: str) -> Response:
    async def act(values: dict[str, str]) -> None:
        total = parse_int(values.get("partitions"), "partitions", 1)
        if total is None:
            raise ValueError("partitions: give the new total")
        await rest(request).add_partitions(name, total)

    return await _topic_action(request, name, act, "partitions")


@router.post("/topics/{name}/delete", response_class=HTMLResponse)
async def delete_topic(request: Request, name: str) -> Response:
    values = await form(request)
    if values.get("confirm", "") != name:
        err = UpstreamError("INVALID_REQUEST", "type the topic's name exactly to confirm its deletion", 400)
        return render(request, "topic.html", {"title": f"Topic {name}", "d": await topic_data(request, name),
                                              "error": err, "done": None}, 400)
    await rest(request).delete_topic(name)
    return RedirectResponse(f"/topics?deleted={seg(name)}", status_code=303)
