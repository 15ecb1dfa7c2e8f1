"""The message browser's paging, without I/O of its own: the query a messages page asks (its query string)
and ``browse``, which turns it into one page of records and the cursors of the pages after and before it,
reading through any object with ``LogReader``'s ``bounds``, ``offsets_for_time`` and ``read``."""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from services.console.display import (
    FORMATS,
    PAGE_SIZE,
    decode_cursor,
    first_offset,
    matches,
    parse_int,
    previous_page,
    split_budget,
)
from shared.types import TopicPartition

MODES = ("start", "end", "offset", "timestamp")


@dataclass
class Query:
    """What the messages page asks for (its query string)."""

    partition: int | None  # None: every partition
    mode: str = "end"
    offset: int | None = None
    timestamp: int | None = None  # ms
    filter: str = ""
    format: str = "auto"
    cursor: dict[int, int] | None = None

    @classmethod
    def parse(cls, params: Any) -> Query:
        part = params.get("partition", "all") or "all"
        mode = params.get("mode", "end") or "end"
        fmt = params.get("format", "auto") or "auto"
        if mode not in MODES:
            raise ValueError(f"mode: one of {', '.join(MODES)}")
        if fmt not in FORMATS:
            raise ValueError(f"format: one of {', '.join(FORMATS)}")
        q = cls(None if part == "all" else parse_int(part, "partition", 0), mode,
                parse_int(params.get("offset"), "offset", 0), parse_timestamp(params.get("timestamp", "")),
                str(params.get("filter", ""))[:1000], fmt,
                decode_cursor(params["cursor"]) if params.get("cursor") else None)
        if mode == "offset" and q.offset is None:
            raise ValueError("offset: give the offset to start from")
        if mode == "timestamp" and q.timestamp is None:
            raise ValueError("timestamp: give a date and time (UTC) or milliseconds since the epoch")
        return q

    def params(self, **change: Any) -> str:
        base = {"partition": "all" if self.partition is None else self.partition, "mode": self.mode,
                "offset": "" if self.offset is None else self.offset, "timestamp": self.timestamp or "",
                "filter": self.filter, "format": self.format}
        base.update(change)
        return urlencode({k: v for k, v in base.items() if v not in ("", None)})


def parse_timestamp(text: str) -> int | None:
    """Milliseconds since the epoch, or an ISO 8601 date and time (UTC unless it says otherwise)."""
    text = (text or "").strip()
    if not text:
        return None
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"timestamp: {text[:40]!r} is neither milliseconds nor an ISO date and time") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return int(when.timestamp() * 1000)


def browse(log: Any, topic: str, partitions: list[int], q: Query, size: int = PAGE_SIZE,
           budget_s: float = 3.0) -> dict[str, Any]:
    """One page: up to ``size`` records (all partitions merged by timestamp), and the cursors of the pages
    after and before it. Synchronous (gRPC client): run it on a thread."""
    bounds = log.bounds(topic, partitions)
    each = size if len(partitions) == 1 else split_budget(size, len(partitions))
    if q.cursor is not None:
        positions = {p: max(lo, min(hi, q.cursor.get(p, lo))) for p, (lo, hi) in bounds.items()}
    elif q.mode == "timestamp":
        assert q.timestamp is not None
        found = log.offsets_for_time(topic, partitions, q.timestamp)
        positions = {p: bounds[p][1] if off < 0 else max(bounds[p][0], off) for p, off in found.items()}
    else:
        positions = {p: first_offset(q.mode, lo, hi, q.offset, each) for p, (lo, hi) in bounds.items()}
    keep = (lambda r: matches(q.filter, r.key, r.value, r.headers)) if q.filter else None
    deadline = time.monotonic() + budget_s
    merged: list[tuple[int, Any]] = []
    nexts: dict[int, int] = {}
    scanned = 0
    stopped_early = False
    for p in partitions:
        lo, hi = bounds[p]
        got = log.read(TopicPartition(topic, p), positions[p], hi, each, keep, max(0.2, deadline - time.monotonic()))
        merged.extend((p, r) for r in got.records)
        nexts[p] = got.next_offset
        scanned += got.scanned
        stopped_early |= got.stopped_early
    merged.sort(key=lambda pr: (pr[1].timestamp, pr[0], pr[1].offset))
    tail_page = q.mode == "end" and q.cursor is None
    shown = merged[-size:] if tail_page else merged[:size]
    if not tail_page:  # a partition's records cut off this page start the next one
        for p, r in merged[size:]:
            nexts[p] = min(nexts[p], r.offset)
    firsts: dict[int, int] = {}
    for p, r in shown:
        firsts[p] = min(firsts.get(p, r.offset), r.offset)
    prev = {}
    for p, (lo, _hi) in bounds.items():
        first = firsts.get(p, positions[p])
        before = previous_page(first, lo, each)
        prev[p] = lo if before is None else before
    at_start = all(firsts.get(p, positions[p]) <= lo for p, (lo, _) in bounds.items())
    more = any(nexts[p] < hi for p, (_, hi) in bounds.items())
    return {"records": shown, "bounds": bounds, "positions": positions, "next": nexts if more else None,
            "prev": None if at_start else prev, "scanned": scanned, "stopped_early": stopped_early}
