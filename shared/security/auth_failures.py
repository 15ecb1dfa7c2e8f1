"""Per-host accounting of failed authentications: how long to delay a host's next attempt.

Issue 23 asks that failed attempts be "logged, counted and slowed per host". This is the counting and
slowing, as a pure class with the time passed in: the first ``free_failures - 1`` failures within
``window_s`` cost nothing; the next one delays the host by ``base_delay_s`` after it, and each further
failure doubles the delay (2x, 4x ... up to ``max_delay_s``); a success, or ``window_s`` without failures, forgets the host. At most ``max_hosts``
hosts are tracked (the oldest forgotten first), so a scan from many addresses cannot grow it without bound.

A transport asks ``delay_s(host, now)`` before it reads credentials (and sleeps, or refuses with the
delay as ``throttle_time_ms``), then reports ``failure`` / ``success``. Logging and metrics stay with
the caller (it knows the principal and the door). Must not import ``services`` or ``pipelines``.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass


@dataclass
class _HostFailures:
    count: int
    last: float


class AuthFailureTracker:
    def __init__(self, *, free_failures: int = 3, base_delay_s: float = 0.5, max_delay_s: float = 30.0,
                 window_s: float = 300.0, max_hosts: int = 10_000) -> None:
        self.free_failures = free_failures
        self.base_delay_s = base_delay_s
        self.max_delay_s = max_delay_s
        self.window_s = window_s
        self.max_hosts = max_hosts
        self._hosts: OrderedDict[str, _HostFailures] = OrderedDict()
        self.total_failures = 0

    def _current(self, host: str, now: float) -> _HostFailures | None:
        entry = self._hosts.get(host)
        if entry is not None and now - entry.last > self.window_s:
            del self._hosts[host]
            return None
        return entry

    def failures(self, host: str, now: float) -> int:
        entry = self._current(host, now)
        return 0 if entry is None else entry.count

    def delay_s(self, host: str, now: float) -> float:
        """How long, from ``now``, the host should wait before its next attempt is looked at."""
        entry = self._current(host, now)
        if entry is None or entry.count < self.free_failures:
            return 0.0
        delay = min(self.max_delay_s, self.base_delay_s * 2 ** (entry.count - self.free_failures))
        return max(0.0, entry.last + delay - now)

    def failure(self, host: str, now: float) -> float:
        """Record a failed attempt; returns the delay the host now has."""
        self.total_failures += 1
        entry = self._current(host, now)
        if entry is None:
            entry = self._hosts[host] = _HostFailures(0, now)
        entry.count += 1
        entry.last = now
        self._hosts.move_to_end(host)
        while len(self._hosts) > self.max_hosts:
            self._hosts.popitem(last=False)
        return self.delay_s(host, now)

    def success(self, host: str) -> None:
        self._hosts.pop(host, None)

    def __len__(self) -> int:
        return len(self._hosts)
