"""Per-host failed-authentication delays: free attempts, doubling, cap, window, success, bounded hosts."""

from __future__ import annotations

from shared.security.auth_failures import AuthFailureTracker


def test_delays_double_up_to_the_cap_and_are_per_host() -> None:
    t = AuthFailureTracker(free_failures=2, base_delay_s=1.0, max_delay_s=8.0, window_s=100)
    delays = [t.failure("10.0.0.1", 0.0) for _ in range(7)]
    assert delays == [0.0, 1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    assert t.delay_s("10.0.0.2", 0.0) == 0.0
    assert t.delay_s("10.0.0.1", 3.0) == 5.0  # the delay runs from the last failure
    assert t.delay_s("10.0.0.1", 9.0) == 0.0
    assert t.failures("10.0.0.1", 9.0) == 7 and t.total_failures == 7


def test_free_failures_then_delay() -> None:
    t = AuthFailureTracker(free_failures=3, base_delay_s=0.5)
    assert [t.failure("h", 0.0) for _ in range(4)] == [0.0, 0.0, 0.5, 1.0]


def test_success_and_window_forget_the_host() -> None:
    t = AuthFailureTracker(free_failures=1, base_delay_s=1.0, window_s=60)
    t.failure("h", 0.0)
    assert t.delay_s("h", 0.0) == 1.0
    t.success("h")
    assert t.delay_s("h", 0.0) == 0.0 and len(t) == 0
    t.failure("h", 0.0)
    t.failure("h", 10.0)
    assert t.failures("h", 69.0) == 2
    assert t.failures("h", 71.0) == 0 and len(t) == 0
    assert t.failure("h", 72.0) == 1.0  # counting starts over


def test_tracked_hosts_are_bounded() -> None:
    t = AuthFailureTracker(max_hosts=100)
    for i in range(1000):
        t.failure(f"10.0.{i // 256}.{i % 256}", float(i))
    assert len(t) == 100
    assert t.failures("10.0.0.0", 1000.0) == 0  # the oldest went first
    assert t.failures("10.0.3.231", 1000.0) == 1
