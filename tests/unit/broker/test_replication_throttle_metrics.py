"""The replication throttle's Prometheus metrics (services/broker/throttle_metrics.py)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from services.broker.replication_throttle import FOLLOWER_RATE, ReplicationThrottles
from services.broker.throttle_metrics import ThrottleCollector


def test_limit_bytes_and_held_back_reads_are_exported() -> None:
    now = [0.0]
    t = ReplicationThrottles(1, clock=lambda: now[0])
    reg = CollectorRegistry()
    reg.register(ThrottleCollector(t))
    text = generate_latest(reg).decode()
    assert "tidelog_replication_throttled_rate_limit_bytes{" not in text  # no limit set
    t.set_broker_configs({FOLLOWER_RATE: "1000"})
    t.follower.record(1500)
    assert t.follower.exceeded()
    text = generate_latest(reg).decode()
    assert 'tidelog_replication_throttled_rate_limit_bytes{direction="follower"} 1000.0' in text
    assert 'tidelog_replication_throttled_bytes_total{direction="follower"} 1500.0' in text
    assert 'tidelog_replication_throttled_times_total{direction="follower"} 1.0' in text
    assert 'tidelog_replication_throttled_bytes_total{direction="leader"} 0.0' in text
