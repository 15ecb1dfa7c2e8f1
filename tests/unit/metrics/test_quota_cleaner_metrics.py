"""Quota and cleaner collectors."""

from __future__ import annotations

from types import SimpleNamespace

from prometheus_client import CollectorRegistry, generate_latest

from services.broker.cleaner_metrics import CleanerCollector
from services.quota.metrics import QuotaCollector, by_entity
from shared.metrics import parse, total
from shared.quota.entities import QuotaType


def scrape(collector) -> dict:
    reg = CollectorRegistry()
    reg.register(collector)
    return parse(generate_latest(reg).decode())


def test_quota_figures_per_entity_over_brokers() -> None:
    p = int(QuotaType.PRODUCE)
    totals = {(p, "alice", "c1", 1): [1000.0, 0, 2048.0, 300.0], (p, "alice", "c1", 2): [500.0, 250, 2048.0, 200.0]}
    assert by_entity(totals) == {("produce", "alice", "c1"): [1500.0, 250, 2048.0, 500.0]}
    s = scrape(QuotaCollector(lambda: totals, lambda: True))
    assert total(s, "tidelog_quota_throttle_time_seconds", quota_type="produce", client_id="c1") == 0.25
    assert total(s, "tidelog_quota_rate", user="alice") == 500.0
    assert total(s, "tidelog_quota_limit", user="alice") == 2048.0
    assert total(s, "tidelog_quota_usage_total", user="alice") == 1500.0
    assert total(s, "tidelog_quota_active") == 1


def test_cleaner_collector_reports_the_last_snapshot() -> None:
    c = CleanerCollector(1)
    status = SimpleNamespace(logs=[SimpleNamespace(dirty_ratio=0.2, compaction_delay_ms=0),
                                   SimpleNamespace(dirty_ratio=0.7, compaction_delay_ms=1500)],
                             quarantined=[1], cleaned_bytes=4096, jobs_done=3, jobs=[])
    assert total(scrape(c), "tidelog_log_cleaner_max_dirty_ratio") == 0  # nothing until the first refresh
    c.refresh(SimpleNamespace(status=lambda broker_id: status), now=100.0)
    status.quarantined = []
    c.refresh(SimpleNamespace(status=lambda broker_id: status), now=101.0)  # too soon: the snapshot stays
    s = scrape(c)
    assert total(s, "tidelog_log_cleaner_max_dirty_ratio") == 0.7
    assert total(s, "tidelog_log_cleaner_max_compaction_delay_seconds") == 1.5
    assert total(s, "tidelog_log_cleaner_uncleanable_partitions_count") == 1
    assert total(s, "tidelog_log_cleaner_cleaned_bytes_total") == 4096
