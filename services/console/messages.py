"""Messages: browse a topic from the start, the end, an offset or a timestamp, one partition or all, in pages
of 100 forward and back, filtered over key, value and headers; one record in full; download as JSON lines;
live tail over server-sent events; produce a record. Pages and JSON."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse

from services.console.browse import MODES, Query, browse
from services.console.display import (
    FORMATS,
    FULL_CHARS,
    PAGE_SIZE,
    encode_cursor,
    matches,
    parse_headers,
    record_json,
    sample,
    show,
)
from services.console.logs import TailFollower
from services.console.upstream import UpstreamError, seg
from services.console.web import client_settings, form, form_error, parse_int, reader, render, rest, sender
from shared.types import TopicPartition

router = APIRouter()
MAX_DOWNLOAD = 10_000
TAIL_TICK_S = 0.25
TAIL_DRAW = 20  # records a tick sends the page at most (80 a second: more is a blur)


def display_record(topic: str, p: int, r: Any, fmt: str) -> dict[str, Any]:
    return {"partition": p, "offset": r.offset, "timestamp": r.timestamp, "key": show(r.key, fmt),
            "value": show(r.value, fmt), "headers": [(name, show(v, fmt)) for name, v in r.headers],
            "link": f"/topics/{seg(topic)}/record?" + urlencode({"partition": p, "offset": r.offset, "format": fmt})}


async def _topic_partitions(request: Request, name: str, only: int | None) -> tuple[dict[str, Any], list[int]]:
    desc = await rest(request).topic(name)
    parts = [p["partition"] for p in desc["partitions"]]
    if only is not None:
        if only not in parts:
            raise UpstreamError("UNKNOWN_TOPIC_OR_PARTITION", f"{name} has no partition {only}", 404)
        parts = [only]
    return desc, parts


async def page_data(request: Request, name: str, q: Query) -> dict[str, Any]:
    desc, parts = await _topic_partitions(request, name, q.partition)
    try:
        got = await asyncio.to_thread(browse, reader(request), name, parts, q)
    except Exception as exc:
        raise form_error(exc) from None
    rows = [display_record(name, p, r, q.format) for p, r in got["records"]]
    base = f"/topics/{seg(name)}/messages?"
    return {"topic": desc, "q": q, "rows": rows, "scanned": got["scanned"], "stopped_early": got["stopped_early"],
            "bounds": got["bounds"],
            "next_url": base + q.params(cursor=encode_cursor(got["next"])) if got["next"] else None,
            "prev_url": base + q.params(cursor=encode_cursor(got["prev"])) if got["prev"] else None,
            "download_url": f"/api/topics/{seg(name)}/messages.jsonl?"
                            + q.params(cursor=encode_cursor(got["positions"])),
            "tail_scope": ("every partition" if q.partition is None else f"partition {q.partition}")
                          + (f", only records matching “{q.filter}”" if q.filter else ""),
            "tail_url": f"/api/topics/{seg(name)}/tail?" + urlencode(
                {"partition": "all" if q.partition is None else q.partition, "filter": q.filter, "format": q.format}),
            "raw": got}


def _page_context(name: str, data: dict[str, Any] | None, q: Query | None, error: Any, values: dict[str, str],
                  done: str | None = None) -> dict[str, Any]:
    return {"title": f"Messages of {name}", "name": name, "d": data, "q": q, "error": error, "values": values,
            "formats": FORMATS, "modes": MODES, "done": done}


@router.get("/topics/{name}/messages", response_class=HTMLResponse)
async def messages_page(request: Request, name: str) -> HTMLResponse:
    try:
        q = Query.parse(request.query_params)
    except ValueError as exc:
        q0 = Query(None)
        data = await page_data(request, name, q0)
        return render(request, "messages.html", _page_context(name, data, q0, form_error(exc), {}), 400)
    data = await page_data(request, name, q)
    data.pop("raw")
    return render(request, "messages.html", _page_context(name, data, q, None, {}, request.query_params.get("done")))


@router.get("/api/topics/{name}/messages")
async def messages_json(request: Request, name: str) -> dict[str, Any]:
    try:
        q = Query.parse(request.query_params)
    except ValueError as exc:
        raise form_error(exc) from None
    data = await page_data(request, name, q)
    got = data.pop("raw")
    return {"records": [record_json(name, p, r.offset, r.timestamp, r.key, r.value, r.headers) for p, r in got["records"]],
            "next_cursor": encode_cursor(got["next"]) if got["next"] else None,
            "prev_cursor": encode_cursor(got["prev"]) if got["prev"] else None,
            "scanned": got["scanned"], "stopped_early": got["stopped_early"],
            "bounds": {str(p): {"start": lo, "end": hi} for p, (lo, hi) in got["bounds"].items()}}


@router.get("/api/topics/{name}/messages.jsonl")
async def messages_download(request: Request, name: str, limit: int = PAGE_SIZE) -> Response:
    try:
        q = Query.parse(request.query_params)
    except ValueError as exc:
        raise form_error(exc) from None
    _, parts = await _topic_partitions(request, name, q.partition)
    size = max(1, min(limit, MAX_DOWNLOAD))
    got = await asyncio.to_thread(browse, reader(request), name, parts, q, size, 20.0)
    lines = "".join(json.dumps(record_json(name, p, r.offset, r.timestamp, r.key, r.value, r.headers)) + "\n"
                    for p, r in got["records"])
    filename = f"{name}.jsonl"
    return Response(lines, media_type="application/x-ndjson",
                    headers={"Content-Disposition": f'attachment; filename="{filename}"'})


# -- one record --------------------------------------------------------------------------------------------

async def _one_record(request: Request, name: str, partition: int, offset: int) -> Any:
    await _topic_partitions(request, name, partition)
    log = reader(request)

    def read() -> Any:
        got = log.read(TopicPartition(name, partition), offset, offset + 1, 1)
        return got.records[0] if got.records else None

    try:
        rec = await asyncio.to_thread(read)
    except Exception as exc:
        raise form_error(exc) from None
    if rec is None:
        raise UpstreamError("OFFSET_OUT_OF_RANGE", f"{name}-{partition} has no record at offset {offset}", 404)
    return rec


@router.get("/topics/{name}/record", response_class=HTMLResponse)
async def record_page(request: Request, name: str, partition: int, offset: int, format: str = "auto") -> HTMLResponse:
    rec = await _one_record(request, name, partition, offset)
    fmt = format if format in FORMATS else "auto"
    row = {"partition": partition, "offset": rec.offset, "timestamp": rec.timestamp,
           "key": show(rec.key, fmt, FULL_CHARS), "value": show(rec.value, fmt, FULL_CHARS),
           "headers": [(n, show(v, fmt, FULL_CHARS)) for n, v in rec.headers]}
    raw = f"/api/topics/{seg(name)}/record?" + urlencode({"partition": partition, "offset": offset})
    return render(request, "record.html", {"title": f"{name}-{partition} @ {offset}", "name": name, "r": row,
                                           "raw_url": raw, "formats": FORMATS, "fmt": fmt})


@router.get("/api/topics/{name}/record")
async def record_raw(request: Request, name: str, partition: int, offset: int, field: str = "") -> Response:
    """The record as JSON; with ``field=key`` or ``field=value`` those bytes as a download."""
    rec = await _one_record(request, name, partition, offset)
    if field in ("key", "value"):
        data = getattr(rec, field) or b""
        return Response(data, media_type="application/octet-stream", headers={
            "Content-Disposition": f'attachment; filename="{name}-{partition}-{offset}.{field}"'})
    return Response(json.dumps(record_json(name, partition, rec.offset, rec.timestamp, rec.key, rec.value,
                                           rec.headers)), media_type="application/json")


# -- live tail ---------------------------------------------------------------------------------------------

def tail_event(topic: str, records: list[Any], seen: int, fmt: str) -> str:
    tick = sample(records, TAIL_DRAW)
    rows = []
    for r in tick.shown:
        k, v = show(r.key, fmt), show(r.value, fmt)
        rows.append({"partition": r.partition, "offset": r.offset, "timestamp": r.timestamp,
                     "key": k.text, "key_format": k.format, "value": v.text, "value_format": v.format,
                     "truncated": v.truncated or k.truncated, "headers": len(r.headers),
                     "link": f"/topics/{seg(topic)}/record?" + urlencode(
                         {"partition": r.partition, "offset": r.offset, "format": fmt})})
    return "data: " + json.dumps({"seen": seen, "shown": len(rows), "skipped": max(0, seen - len(rows)),
                                  "records": rows}) + "\n\n"


@router.get("/api/topics/{name}/tail")
async def tail(request: Request, name: str, partition: str = "all", filter: str = "", format: str = "auto") -> Response:
    """Server-sent events: every quarter second the newest records (at most 20) and how many arrived."""
    only = None if partition == "all" else parse_int(partition, "partition", 0)
    _, parts = await _topic_partitions(request, name, only)
    fmt = format if format in FORMATS else "auto"
    needle = filter[:1000]
    keep = (lambda r: matches(needle, r.key, r.value, r.headers)) if needle else None
    bootstrap = request.app.state.config.bootstrap
    try:
        follower = await asyncio.to_thread(TailFollower, bootstrap, name, parts, TAIL_DRAW, keep,
                                           client_settings(request))
    except Exception as exc:
        raise form_error(exc) from None

    async def events() -> AsyncIterator[str]:
        try:
            yield "retry: 3000\nevent: ready\ndata: {}\n\n"  # the follower's start is pinned: say so
            idle = 0.0
            while not await request.is_disconnected():
                await asyncio.sleep(TAIL_TICK_S)
                records, seen = follower.take()
                if follower.error:
                    yield "event: tail-error\ndata: " + json.dumps({"error": follower.error}) + "\n\n"
                    return
                if seen:
                    idle = 0.0
                    yield tail_event(name, records, seen, fmt)
                else:
                    idle += TAIL_TICK_S
                    if idle >= 10:
                        idle = 0.0
                        yield ": idle\n\n"
        finally:
            # Not awaited: when the browser goes away this generator is cancelled, and an await here would be too.
            threading.Thread(target=follower.close, name="console-tail-close", daemon=True).start()

    return StreamingResponse(events(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


# -- produce -----------------------------------------------------------------------------------------------

def record_to_send(values: dict[str, Any]) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes]], int | None]:
    """Key, value, headers and partition from a form or a JSON body; an empty key is no key, a value is
    null only when asked (``null_value``: a tombstone)."""
    key = values.get("key") or None
    value = None if str(values.get("null_value", "")).lower() in ("1", "on", "true") else str(values.get("value", ""))
    headers = values.get("headers") or ""
    parsed = [(str(k), str(v).encode()) for k, v in headers.items()] if isinstance(headers, dict) else parse_headers(headers)
    part = values.get("partition")
    partition = part if isinstance(part, int) else parse_int(str(part or ""), "partition", 0)
    return (None if key is None else str(key).encode(), None if value is None else value.encode(), parsed, partition)


@router.post("/topics/{name}/produce", response_class=HTMLResponse)
async def produce_form(request: Request, name: str) -> Response:
    values = await form(request)
    try:
        key, value, headers, partition = record_to_send(values)
        await _topic_partitions(request, name, partition)  # an unknown topic or partition fails now, by name
        p, offset = await asyncio.to_thread(sender(request).send, name, key, value, headers, partition)
    except Exception as exc:
        err = form_error(exc)
        q = Query(None)
        data = await page_data(request, name, q)
        data.pop("raw")
        return render(request, "messages.html", _page_context(name, data, q, err, values), 400)
    # Back to the default view (every partition, the newest page), where the record shows: a view pinned to the
    # record's partition and offset would also scope the filter and the live tail the user turns to next.
    url = f"/topics/{seg(name)}/messages?" + urlencode({"done": f"produced to partition {p} at offset {offset}"})
    return RedirectResponse(url, status_code=303)


@router.post("/api/topics/{name}/records")
async def produce_json(request: Request, name: str) -> dict[str, Any]:
    """``{"key": "...", "value": "...", "headers": {"name": "value"}, "partition": 0}`` (all optional)."""
    try:
        body = await request.json()
        if not isinstance(body, dict):
            raise ValueError("the body must be a JSON object")
        key, value, headers, partition = record_to_send(body)
        await _topic_partitions(request, name, partition)
        p, offset = await asyncio.to_thread(sender(request).send, name, key, value, headers, partition)
    except Exception as exc:
        raise form_error(exc) from None
    return {"topic": name, "partition": p, "offset": offset}
