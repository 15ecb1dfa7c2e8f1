"""A broker's provisional decisions for pairs the quota service has not decided yet (fake clock)."""

from __future__ import annotations

import pytest

from services.broker.quota_state import QuotaAccounting
from services.quota.decider import QuotaDecider
from shared.quota.decision import ProvisionalQuotas
from shared.quota.entities import (
    CLUSTER_WIDE,
    DEFAULT,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    QuotaEntity,
    QuotaType,
    parse_configs,
)

P, F, R = int(QuotaType.PRODUCE), int(QuotaType.FETCH), int(QuotaType.REQUEST)
MB = 1_000_000.0
A_1MB = {QuotaEntity(None, "a"): {PRODUCER_BYTE_RATE: MB}}


def test_nothing_configured_nothing_throttled() -> None:
    prov = ProvisionalQuotas()
    assert not prov.configured
    prov.record(P, "u", "a", 50 * MB, 0)
    assert prov.throttle_ms(P, "u", "a", 0) == 0


def test_a_first_burst_pays_what_the_quota_service_would_charge() -> None:
    prov = ProvisionalQuotas()
    prov.set_configs(A_1MB)
    prov.record(P, "u", "a", MB, 0)  # a second's worth at once: the bucket held 200 ms of it
    assert prov.throttle_ms(P, "u", "a", 0) == 800
    assert prov.throttle_ms(P, "u", "a", 300) == 500  # refilled at the quota meanwhile
    decider = QuotaDecider()  # the same code: the service, told the same usage, says the same
    decider.set_configs(A_1MB)
    (dec,) = decider.report(1, 0, [(QuotaType.PRODUCE, "u", "a", MB)])
    assert dec.throttle_time_ms == 800


def test_kafkas_formula_over_the_window_applies_too() -> None:
    prov = ProvisionalQuotas(credit_ms=100_000)  # a bucket that never binds: Kafka's window alone
    prov.set_configs(A_1MB)
    prov.record(P, "u", "a", 15 * MB, 0)
    assert prov.throttle_ms(P, "u", "a", 0) == 5000  # 1.5 MB/s over the padded 10 s: (1.5 - 1) / 1 x 10 s


def test_only_pairs_with_a_quota_and_each_default_client_id_apart() -> None:
    prov = ProvisionalQuotas()
    prov.set_configs({QuotaEntity(None, DEFAULT): {PRODUCER_BYTE_RATE: MB}})
    prov.record(P, "u", "a", 2 * MB, 0)
    assert prov.throttle_ms(P, "u", "a", 0) > 0
    assert prov.throttle_ms(P, "u", "b", 0) == 0  # its own group
    assert prov.throttle_ms(F, "u", "a", 0) == 0  # no consumer_byte_rate set


def test_cluster_wide_entries_are_measured_per_broker_until_the_service_answers() -> None:
    prov = ProvisionalQuotas()
    prov.set_configs({QuotaEntity(None, "a"): {PRODUCER_BYTE_RATE: MB, CLUSTER_WIDE: 1}})
    prov.record(P, "u", "a", 0.1 * MB, 0)
    assert prov.throttle_ms(P, "u", "a", 0) == 0
    prov.record(P, "u", "a", 0.2 * MB, 0)
    assert prov.throttle_ms(P, "u", "a", 0) == 100


def test_request_throttles_are_bounded_by_one_sample_window() -> None:
    prov = ProvisionalQuotas()
    prov.set_configs({QuotaEntity(None, "a"): {REQUEST_PERCENTAGE: 1.0}})
    prov.record(R, "u", "a", 500.0, 0)
    assert prov.throttle_ms(R, "u", "a", 0) == 1000


def test_accounting_holds_a_new_pair_until_the_first_decision_then_follows_the_service() -> None:
    acc = QuotaAccounting(report_interval_s=0.1, expiry_s=2.0)
    acc.set_configs(A_1MB)
    assert acc.has_decisions  # a quota exists: the pipeline asks
    acc.record(P, "u", "a", MB, 5.0)
    assert acc.throttle_s((P,), "u", "a", 5.0) == 0.0  # the service never answered: fail open
    acc.apply([], now=10.0)  # the service answers (nothing decided for "a" yet)
    acc.record(P, "u", "a", MB, 10.01)
    assert acc.throttle_s((P, R), "u", "a", 10.01) == pytest.approx(0.8)
    assert acc.throttle_s((P,), "u", "b", 10.01) == 0.0
    acc.apply([(P, "u", "a", 0, 5 * MB)], now=10.1)  # now the service decides: its decision wins
    assert acc.throttle_s((P,), "u", "a", 10.1) == 0.0
    acc.apply([], now=10.2)  # a decision no longer given (idle): provisional again, from scratch
    assert acc.throttle_s((P,), "u", "a", 10.2) == 0.0
    acc.record(P, "u", "a", MB, 10.2)
    assert acc.throttle_s((P,), "u", "a", 10.2) == pytest.approx(0.8)
    assert acc.throttle_s((P,), "u", "a", 12.3) == 0.0  # no answer for two windows: fail open
    acc.set_configs({})
    assert not acc.has_decisions


def test_quota_entries_parsed_from_an_etcd_snapshot_bad_ones_skipped() -> None:
    prefix = b"/tidelog/quotas/"
    snap = {prefix + b"clients/a": ({PRODUCER_BYTE_RATE: 1048576}, 1, 1),
            prefix + b"users/bob": ({"nonsense": 1}, 2, 2),
            prefix + b"bogus": ({PRODUCER_BYTE_RATE: 1}, 3, 3)}
    assert parse_configs(prefix, snap) == {QuotaEntity(None, "a"): {PRODUCER_BYTE_RATE: 1048576.0}}
