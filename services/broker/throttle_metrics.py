"""Prometheus metrics of the replication throttles (Kafka's LeaderReplication / FollowerReplication
``byte-rate`` sensors and their quota): the configured limit, the bytes of throttled replicas moved
(``rate()`` of it is Kafka's byte-rate) and how often the quota held reads back. Read at scrape time
from ``ReplicationThrottles`` (plain numbers, no locking needed)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from services.broker.replication_throttle import ReplicationThrottles


class ThrottleCollector(Collector):
    def __init__(self, throttles: ReplicationThrottles) -> None:
        self.throttles = throttles

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        t = self.throttles
        limit = GaugeMetricFamily(
            "tidelog_replication_throttled_rate_limit_bytes",
            "leader.replication.throttled.rate / follower.replication.throttled.rate in force (bytes/s; "
            "absent: no limit)", labels=["direction"])
        moved = CounterMetricFamily(
            "tidelog_replication_throttled_bytes",
            "Bytes of throttled replicas moved (rate() is Kafka's LeaderReplication/FollowerReplication byte-rate)",
            labels=["direction"])
        held = CounterMetricFamily(
            "tidelog_replication_throttled_times",
            "Reads of throttled replicas held back because the replication quota was used up", labels=["direction"])
        for direction, quota in (("leader", t.leader), ("follower", t.follower)):
            if quota.rate is not None:
                limit.add_metric([direction], quota.rate)
            moved.add_metric([direction], quota.bytes_recorded)
            held.add_metric([direction], quota.times_exceeded)
        yield limit
        yield moved
        yield held
