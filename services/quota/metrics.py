"""The quota service's Prometheus metrics, per entity as Kafka reports them (user, client-id; the
``quota_type`` label is produce, fetch or request): the rate measured against the quota, the quota,
and the throttle time of the latest decision, read at scrape time from the usage table the
DescribeUsage call also serves. Figures are summed (rate) or maxed (quota, throttle) over brokers."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from shared.quota.entities import QuotaType


def by_entity(totals: dict[tuple[int, str, str, int], list[float]]) -> dict[tuple[str, str, str], list[float]]:
    """(type, user, client, broker) -> [total, throttle ms, quota, rate]  ⇒  (type, user, client) -> the same,
    totals and rates summed over brokers, quota and throttle the largest."""
    out: dict[tuple[str, str, str], list[float]] = {}
    for (qtype, user, client_id, _broker), (tot, throttle, quota, rate) in list(totals.items()):
        key = (QuotaType(qtype).name.lower(), user, client_id)
        acc = out.setdefault(key, [0.0, 0.0, 0.0, 0.0])
        acc[0] += tot
        acc[1] = max(acc[1], throttle)
        acc[2] = max(acc[2], quota)
        acc[3] += rate
    return out


class QuotaCollector(Collector):
    def __init__(self, totals: Callable[[], dict[tuple[int, str, str, int], list[float]]],
                 active: Callable[[], bool]) -> None:
        self.totals = totals
        self.active = active

    def collect(self) -> Iterator[Any]:
        labels = ["quota_type", "user", "client_id"]
        used = CounterMetricFamily("tidelog_quota_usage", "Usage reported by the brokers (bytes for produce/fetch, "
                                   "percent-seconds for request)", labels=labels)
        rate = GaugeMetricFamily("tidelog_quota_rate", "Measured rate the quota is compared with", labels=labels)
        limit = GaugeMetricFamily("tidelog_quota_limit", "The quota (0 when none applies)", labels=labels)
        throttle = GaugeMetricFamily("tidelog_quota_throttle_time_seconds", "Throttle time of the latest decision",
                                     labels=labels)
        for key, (tot, thr, quota, r) in by_entity(self.totals()).items():
            used.add_metric(list(key), tot)
            rate.add_metric(list(key), r)
            limit.add_metric(list(key), quota)
            throttle.add_metric(list(key), thr / 1000)
        yield from (used, rate, limit, throttle)
        yield GaugeMetricFamily("tidelog_quota_active", "1 on the active quota instance", value=int(self.active()))
