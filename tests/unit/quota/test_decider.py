"""The quota service's decisions and the broker's accounting, together on a simulated clock."""

from __future__ import annotations

import pytest

from services.broker.quota_state import QuotaAccounting
from services.quota.decider import QuotaDecider
from shared.quota.entities import (
    CLUSTER_WIDE,
    DEFAULT,
    PRODUCER_BYTE_RATE,
    QuotaEntity,
    QuotaType,
)

P = QuotaType.PRODUCE
MB = 1_000_000.0


def test_no_quota_no_decision() -> None:
    d = QuotaDecider()
    assert d.report(1, 0, [(P, "ANONYMOUS", "a", 5e9)]) == []


def test_over_quota_gets_kafkas_throttle_and_no_credit() -> None:
    d = QuotaDecider()
    d.set_configs({QuotaEntity(None, "a"): {PRODUCER_BYTE_RATE: MB}})
    (dec,) = d.report(1, 0, [(P, "ANONYMOUS", "a", 15 * MB)])
    # 15 MB over a (padded) 10 s window is 1.5 MB/s: Kafka says (1.5 - 1) / 1 x 10 s = 5 s; the
    # smoothing bucket says 11 s (its debt is capped at one window), and the larger one applies.
    assert (dec.throttle_time_ms, dec.credit, dec.quota, dec.rate) == (11_000, 0.0, MB, 1.5 * MB)
    (dec,) = d.report(1, 1000, [])
    assert dec.throttle_time_ms == 10_000


def test_kafkas_throttle_applies_when_the_window_is_over_but_the_bucket_is_not() -> None:
    d = QuotaDecider()
    d.set_configs({QuotaEntity(None, "a"): {PRODUCER_BYTE_RATE: MB}})
    d.report(1, 0, [(P, "u", "a", 15 * MB)])
    (dec,) = d.report(1, 10_500, [])  # bucket refilled; 15 MB over 10.5 s: (15/10.5 - 1) x 10.5 s
    assert dec.throttle_time_ms == 4500


def test_within_quota_gets_the_credit_left() -> None:
    d = QuotaDecider()
    d.set_configs({QuotaEntity(None, DEFAULT): {PRODUCER_BYTE_RATE: MB}})
    (dec,) = d.report(1, 0, [(P, "ANONYMOUS", "a", 0.05 * MB)])
    assert dec.throttle_time_ms == 0 and dec.credit == pytest.approx(0.15 * MB)  # the bucket: 200 ms at the quota
    (dec,) = d.report(1, 100, [(P, "ANONYMOUS", "a", 0.05 * MB)])
    assert dec.credit == pytest.approx(0.15 * MB)  # refilled at 1 MB/s (capped at 0.2 MB), then taken
    d = QuotaDecider(credit_ms=100_000)
    d.set_configs({QuotaEntity(None, DEFAULT): {PRODUCER_BYTE_RATE: MB}})
    (dec,) = d.report(1, 0, [(P, "ANONYMOUS", "a", 4 * MB)])
    assert dec.credit == pytest.approx(6 * MB)  # else what is left of T x W


def test_per_broker_quotas_are_separate_and_cluster_wide_ones_are_summed() -> None:
    d = QuotaDecider(credit_ms=100_000)  # a bucket that never binds: Kafka's window alone
    d.set_configs({QuotaEntity(None, "a"): {PRODUCER_BYTE_RATE: MB}})
    for b in (1, 2, 3):
        (dec,) = d.report(b, 0, [(P, "u", "a", 8 * MB)])
        assert dec.throttle_time_ms == 0  # each broker sees 0.8 MB/s
    d = QuotaDecider(credit_ms=100_000)
    d.set_configs({QuotaEntity(None, "a"): {PRODUCER_BYTE_RATE: MB, CLUSTER_WIDE: 1}})
    decisions = [d.report(b, 0, [(P, "u", "a", 4 * MB)])[0] for b in (1, 2, 3)]
    assert [x.throttle_time_ms for x in decisions] == [0, 0, 2000]  # 12 MB over 10 s against 1 MB/s
    assert decisions[1].credit == pytest.approx(2 * MB / 2)  # what is left, split over the brokers seen


def test_config_change_applies_to_the_next_report() -> None:
    d = QuotaDecider()
    d.set_configs({QuotaEntity(None, "a"): {PRODUCER_BYTE_RATE: MB}})
    assert d.report(1, 0, [(P, "u", "a", 20 * MB)])[0].throttle_time_ms > 0
    d.set_configs({})
    assert d.report(1, 100, []) == []


def test_accounting_throttles_until_decision_end_then_after_credit_and_expires() -> None:
    acc = QuotaAccounting(report_interval_s=0.1, expiry_s=2.0)
    acc.record(P, "u", "a", 100)
    assert acc.drain() == {(P, "u", "a"): 100} and acc.drain() == {}
    assert acc.throttle_s((P,), "u", "a", 0.0) == 0.0
    acc.apply([(P, "u", "a", 500, 1000.0)], now=10.0)
    assert acc.throttle_s((P,), "u", "a", 10.2) == pytest.approx(0.3)
    assert acc.throttle_s((P,), "u", "a", 10.6) == 0.0
    acc.apply([(P, "u", "a", 0, 1000.0)], now=11.0)
    acc.record(P, "u", "a", 1001)  # past the credit: held until the next decision is due
    assert acc.throttle_s((P,), "u", "a", 11.05) == pytest.approx(0.05)
    assert acc.throttle_s((P,), "u", "a", 11.2) == pytest.approx(0.005)  # the decision is late: look again soon
    assert acc.throttle_s((P,), "u", "b", 11.05) == 0.0
    assert acc.throttle_s((P,), "u", "a", 13.1) == 0.0  # no decision for 2 windows: fail open
    assert acc.stale(13.1)


def simulate(quota: float, speed_bps: float, request_bytes: int, seconds: float, brokers: int = 1,
             cluster_wide: bool = False, latency_ms: int = 3) -> list[list[tuple[float, float]]]:
    """A client per broker sending back to back, held as the broker pipeline holds it; the brokers report
    every 100 ms and apply the decisions ``latency_ms`` later. Returns each broker's (time s, bytes) log."""
    d = QuotaDecider()
    d.set_configs({QuotaEntity(None, "a"): {PRODUCER_BYTE_RATE: quota, CLUSTER_WIDE: int(cluster_wide)}})
    accs = [QuotaAccounting() for _ in range(brokers)]
    next_send = [0.0] * brokers
    logs: list[list[tuple[float, float]]] = [[] for _ in range(brokers)]
    pending: list[tuple[float, int, list[tuple[int, str, str, int, float]]]] = []
    step = 0.001
    t = 0.0
    while t < seconds:
        for b, acc in enumerate(accs):
            while next_send[b] <= t:
                acc.record(P, "u", "a", request_bytes)
                logs[b].append((t, request_bytes))
                hold = acc.throttle_s((P,), "u", "a", t)
                next_send[b] = max(next_send[b] + request_bytes / speed_bps, t + hold)
            if round(t * 1000) % 100 == b:
                usage = [(QuotaType(k[0]), k[1], k[2], v) for k, v in acc.drain().items()]
                out = d.report(b, t * 1000, usage)
                pending.append((t + latency_ms / 1000, b, [(x.quota_type, x.user, x.client_id, x.throttle_time_ms,
                                                           x.credit) for x in out]))
        for item in [p for p in pending if p[0] <= t]:
            pending.remove(item)
            accs[item[1]].apply(item[2], t)
        t += step
    return logs


def _rate(log: list[tuple[float, float]], start: float, end: float) -> float:
    return sum(n for t, n in log if start <= t < end) / (end - start)


def test_a_fast_producer_is_held_within_ten_percent_over_twenty_seconds() -> None:
    (log,) = simulate(quota=MB, speed_bps=100 * MB, request_bytes=64 * 1024, seconds=20)
    assert _rate(log, 0, 20) == pytest.approx(MB, rel=0.10)


def test_cluster_wide_quota_holds_the_sum_over_three_brokers() -> None:
    logs = simulate(quota=MB, speed_bps=50 * MB, request_bytes=64 * 1024, seconds=20, brokers=3, cluster_wide=True)
    assert sum(_rate(log, 0, 20) for log in logs) == pytest.approx(MB, rel=0.10)


def test_request_quota_throttles_are_bounded_by_one_sample_window() -> None:
    d = QuotaDecider()
    d.set_configs({QuotaEntity(None, "a"): {"request_percentage": 1.0}})
    (dec,) = d.report(1, 0, [(QuotaType.REQUEST, "u", "a", 500.0)])  # 5 s of handler time at once
    assert dec.throttle_time_ms == 1000
