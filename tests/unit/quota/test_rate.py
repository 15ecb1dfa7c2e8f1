"""Kafka's windowed rate (SampledStat + Rate) and the throttle formula, on a fake clock (ms)."""

from __future__ import annotations

import pytest

from shared.quota.rate import SampledRate, credit, throttle_time_ms


def test_first_windows_are_padded_to_samples_minus_one() -> None:
    r = SampledRate(samples=11, window_ms=1000)
    r.record(10_000, now_ms=0)
    # Only 0.5 s elapsed, but the rate divides by 10 windows: a first burst is not over-counted.
    assert r.window_size_ms(500) == 10_500
    assert r.measure(500) == pytest.approx(10_000 / 10.5)


def test_after_the_window_fills_the_rate_is_over_elapsed_time_and_old_samples_expire() -> None:
    r = SampledRate(samples=11, window_ms=1000)
    for t in range(0, 11_000, 100):
        r.record(100, t)  # 1000/s
    assert r.window_size_ms(10_950) == 10_950
    assert r.measure(10_950) == pytest.approx(11_000 / 10.95)
    # At 11 s the first sample (started at 0) is obsolete: reset, so its 1000 are gone.
    assert r.total(11_000) == pytest.approx(10_000)


def test_samples_start_when_recorded_not_on_a_grid() -> None:
    r = SampledRate(samples=3, window_ms=1000)
    r.record(1, 0)
    r.record(1, 1500)  # new sample starting at 1500
    r.record(1, 2400)  # same sample
    r.record(1, 2600)  # new sample starting at 2600
    assert r.total(2999) == 4
    assert r.total(3000) == 3  # the sample from 0 is 3 windows old


def test_idle_rate_forgets_everything() -> None:
    r = SampledRate(samples=2, window_ms=100)
    r.record(5, 0)
    assert not r.idle(150)
    assert r.idle(200)


def test_throttle_time_is_kafkas_formula() -> None:
    # O = 1.5 T over a 10 s window -> 5 s of silence brings it back to T over 15 s.
    assert throttle_time_ms(1_500_000, 1_000_000, 10_000) == 5_000
    assert throttle_time_ms(999, 1000, 10_000) == 0
    assert throttle_time_ms(1000, 1000, 10_000) == 0
    assert credit(total=4_000, bound=1_000, window_ms=10_000) == 6_000
    assert credit(total=12_000, bound=1_000, window_ms=10_000) == 0


def test_bad_parameters() -> None:
    with pytest.raises(ValueError):
        SampledRate(samples=1)
