"""Broker metrics: per-request counting, per-topic children, scrape-time partition gauges, quantiles."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

from prometheus_client import CollectorRegistry, generate_latest

from services.broker.metrics import BrokerMetrics, PartitionCollector
from services.broker.replica_results import ProduceResult
from shared.errors import ErrorCode
from shared.metrics import histogram_quantile, parse, quantile_from_buckets, total
from shared.types import TopicPartition


def samples(registry: CollectorRegistry) -> dict:
    return parse(generate_latest(registry).decode())


def test_produce_counts_bytes_and_records_per_topic_and_skips_failures() -> None:
    reg = CollectorRegistry()
    m = BrokerMetrics(reg)
    a0, a1, b0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)
    data = [(a0, b"x" * 100), (a1, b"y" * 50), (b0, b"z" * 70)]
    results = {a0: ProduceResult(base_offset=0, last_offset=9), a1: ProduceResult(base_offset=5, last_offset=5),
               b0: ProduceResult(ErrorCode.NOT_LEADER_OR_FOLLOWER, "no")}
    m.produced(data, results)
    m.produced(data[:1], {a0: ProduceResult(base_offset=10, last_offset=19)})
    s = samples(reg)
    assert total(s, "tidelog_broker_topic_bytes_in_total", topic="a") == 250
    assert total(s, "tidelog_broker_topic_messages_in_total", topic="a") == 21
    assert total(s, "tidelog_broker_topic_bytes_in_total", topic="b") == 0
    assert total(s, "tidelog_broker_topic_failed_produce_requests_total", topic="b") == 1


def test_request_done_counts_once_and_observes_every_stage() -> None:
    reg = CollectorRegistry()
    m = BrokerMetrics(reg)
    for _ in range(3):
        m.request_done("Produce", 0.0, 0.002, 0.010)
    m.request_done("Fetch", 0.0, 0.001, 0.4)
    s = samples(reg)
    assert total(s, "tidelog_network_requests_total", request="Produce") == 3
    assert total(s, "tidelog_network_request_total_time_seconds_count", request="Produce") == 3
    assert abs(total(s, "tidelog_network_request_total_time_seconds_sum", request="Produce") - 0.036) < 1e-9
    assert total(s, "tidelog_network_request_stage_time_seconds_count", request="Fetch", stage="remote") == 1
    p50 = histogram_quantile(s, "tidelog_network_request_total_time_seconds", 0.5, request="Produce")
    assert p50 is not None and 0.01 <= p50 <= 0.025


def test_fetch_counts_bytes_out() -> None:
    reg = CollectorRegistry()
    m = BrokerMetrics(reg)
    m.fetched({TopicPartition("a", 0): SimpleNamespace(records=b"r" * 30), TopicPartition("a", 1): SimpleNamespace(records=b"")})
    assert total(samples(reg), "tidelog_broker_topic_bytes_out_total", topic="a") == 30


@dataclass
class FakePartition:
    is_leader: bool
    isr: list[int]
    replicas: list[int]
    min_insync_replicas: int = 2
    high_watermark: int = 7
    log: SimpleNamespace = field(default_factory=lambda: SimpleNamespace(size=1234, log_start_offset=2, log_end_offset=9,
                                                                      segments=[1, 2], rolls=1))


def test_partition_collector_reads_state_at_scrape_time() -> None:
    parts = {TopicPartition("t", 0): FakePartition(True, [1], [1, 2, 3]),
             TopicPartition("t", 1): FakePartition(True, [1, 2], [1, 2, 3]),
             TopicPartition("t", 2): FakePartition(False, [2], [1, 2])}
    reg = CollectorRegistry()
    reg.register(PartitionCollector(lambda: parts))
    s = samples(reg)
    assert total(s, "tidelog_replica_manager_under_replicated_partitions") == 2
    assert total(s, "tidelog_replica_manager_at_min_isr_partitions") == 1
    assert total(s, "tidelog_replica_manager_leader_count") == 2
    assert total(s, "tidelog_log_size_bytes", topic="t", partition="2") == 1234
    assert total(s, "tidelog_partition_high_watermark", topic="t", partition="0") == 7
    assert total(s, "tidelog_log_segments", topic="t", partition="0") == 2
    assert total(s, "tidelog_log_segment_rolls_total", topic="t", partition="0") == 1
    parts[TopicPartition("t", 0)].isr = [1, 2, 3]  # the next scrape sees the change, nothing else is told
    assert total(samples(reg), "tidelog_replica_manager_under_replicated_partitions") == 1


def test_quantile_interpolates_like_prometheus() -> None:
    inf = float("inf")
    assert quantile_from_buckets([(1.0, 0), (2.0, 10), (inf, 10)], 0.5) == 1.5
    assert quantile_from_buckets([(1.0, 10), (inf, 20)], 0.99) == 1.0
    assert quantile_from_buckets([(1.0, 0), (inf, 0)], 0.5) is None


def test_known_topics_start_at_zero() -> None:
    reg = CollectorRegistry()
    m = BrokerMetrics(reg)
    m.known_topics(["fresh"])
    s = samples(reg)
    assert ("tidelog_broker_topic_messages_in_total", (("topic", "fresh"),)) in s
    assert total(s, "tidelog_broker_topic_bytes_in_total", topic="fresh") == 0
