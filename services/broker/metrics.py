"""The broker's Prometheus metrics (Kafka's BrokerTopicMetrics, RequestMetrics, ReplicaManager, Log).

Hot-path rule: one call per request (never per record), label children cached per topic/request
name. Per-partition gauges (log size, start/end offset, high watermark, under-replicated, at-min-ISR)
are computed at scrape time by ``PartitionCollector``, never per request.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from shared.metrics import LATENCY_BUCKETS

#: Kafka's request names for the three data-path requests (RequestMetrics "request" tag).
REQUESTS = ("Produce", "Fetch", "FetchFollower")
#: The stages the pipeline measures cheaply: throttle (the KIP-219 hold before the request runs), local
#: (append / log read), remote (waiting for the ISR under acks=all, or a fetch's long poll). gRPC
#: exposes neither its request queue nor the response send, so those two Kafka stages are absent.
STAGES = ("throttle", "local", "remote")


class BrokerMetrics:
    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        r = registry
        self.bytes_in = Counter("tidelog_broker_topic_bytes_in", "Bytes appended by producers (BytesInPerSec)",
                                ["topic"], registry=r)
        self.bytes_out = Counter("tidelog_broker_topic_bytes_out", "Bytes sent to consumers and followers "
                                 "(BytesOutPerSec)", ["topic"], registry=r)
        self.records_in = Counter("tidelog_broker_topic_messages_in", "Records appended (MessagesInPerSec)",
                                  ["topic"], registry=r)
        self.failed_produce = Counter("tidelog_broker_topic_failed_produce_requests", "Partition appends that failed",
                                      ["topic"], registry=r)
        # tidelog_network_requests_total, ..._request_total_time_seconds, ..._request_stage_time_seconds
        self.request_times = RequestTimes()
        r.register(self.request_times)
        self.isr_shrinks = Counter("tidelog_replica_manager_isr_shrinks", "ISR shrinks proposed and accepted",
                                   registry=r)
        self.isr_expands = Counter("tidelog_replica_manager_isr_expands", "ISR expansions proposed and accepted",
                                   registry=r)
        self.recovery_seconds = Gauge("tidelog_log_recovery_time_seconds", "Time the logs took to open at start",
                                      registry=r)
        self._topic: dict[str, tuple[Any, Any, Any]] = {}
        self._req = self.request_times.by_request

    def _topic_children(self, topic: str) -> tuple[Any, Any, Any]:
        children = self._topic.get(topic)
        if children is None:
            children = self._topic[topic] = (self.bytes_in.labels(topic), self.records_in.labels(topic),
                                             self.bytes_out.labels(topic))
        return children

    def known_topics(self, topics: Iterable[str]) -> None:
        """Start each hosted topic's series at 0 when the broker learns it, so the first records produced
        show as an increase (a series that appears with its first value has no rate)."""
        for topic in topics:
            self._topic_children(topic)

    def produced(self, data: Iterable[tuple[Any, bytes]], results: dict[Any, Any]) -> None:
        """Count one produce request's appended bytes and records per topic (per partition entry)."""
        for tp, records in data:
            r = results.get(tp)
            if r is None or r.error or r.last_offset < 0:
                if r is not None and r.error:
                    self.failed_produce.labels(tp.topic).inc()
                continue
            b_in, rec_in, _ = self._topic_children(tp.topic)
            b_in.inc(len(records))
            rec_in.inc(r.last_offset - r.base_offset + 1)

    def fetched(self, results: dict[Any, Any]) -> None:
        for tp, r in results.items():
            n = len(r.records)
            if n:
                self._topic_children(tp.topic)[2].inc(n)

    def request_done(self, request: str, throttle_s: float, local_s: float, remote_s: float) -> None:
        """One data-path request finished: its count, total time and the stages measured."""
        total, throttle, local, remote = self._req[request]
        total.observe(throttle_s + local_s + remote_s)  # its count is the request count
        throttle.observe(throttle_s)
        local.observe(local_s)
        remote.observe(remote_s)


class _Times:
    """One histogram series kept as plain numbers: an observation is a bisect and two additions (no lock,
    no prometheus_client call: ~0.3 µs instead of ~1–4 µs). Only the event loop observes; a scrape (in the
    HTTP server's thread) reads numbers that are at most one observation behind, as Prometheus allows."""

    __slots__ = ("counts", "sum")

    def __init__(self) -> None:
        self.counts = [0] * (len(LATENCY_BUCKETS) + 1)  # per bucket (not cumulative), +Inf last
        self.sum = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(LATENCY_BUCKETS, seconds)] += 1
        self.sum += seconds

    def buckets(self) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        acc = 0
        for bound, n in zip((*LATENCY_BUCKETS, float("inf")), list(self.counts)):
            acc += n
            out.append((floatToGoString(bound), acc))
        return out


class RequestTimes(Collector):
    """Kafka's RequestMetrics for the data-path requests, per request name: the request count
    (``tidelog_network_requests_total``), the total time and the time per stage (histograms). Kept by
    ``_Times`` and exposed at scrape time: ``request_done`` runs for every produce and fetch."""

    def __init__(self) -> None:
        self.by_request = {name: (_Times(), _Times(), _Times(), _Times()) for name in REQUESTS}

    def collect(self) -> Iterator[CounterMetricFamily | HistogramMetricFamily]:
        count = CounterMetricFamily("tidelog_network_requests", "Requests handled (RequestsPerSec)",
                                    labels=["request"])
        total = HistogramMetricFamily("tidelog_network_request_total_time_seconds", "Request total time",
                                      labels=["request"])
        stage = HistogramMetricFamily("tidelog_network_request_stage_time_seconds",
                                      "Request time per stage (Kafka's RequestQueue/Local/Remote/Throttle/"
                                      "ResponseSend TimeMs; see STAGES)", labels=["request", "stage"])
        for name, (t, *stages) in self.by_request.items():
            buckets = t.buckets()
            count.add_metric([name], buckets[-1][1])
            total.add_metric([name], buckets, t.sum)
            for stage_name, st in zip(STAGES, stages):
                stage.add_metric([name, stage_name], st.buckets(), st.sum)
        yield from (count, total, stage)

    def describe(self) -> Iterator[CounterMetricFamily | HistogramMetricFamily]:
        yield CounterMetricFamily("tidelog_network_requests", "", labels=["request"])
        yield HistogramMetricFamily("tidelog_network_request_total_time_seconds", "", labels=["request"])
        yield HistogramMetricFamily("tidelog_network_request_stage_time_seconds", "", labels=["request", "stage"])


class PartitionCollector(Collector):
    """Per-partition and per-broker partition-state gauges, read from the replica manager at scrape time
    (the scrape runs in the HTTP server's thread: it only reads plain attributes)."""

    def __init__(self, partitions: Callable[[], dict[Any, Any]]) -> None:
        self.partitions = partitions

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        parts = list(self.partitions().items())
        labels = ["topic", "partition"]
        size = GaugeMetricFamily("tidelog_log_size_bytes", "Log size (Kafka's Log Size)", labels=labels)
        start = GaugeMetricFamily("tidelog_log_start_offset", "Log start offset", labels=labels)
        end = GaugeMetricFamily("tidelog_log_end_offset", "Log end offset", labels=labels)
        hw = GaugeMetricFamily("tidelog_partition_high_watermark", "High watermark", labels=labels)
        urp = GaugeMetricFamily("tidelog_partition_under_replicated", "1 if this leader's ISR < replicas",
                                labels=labels)
        segments = GaugeMetricFamily("tidelog_log_segments", "Segments of the log", labels=labels)
        rolls = CounterMetricFamily("tidelog_log_segment_rolls", "Segments rolled since the log was opened",
                                    labels=labels)
        under = at_min = leaders = 0
        for tp, p in parts:
            key = [tp.topic, str(tp.partition)]
            log = p.log
            size.add_metric(key, log.size)
            start.add_metric(key, log.log_start_offset)
            end.add_metric(key, log.log_end_offset)
            hw.add_metric(key, p.high_watermark)
            segments.add_metric(key, len(log.segments))
            rolls.add_metric(key, log.rolls)
            if p.is_leader:
                leaders += 1
                is_under = len(p.isr) < len(p.replicas)
                under += is_under
                at_min += len(p.isr) == p.min_insync_replicas and len(p.replicas) > 1
                urp.add_metric(key, int(is_under))
        yield from (size, start, end, hw, urp, segments, rolls)
        yield GaugeMetricFamily("tidelog_replica_manager_under_replicated_partitions",
                                "Partitions led here whose ISR is smaller than their replica set", value=under)
        yield GaugeMetricFamily("tidelog_replica_manager_at_min_isr_partitions",
                                "Partitions led here whose ISR size equals min.insync.replicas", value=at_min)
        yield GaugeMetricFamily("tidelog_replica_manager_leader_count", "Partitions led here", value=leaders)
        yield GaugeMetricFamily("tidelog_replica_manager_partition_count", "Partitions hosted here", value=len(parts))


_default: BrokerMetrics | None = None


def broker_metrics() -> BrokerMetrics:
    """The process's broker metrics in the default registry (created once: a registry refuses duplicates)."""
    global _default
    if _default is None:
        _default = BrokerMetrics()
    return _default


def register_partitions(partitions: Callable[[], dict[Any, Any]]) -> PartitionCollector:
    collector = PartitionCollector(partitions)
    REGISTRY.register(collector)
    return collector
