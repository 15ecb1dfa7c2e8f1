"""Consumer groups: list; a group's state, members, assignment and lag per partition with its recent history
(sampled while someone watches the group); reset offsets to earliest, latest, a timestamp or an
offset with a dry-run preview; delete an empty group. Pages and JSON."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from services.console.browse import parse_timestamp
from services.console.metrics import polyline
from services.console.upstream import UpstreamError, seg
from services.console.web import form, form_error, parse_int, render, rest

router = APIRouter()
RESET_TO = ("earliest", "latest", "timestamp", "offset", "shift-by")
HISTORY = 60  # samples of a group's total lag kept


class LagWatch:
    """Lag samples (total and per partition) of the groups someone looked at in the last ``watch_s``:
    recorded at each look and, between looks, by ``follow`` every few seconds."""

    def __init__(self, keep: int = HISTORY, watch_s: float = 900.0) -> None:
        self.keep = keep
        self.watch_s = watch_s
        self.samples: dict[str, deque[tuple[float, int | None, dict[str, int]]]] = {}
        self.viewed: dict[str, float] = {}
        self.viewers: dict[str, Any] = {}  # group -> the REST API as the user who looked last (secure clusters)

    def record(self, group_id: str, at: float, described: dict[str, Any]) -> None:
        lags = {f"{p['topic']}-{p['partition']}": p["lag"] for p in described["partitions"] if p["lag"] is not None}
        total = sum(lags.values()) if lags else None
        self.samples.setdefault(group_id, deque(maxlen=self.keep)).append((at, total, lags))

    def look(self, group_id: str, at: float, api: Any = None) -> None:
        self.viewed[group_id] = at
        if api is not None:
            self.viewers[group_id] = api

    def watched(self, now: float) -> list[str]:
        for g in [g for g, at in self.viewed.items() if at < now - self.watch_s]:
            del self.viewed[g]
            self.samples.pop(g, None)
            self.viewers.pop(g, None)
        return sorted(self.viewed)

    def totals(self, group_id: str) -> list[tuple[float, int]]:
        return [(t, v) for t, v, _ in self.samples.get(group_id, ()) if v is not None]

    def of_partition(self, group_id: str, key: str) -> list[tuple[float, int]]:
        return [(t, lags[key]) for t, _, lags in self.samples.get(group_id, ()) if key in lags]


async def follow(app: Any, interval_s: float) -> None:
    """Sample the watched groups' lag every ``interval_s`` (runs for the app's life)."""
    watch: LagWatch = app.state.lag_watch
    while True:
        await asyncio.sleep(interval_s)
        for group_id in watch.watched(time.time()):
            with contextlib.suppress(Exception):  # a group gone or the API away: the next round tries again
                # as whoever looked last (a secure cluster: the console has no rights of its own)
                api = watch.viewers.get(group_id, app.state.rest)
                watch.record(group_id, time.time(), await api.group(group_id))


def sparkline(samples: list[tuple[float, int]], width: int = 240, height: int = 40) -> str:
    """SVG polyline points for the samples' values; empty with fewer than two."""
    return polyline([float(v) for _, v in samples], width, height)


async def group_data(request: Request, group_id: str) -> dict[str, Any]:
    g = await rest(request).group(group_id)
    watch: LagWatch = request.app.state.lag_watch
    now = time.time()
    watch.look(group_id, now, rest(request) if getattr(request.state, "session", None) is not None else None)
    watch.record(group_id, now, g)
    lags = [p["lag"] for p in g["partitions"] if p["lag"] is not None]
    history = watch.totals(group_id)
    for p in g["partitions"]:
        p["sparkline"] = sparkline(watch.of_partition(group_id, f"{p['topic']}-{p['partition']}"), 80, 20)
    return {"group": g, "total_lag": sum(lags) if lags else None, "history": [{"at": t, "lag": v} for t, v in history],
            "sparkline": sparkline(history), "topics": sorted({p["topic"] for p in g["partitions"]})}


@router.get("/groups", response_class=HTMLResponse)
async def groups_page(request: Request) -> HTMLResponse:
    return render(request, "groups.html", {"title": "Consumer groups", "groups": await rest(request).groups(),
                                           "deleted": request.query_params.get("deleted")})


@router.get("/api/groups")
async def groups_json(request: Request) -> dict[str, Any]:
    return {"groups": await rest(request).groups()}


@router.get("/groups/{group_id}", response_class=HTMLResponse)
async def group_page(request: Request, group_id: str) -> HTMLResponse:
    return render(request, "group.html", {"title": f"Group {group_id}", "d": await group_data(request, group_id),
                                          "plan": None, "error": None, "values": {}, "reset_to": RESET_TO})


@router.get("/api/groups/{group_id}")
async def group_json(request: Request, group_id: str) -> dict[str, Any]:
    return await group_data(request, group_id)


def reset_body(values: dict[str, str]) -> dict[str, Any]:
    to = values.get("to", "")
    if to not in RESET_TO:
        raise ValueError(f"to: one of {', '.join(RESET_TO)}")
    body: dict[str, Any] = {"topic": values.get("topic", "").strip(), "to": to,
                            "execute": values.get("execute") == "1"}
    raw = values.get("value", "").strip()
    if to == "timestamp":
        body["value"] = parse_timestamp(raw)
    elif to in ("offset", "shift-by"):
        body["value"] = parse_int(raw, "value")
    parts = [s.strip() for s in values.get("partitions", "").split(",") if s.strip()]
    if parts:
        body["partitions"] = [parse_int(s, "partitions", 0) for s in parts]
    return body


@router.post("/groups/{group_id}/reset", response_class=HTMLResponse)
async def reset_offsets(request: Request, group_id: str) -> HTMLResponse:
    values = await form(request)
    plan, error, status = None, None, 200
    try:
        plan = await rest(request).reset_offsets(group_id, reset_body(values))
    except (UpstreamError, ValueError) as exc:
        error = form_error(exc)
        status = error.status if error.status < 500 else 400
    return render(request, "group.html", {"title": f"Group {group_id}", "d": await group_data(request, group_id),
                                          "plan": plan, "error": error, "values": values, "reset_to": RESET_TO},
                  status)


@router.post("/api/groups/{group_id}/reset")
async def reset_json(request: Request, group_id: str) -> dict[str, Any]:
    """The body of ``POST /v1/groups/{id}/offsets/reset``, passed on (``execute`` false: a dry run)."""
    return await rest(request).reset_offsets(group_id, await request.json())


@router.post("/groups/{group_id}/delete", response_class=HTMLResponse)
async def delete_group(request: Request, group_id: str) -> Response:
    values = await form(request)
    try:
        if values.get("confirm", "") != group_id:
            raise UpstreamError("INVALID_REQUEST", "type the group's id exactly to confirm its deletion", 400)
        await rest(request).delete_group(group_id)
    except UpstreamError as exc:
        if exc.status == 404:
            raise
        return render(request, "group.html", {"title": f"Group {group_id}", "d": await group_data(request, group_id),
                                              "plan": None, "error": exc, "values": {}, "reset_to": RESET_TO},
                      exc.status if exc.status < 500 else 400)
    return RedirectResponse(f"/groups?deleted={seg(group_id)}", status_code=303)
