"""What the console learns from the brokers' Prometheus endpoints (``/metrics``, listed by ``GET /v1/cluster``):
bytes in and out per second over the last hour, each broker's disk use, each topic's size and rate.

``BrokerSample`` is parsed from one scrape (pure); ``RateHistory`` keeps an hour of cluster-wide samples
and turns counters into rates (pure, time passed in); ``MetricsSampler`` scrapes every broker every
``interval_s`` on the app's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

log = logging.getLogger(__name__)
BYTES_IN = "tidelog_broker_topic_bytes_in_total"
BYTES_OUT = "tidelog_broker_topic_bytes_out_total"
LOG_SIZE = "tidelog_log_size_bytes"


@dataclass
class BrokerSample:
    bytes_in: dict[str, float] = field(default_factory=dict)  # topic -> counter
    bytes_out: dict[str, float] = field(default_factory=dict)
    log_size: dict[tuple[str, int], float] = field(default_factory=dict)  # (topic, partition) -> bytes

    @classmethod
    def parse(cls, text: str) -> BrokerSample:
        out = cls()
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name == BYTES_IN:
                    out.bytes_in[s.labels.get("topic", "")] = s.value
                elif s.name == BYTES_OUT:
                    out.bytes_out[s.labels.get("topic", "")] = s.value
                elif s.name == LOG_SIZE:
                    with contextlib.suppress(KeyError, ValueError):
                        out.log_size[(s.labels["topic"], int(s.labels["partition"]))] = s.value
        return out

    @property
    def disk_bytes(self) -> float:
        return sum(self.log_size.values())


@dataclass
class Point:
    at: float  # seconds (wall clock)
    bytes_in: dict[str, float]  # topic -> counter summed over brokers
    bytes_out: float


class RateHistory:
    """Cluster-wide counter samples over ``window_s``; rates between consecutive samples (a counter that
    went down, a broker restart, counts as a fresh start)."""

    def __init__(self, window_s: float = 3600.0) -> None:
        self.window_s = window_s
        self.points: deque[Point] = deque()

    def add(self, at: float, brokers: list[BrokerSample]) -> None:
        topics: dict[str, float] = {}
        for b in brokers:
            for t, v in b.bytes_in.items():
                topics[t] = topics.get(t, 0.0) + v
        self.points.append(Point(at, topics, sum(sum(b.bytes_out.values()) for b in brokers)))
        while self.points and self.points[0].at < at - self.window_s:
            self.points.popleft()

    @staticmethod
    def _rate(before: float, after: float, seconds: float) -> float:
        return max(0.0, after - before) / seconds if seconds > 0 else 0.0

    def series(self) -> list[dict[str, float]]:
        """``[{at, in, out}]``: bytes per second between consecutive samples, oldest first."""
        pts = list(self.points)
        out = []
        for a, b in zip(pts, pts[1:], strict=False):
            dt = b.at - a.at
            out.append({"at": b.at, "in": self._rate(sum(a.bytes_in.values()), sum(b.bytes_in.values()), dt),
                        "out": self._rate(a.bytes_out, b.bytes_out, dt)})
        return out

    def topic_rates(self) -> dict[str, float]:
        """Bytes in per second per topic between the last two samples."""
        if len(self.points) < 2:
            return {}
        a, b = self.points[-2], self.points[-1]
        return {t: self._rate(a.bytes_in.get(t, 0.0), v, b.at - a.at) for t, v in b.bytes_in.items()}


def polyline(values: list[float], width: int = 240, height: int = 40) -> str:
    """SVG polyline points for ``values`` scaled into ``width`` x ``height``; empty with fewer than two."""
    if len(values) < 2:
        return ""
    top = max(values) or 1.0
    step = width / (len(values) - 1)
    return " ".join(f"{i * step:.1f},{height - (v / top) * (height - 2) - 1:.1f}" for i, v in enumerate(values))


class MetricsSampler:
    def __init__(self, brokers: Callable[[], Any], interval_s: float = 10.0) -> None:
        self.brokers = brokers  # async () -> [{"id", "metrics"}]
        self.interval_s = interval_s
        self.history = RateHistory()
        self.latest: dict[int, BrokerSample] = {}
        self.errors: dict[int, str] = {}
        self._task: asyncio.Task[None] | None = None
        self._http = httpx.AsyncClient(timeout=3.0)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._http.aclose()

    async def _scrape(self, broker: dict[str, Any]) -> tuple[int, BrokerSample | str]:
        try:
            resp = await self._http.get(f"http://{broker['metrics']}/metrics")
            resp.raise_for_status()
            return broker["id"], BrokerSample.parse(resp.text)
        except (httpx.HTTPError, ValueError) as exc:
            return broker["id"], f"{type(exc).__name__}: {exc}"

    async def sample_once(self) -> None:
        brokers = [b for b in await self.brokers() if b.get("metrics")]
        got = await asyncio.gather(*(self._scrape(b) for b in brokers))
        self.latest = {i: s for i, s in got if isinstance(s, BrokerSample)}
        self.errors = {i: s for i, s in got if isinstance(s, str)}
        self.history.add(time.time(), list(self.latest.values()))

    async def _run(self) -> None:
        while True:
            try:
                await self.sample_once()
            except Exception as exc:  # the REST API away for a moment: try again next time
                log.debug("metrics sample failed", extra={"error": repr(exc)})
            await asyncio.sleep(self.interval_s)

    def topic_sizes(self) -> dict[str, float]:
        """Each topic's bytes: per partition the largest replica's log, summed."""
        best: dict[tuple[str, int], float] = {}
        for s in self.latest.values():
            for tp, v in s.log_size.items():
                best[tp] = max(best.get(tp, 0.0), v)
        sizes: dict[str, float] = {}
        for (t, _), v in best.items():
            sizes[t] = sizes.get(t, 0.0) + v
        return sizes

    def traffic(self) -> dict[str, Any]:
        series = self.history.series()
        return {"series": series, "in_now": series[-1]["in"] if series else None,
                "out_now": series[-1]["out"] if series else None,
                "in_line": polyline([p["in"] for p in series]), "out_line": polyline([p["out"] for p in series]),
                "minutes": round((series[-1]["at"] - series[0]["at"]) / 60, 1) if len(series) > 1 else 0,
                "interval_s": self.interval_s}
