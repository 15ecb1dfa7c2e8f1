"""Replication throttles (services/broker/replication_throttle.py): config parsing, the throttling rule,
and the token bucket holding the rate over a simulated 20 s with an injected clock."""

from __future__ import annotations

import pytest

from services.broker.replication_throttle import (
    FOLLOWER_RATE,
    FOLLOWER_REPLICAS,
    LEADER_RATE,
    LEADER_REPLICAS,
    ReplicationQuota,
    ReplicationThrottles,
    effective_broker_configs,
    format_throttled_replicas,
    names_replica,
    parse_rate,
    parse_throttled_replicas,
)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("value,expected", [
    ("*", "*"),
    (" * ", "*"),
    ("", frozenset()),
    ("0:1", frozenset({(0, 1)})),
    ("0:1, 0:2,1:3,", frozenset({(0, 1), (0, 2), (1, 3)})),
])
def test_parse_throttled_replicas(value: str, expected: object) -> None:
    assert parse_throttled_replicas(value) == expected


@pytest.mark.parametrize("value", ["0", "a:1", "0:b", "0:1:2", "-1:2"])
def test_parse_throttled_replicas_refuses(value: str) -> None:
    with pytest.raises(ValueError):
        parse_throttled_replicas(value)


def test_format_round_trips() -> None:
    pairs = {(1, 3), (0, 2), (0, 1)}
    assert format_throttled_replicas(pairs) == "0:1,0:2,1:3"
    assert parse_throttled_replicas(format_throttled_replicas(pairs)) == frozenset(pairs)


@pytest.mark.parametrize("value,partition,broker,expected", [
    ("*", 5, 9, True), ("0:1,1:2", 1, 2, True), ("0:1,1:2", 1, 1, False), ("", 0, 1, False),
    (None, 0, 1, False), ("garbage", 0, 1, False),
])
def test_names_replica(value: object, partition: int, broker: int, expected: bool) -> None:
    assert names_replica(value, partition, broker) is expected


def test_parse_rate() -> None:
    assert parse_rate(None) is None and parse_rate("") is None
    assert parse_rate("1048576") == 1048576.0
    assert parse_rate(str(2**63 - 1)) is None  # Kafka's "no limit"
    with pytest.raises(ValueError):
        parse_rate("-5")


def test_rule_throttles_only_named_replicas_outside_the_isr() -> None:
    t = ReplicationThrottles(broker_id=2, clock=Clock())
    topic = {LEADER_REPLICAS: "0:2,1:2", FOLLOWER_REPLICAS: "0:4"}
    assert not t.leader_throttled(topic, 0, follower=4, isr=[2, 3])  # no rate set: never throttled
    t.set_broker_configs({LEADER_RATE: "1000", FOLLOWER_RATE: "500"})
    assert t.leader_throttled(topic, 0, follower=4, isr=[2, 3])
    assert not t.leader_throttled(topic, 0, follower=3, isr=[2, 3])  # in-sync follower: never
    assert not t.leader_throttled(topic, 2, follower=4, isr=[2, 3])  # partition not listed
    assert not t.follower_throttled(topic, 0, isr=[1])  # follower list names broker 4, not 2
    assert ReplicationThrottles(4, clock=Clock()).follower_throttled(topic, 0, isr=[1]) is False  # no rate on 4
    t4 = ReplicationThrottles(4, clock=Clock())
    t4.set_broker_configs({FOLLOWER_RATE: "500"})
    assert t4.follower_throttled(topic, 0, isr=[1, 2])
    assert not t4.follower_throttled(topic, 0, isr=[1, 2, 4])  # caught up: no longer throttled
    t.set_broker_configs({})
    assert not t.leader.limited and not t.follower.limited


def test_effective_broker_configs_overlay_default() -> None:
    assert effective_broker_configs({LEADER_RATE: 5}, {LEADER_RATE: 1, FOLLOWER_RATE: 2}) == {
        LEADER_RATE: 5, FOLLOWER_RATE: 2}
    assert effective_broker_configs(None, None) == {}


def test_unlimited_quota_never_exceeds() -> None:
    q = ReplicationQuota(None, clock=Clock())
    q.record(10**9)
    assert not q.exceeded()
    assert q.allowance(4096) == 4096


def test_bucket_goes_into_debt_and_recovers() -> None:
    clock = Clock()
    q = ReplicationQuota(1000.0, clock=clock, burst_s=1.0)
    assert q.allowance(10_000) == 1000  # starts full: one burst
    q.record(3000)  # one big batch: 2000 bytes of debt
    assert q.exceeded() and q.allowance(10_000) == 0
    clock.now += 1.9
    assert q.exceeded()
    clock.now += 0.2
    assert not q.exceeded()
    assert q.allowance(10_000) == 100
    clock.now += 100
    assert q.allowance(10_000) == 1000  # never more than one burst


@pytest.mark.parametrize("rate,batch,tick", [
    (1_000_000.0, 64 * 1024, 0.01),  # 1 MB/s, 64 KiB batches, 10 ms between reads
    (100_000.0, 16 * 1024, 0.05),  # slower than one batch per tick
    (10_000_000.0, 1024 * 1024, 0.5),  # coarse: a read every 500 ms (the follower's max wait)
])
def test_rate_held_within_ten_percent_over_20s(rate: float, batch: int, tick: float) -> None:
    """A reader that takes whole batches whenever the quota lets it, as the fetch paths do."""
    clock = Clock()
    q = ReplicationQuota(rate, clock=clock)
    start, moved = clock.now, 0
    while clock.now - start < 20.0:
        if not q.exceeded():
            allowed = q.allowance(8 * 1024 * 1024)
            n = max(batch, (allowed // batch) * batch)  # whole batches, at least one
            q.record(n)
            moved += n
        clock.now += tick
    measured = moved / (clock.now - start)
    assert 0.9 * rate <= measured <= 1.1 * rate, measured


def test_rate_change_keeps_debt_and_removal_frees() -> None:
    clock = Clock()
    q = ReplicationQuota(1000.0, clock=clock, burst_s=1.0)
    q.record(5000)
    q.set_rate(2000.0)
    assert q.exceeded()  # the debt stays
    clock.now += 2.1
    assert not q.exceeded()
    q.set_rate(None)
    assert not q.exceeded() and q.allowance(7) == 7
