"""Issue 23, item 5: a throttle never exceeds Kafka's cap, the whole quota window
(``quota.window.num`` × ``quota.window.size.seconds``, 11 s by default), whoever reports usage."""

from __future__ import annotations

import pytest

from services.broker.quota_state import QuotaAccounting
from services.quota.decider import QuotaDecider
from shared.quota.decision import ProvisionalQuotas, throttle_cap_ms
from shared.quota.entities import CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE, QuotaEntity, QuotaType

P, F = QuotaType.PRODUCE, QuotaType.FETCH
KB = 1000.0


def test_the_cap_is_the_whole_quota_window() -> None:
    assert throttle_cap_ms(11, 1000) == 11_000
    assert throttle_cap_ms(5, 2000) == 10_000


@pytest.mark.parametrize("qtype,key", [(P, PRODUCER_BYTE_RATE), (F, CONSUMER_BYTE_RATE)])
@pytest.mark.parametrize("samples,window_ms", [(11, 1000), (4, 3000)])
def test_forged_huge_usage_from_three_brokers_is_capped(qtype: QuotaType, key: str, samples: int,
                                                        window_ms: int) -> None:
    """The issue's attack: three report streams claiming to be brokers 1-3 report 1 TB each for
    ``victim`` (quota 1 KB/s); Kafka's formula alone says ~9.9 million ms."""
    d = QuotaDecider(samples, window_ms)
    d.set_configs({QuotaEntity(None, "victim"): {key: KB}})
    cap = samples * window_ms
    for t in range(0, 3 * cap, 250):
        for broker in (1, 2, 3):
            for dec in d.report(broker, t, [(qtype, "ANONYMOUS", "victim", 1e12)]):
                assert 0 < dec.throttle_time_ms <= cap


def test_cluster_wide_forged_usage_is_capped() -> None:
    d = QuotaDecider()
    d.set_configs({QuotaEntity(None, "victim"): {PRODUCER_BYTE_RATE: KB, "cluster_wide": 1.0}})
    decs = [dec for b in (1, 2, 3) for dec in d.report(b, 0, [(P, "u", "victim", 1e15)])]
    assert decs and max(dec.throttle_time_ms for dec in decs) == 11_000


def test_provisional_throttle_is_capped() -> None:
    p = ProvisionalQuotas()
    p.set_configs({QuotaEntity(None, "victim"): {PRODUCER_BYTE_RATE: KB}})
    p.record(P, "u", "victim", 1e12, 0.0)
    assert p.throttle_ms(P, "u", "victim", 0.0) == 11_000


def test_broker_caps_a_decision_it_receives() -> None:
    """Whatever the quota service (or anything answering as it) says, the broker holds a client at
    most the whole quota window."""
    acc = QuotaAccounting(0.1, 2.0)
    acc.apply([(P, "u", "victim", 9_900_000, 0.0)], now=100.0)
    assert acc.throttle_s((P,), "u", "victim", 100.0) == pytest.approx(11.0)
    acc = QuotaAccounting(0.1, 6.0, ProvisionalQuotas(samples=4, window_ms=3000))
    acc.apply([(F, "u", "victim", 2**31 - 1, 0.0)], now=5.0)
    assert acc.throttle_s((F,), "u", "victim", 5.0) == pytest.approx(12.0)
    acc.apply([(F, "u", "victim", -5, 1.0)], now=6.0)  # nonsense below zero: no throttle
    assert acc.throttle_s((F,), "u", "victim", 6.0) == 0.0
