"""The broker's side of client quotas, pure (time passed in, seconds of a monotonic clock).

``QuotaAccounting`` counts usage per ``(quota type, user, client-id)`` until
the next report drains it, and holds the latest decisions from the quota
service. A decision throttles a pair until ``received + throttle_time_ms``;
besides, once the pair has used the credit the decision gave it, it is held
for one report interval (the next decision says how long really). The whole
table is ignored once no decision arrived for ``expiry_s`` (two quota
windows): the broker fails open when the quota service is gone.

A pair with a quota configured but no decision yet (a new client id, until
the service's first answer: about one report interval) gets the broker's own
``ProvisionalQuotas`` decision, computed by the same code from what this broker
saw, while the service is answering (never when it is gone: fail open).

A decision's ``throttle_time_ms`` is capped at Kafka's bound, the whole quota
window (``quota.window.num`` × ``quota.window.size.seconds``, 11 s by default):
the broker never holds a client longer than that, whatever it receives.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from shared.quota.decision import ProvisionalQuotas, throttle_cap_ms
from shared.quota.entities import QuotaEntity

Pair = tuple[int, str, str]


class _Entry:
    __slots__ = ("until", "credit", "used")

    def __init__(self, until: float, credit: float) -> None:
        self.until = until
        self.credit = credit
        self.used = 0.0


class QuotaAccounting:
    def __init__(self, report_interval_s: float = 0.1, expiry_s: float = 2.0,
                 provisional: ProvisionalQuotas | None = None) -> None:
        self.report_interval_s = report_interval_s
        self.expiry_s = expiry_s
        self.provisional = provisional or ProvisionalQuotas()
        self.max_throttle_ms = throttle_cap_ms(self.provisional.samples, self.provisional.window_ms)
        self._usage: dict[Pair, float] = {}
        self._table: dict[Pair, _Entry] = {}
        self._configured = False  # some quota entry exists (provisional decisions possible)
        self.decided_at = float("-inf")

    def set_configs(self, configs: Mapping[QuotaEntity, Mapping[str, float]]) -> None:
        """The quota entries (watched in etcd), for provisional decisions."""
        self.provisional.set_configs(configs)
        self._configured = self.provisional.configured

    def record(self, qtype: int, user: str, client_id: str, amount: float, now: float | None = None) -> None:
        """Count ``amount`` against the pair (hot path: two dict lookups while no quota is set); ``now``
        (monotonic seconds) lets a pair without a decision count towards its provisional one."""
        key = (qtype, user, client_id)
        self._usage[key] = self._usage.get(key, 0.0) + amount
        if self._table or self._configured:
            entry = self._table.get(key)
            if entry is not None:
                entry.used += amount
            elif self._configured and now is not None and now - self.decided_at <= self.expiry_s:
                self.provisional.record(qtype, user, client_id, amount, now * 1000.0)

    def drain(self) -> dict[Pair, float]:
        """The usage since the previous drain (for the next report)."""
        usage, self._usage = self._usage, {}
        return usage

    def apply(self, decisions: Iterable[tuple[int, str, str, int, float]], now: float) -> None:
        """Replace the table with a decision set ``(type, user, client, throttle_ms, credit)``; a throttle
        is held to ``max_throttle_ms`` (Kafka's cap) whatever the decision says."""
        table = {}
        cap = self.max_throttle_ms
        for qtype, user, client_id, throttle_ms, credit in decisions:
            table[(qtype, user, client_id)] = _Entry(now + max(0, min(throttle_ms, cap)) / 1000.0, credit)
        self._table = table
        self.decided_at = now
        if self._configured:
            self.provisional.decided(table)

    @property
    def has_decisions(self) -> bool:
        """False while nothing can be throttled (no decision, no quota entry): the hot path skips ``throttle_s``."""
        return bool(self._table) or self._configured

    def stale(self, now: float) -> bool:
        return now - self.decided_at > self.expiry_s

    def throttle_s(self, qtypes: tuple[int, ...], user: str, client_id: str, now: float) -> float:
        """How long the pair must wait now (0 when it may go on)."""
        if now - self.decided_at > self.expiry_s:
            return 0.0
        wait = 0.0
        for qtype in qtypes:
            entry = self._table.get((qtype, user, client_id))
            if entry is None:
                if self._configured:  # no decision yet: the broker's own
                    wait = max(wait, self.provisional.throttle_ms(qtype, user, client_id, now * 1000.0) / 1000.0)
                continue
            left = entry.until - now
            if entry.used > entry.credit:  # over the credit before the service could say so
                left = max(left, self.decided_at + self.report_interval_s - now)
                if left <= 0:  # the next decision is late: wait a little, then look again
                    left = self.report_interval_s / 20
            wait = max(wait, left)
        return wait
