"""What `tidelog top` shows, computed from two scrapes of every process's /metrics (pure: no I/O).

Per broker: records/s and MB/s in and out, produce/fetch latency p50/p99 over the interval,
under-replicated partitions. Per group: lag (summed over partitions) and its trend.
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.metrics import Samples, quantile_from_buckets, total

LATENCY = "tidelog_network_request_total_time_seconds"


@dataclass
class BrokerRow:
    id: str
    records_in_s: float
    mb_in_s: float
    mb_out_s: float
    produce_p50_ms: float | None
    produce_p99_ms: float | None
    fetch_p50_ms: float | None
    fetch_p99_ms: float | None
    under_replicated: int
    up: bool = True


@dataclass
class GroupRow:
    group: str
    lag: int
    delta: int  # lag now minus lag at the previous frame (0 on the first)

    @property
    def trend(self) -> str:
        return "↑" if self.delta > 0 else "↓" if self.delta < 0 else "="


def _rate(prev: Samples | None, cur: Samples, name: str, seconds: float) -> float:
    if prev is None or seconds <= 0:
        return 0.0
    return max(total(cur, name) - total(prev, name), 0.0) / seconds


def _quantile_ms(prev: Samples | None, cur: Samples, request: str, q: float) -> float | None:
    """The q quantile of the requests finished between the two scrapes (all of them on the first)."""
    buckets: dict[float, float] = {}
    for (name, labels), value in cur.items():
        if name == f"{LATENCY}_bucket" and ("request", request) in labels:
            le = float(dict(labels)["le"])
            before = prev.get((name, labels), 0.0) if prev is not None else 0.0
            buckets[le] = buckets.get(le, 0.0) + value - before
    got = quantile_from_buckets(sorted(buckets.items()), q)
    return None if got is None else got * 1000


def broker_row(ident: str, prev: Samples | None, cur: Samples | None, seconds: float) -> BrokerRow:
    if cur is None:
        return BrokerRow(ident, 0.0, 0.0, 0.0, None, None, None, None, 0, up=False)
    return BrokerRow(
        id=ident,
        records_in_s=_rate(prev, cur, "tidelog_broker_topic_messages_in_total", seconds),
        mb_in_s=_rate(prev, cur, "tidelog_broker_topic_bytes_in_total", seconds) / 1e6,
        mb_out_s=_rate(prev, cur, "tidelog_broker_topic_bytes_out_total", seconds) / 1e6,
        produce_p50_ms=_quantile_ms(prev, cur, "Produce", 0.5),
        produce_p99_ms=_quantile_ms(prev, cur, "Produce", 0.99),
        fetch_p50_ms=_quantile_ms(prev, cur, "Fetch", 0.5),
        fetch_p99_ms=_quantile_ms(prev, cur, "Fetch", 0.99),
        under_replicated=int(total(cur, "tidelog_replica_manager_under_replicated_partitions")),
    )


def group_lags(coordinators: list[Samples]) -> dict[str, int]:
    lags: dict[str, int] = {}
    for samples in coordinators:
        for (name, labels), value in samples.items():
            if name == "tidelog_consumer_group_lag":
                group = dict(labels)["group"]
                lags[group] = lags.get(group, 0) + int(value)
    return lags


def group_rows(prev: dict[str, int] | None, cur: dict[str, int]) -> list[GroupRow]:
    return [GroupRow(g, lag, lag - prev.get(g, lag) if prev is not None else 0) for g, lag in sorted(cur.items())]
