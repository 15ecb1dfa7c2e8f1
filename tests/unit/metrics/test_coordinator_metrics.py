"""Coordinator metrics: lag arithmetic, groups by state at scrape time."""

from __future__ import annotations

from types import SimpleNamespace

from prometheus_client import CollectorRegistry, generate_latest

from services.coordinator.metrics import CoordinatorMetrics, committed_offsets, compute_lag
from shared.metrics import parse, total
from shared.types import TopicPartition

A0, A1 = TopicPartition("a", 0), TopicPartition("a", 1)


def shard(groups: dict, offsets: dict) -> SimpleNamespace:
    return SimpleNamespace(groups=groups, offsets={g: {tp: SimpleNamespace(offset=o) for tp, o in tps.items()}
                                                   for g, tps in offsets.items()})


def test_lag_is_high_watermark_minus_committed_never_negative() -> None:
    committed = committed_offsets([shard({}, {"g": {A0: 90, A1: 10}}), shard({}, {"h": {A0: 100}})])
    lag = compute_lag(committed, {A0: 100})
    assert lag == {("g", A0): 10, ("h", A0): 0}  # A1's high watermark is unknown: no figure rather than a wrong one


def test_collector_reports_groups_by_state_members_and_lag() -> None:
    groups = {"g": SimpleNamespace(state="Stable", members={"m1": 1, "m2": 2}, epoch=3),
              "e": SimpleNamespace(state="Empty", members={}, epoch=1)}
    parts = {0: SimpleNamespace(shard=shard(groups, {}), loaded=True, stats={"seconds": 0.25}),
             1: SimpleNamespace(shard=shard({"x": groups["g"]}, {}), loaded=False, stats={})}
    reg = CollectorRegistry()
    m = CoordinatorMetrics(lambda: parts, reg)
    m.lag = {("g", A0): 7, ("g", A1): 3}
    s = parse(generate_latest(reg).decode())
    assert total(s, "tidelog_coordinator_groups", state="Stable") == 1
    assert total(s, "tidelog_coordinator_groups", state="Empty") == 1
    assert total(s, "tidelog_coordinator_group_members", group="g") == 2
    assert total(s, "tidelog_coordinator_group_members", group="x") == 0  # partition 1 is not loaded
    assert total(s, "tidelog_coordinator_partition_load_time_seconds", partition="0") == 0.25
    assert total(s, "tidelog_consumer_group_lag", group="g", topic="a", partition="0") == 7
    assert total(s, "tidelog_consumer_group_lag_sum", group="g", topic="a") == 10
