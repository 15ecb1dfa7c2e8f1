"""The worker's I/O throttle keeps bytes moved within log.cleaner.io.max.bytes.per.second."""

from __future__ import annotations

import math

import pytest

from services.cleaner.throttle import Throttler


def test_pauses_keep_the_rate_and_idle_time_banks_no_credit() -> None:
    t = Throttler(1000)
    now = 0.0
    moved = 0
    for _ in range(20):  # 20 chunks of 250 bytes as fast as allowed: 5 s at 1000 B/s
        now += t.delay_s(250, now)
        moved += 250
    assert now == pytest.approx(moved / 1000 - 0.25, abs=0.3)
    later = now + 60
    assert t.delay_s(100, later) == pytest.approx(0.1)


def test_unlimited_by_default_and_rejects_nonpositive_rates() -> None:
    assert Throttler().delay_s(10**9, 0) == 0 and Throttler(math.inf).delay_s(1, 1) == 0
    with pytest.raises(ValueError):
        Throttler(0)
