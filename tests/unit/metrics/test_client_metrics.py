"""Client metrics: counted per request and response, Kafka's names."""

from __future__ import annotations

from types import SimpleNamespace

from shared.client.client_metrics import ConsumerStats, ProducerStats


def test_producer_stats() -> None:
    s = ProducerStats()
    s.sent([SimpleNamespace(count=10), SimpleNamespace(count=30)], 4000)
    s.sent([SimpleNamespace(count=60)], 2000)
    s.answered(0.004)
    s.answered(0.002)
    m = s.snapshot()
    assert m["record-send-total"] == 100 and m["request-total"] == 2
    assert m["batch-size-avg"] == 2000 and m["records-per-request-avg"] == 50
    assert abs(m["request-latency-avg"] - 3.0) < 1e-9 and abs(m["request-latency-max"] - 4.0) < 1e-9
    assert m["record-send-rate"] > 0


def test_consumer_stats() -> None:
    s = ConsumerStats()
    s.fetched(100)
    s.fetched(0)
    m = s.snapshot([3, 9, 0])
    assert m["fetch-total"] == 2 and m["bytes-consumed-total"] == 100 and m["records-lag-max"] == 9
    assert s.snapshot([])["records-lag-max"] == 0
