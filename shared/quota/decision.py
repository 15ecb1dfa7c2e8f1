"""One quota group's decision: Kafka's windowed rate and throttle formula plus the smoothing bucket.

``GroupState`` is what both deciders keep per quota group and compute from:
the quota service (``services/quota/decider.py``: per broker, or summed over
all brokers for a cluster-wide quota) and a broker itself
(``ProvisionalQuotas``: its own usage only, Kafka's per-broker semantics) for
a pair the quota service has not decided yet. Pure: time is passed in (ms).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from shared.quota.entities import KEY_OF_TYPE, Match, QuotaEntity, QuotaType, resolve
from shared.quota.rate import QUOTA_WINDOW_NUM, QUOTA_WINDOW_SIZE_MS, SampledRate, Smoother, credit, throttle_time_ms

#: How much of the quota a group may use between two decisions (the smoothing bucket's size).
CREDIT_MS = 200.0


class GroupState:
    """The usage of one quota group: a ``SampledRate`` over the quota window and a ``Smoother`` bucket."""

    __slots__ = ("rate", "bucket")

    def __init__(self, samples: int, window_ms: int, credit_ms: float, now_ms: float) -> None:
        self.rate = SampledRate(samples, window_ms)
        self.bucket = Smoother(credit_ms, samples * window_ms, now_ms)

    def record(self, amount: float, bound: float, now_ms: float) -> None:
        self.rate.record(amount, now_ms)
        self.bucket.update(bound, now_ms, amount)

    def decide(self, bound: float, now_ms: float, max_throttle_ms: float | None = None) -> tuple[int, float, float]:
        """``(throttle_time_ms, credit, measured rate)`` now: the larger of Kafka's (O − T) / T × W and the
        bucket's refill time, capped at ``max_throttle_ms`` if given; the credit is the smaller of what is
        left of T × W and what the bucket holds."""
        window = self.rate.window_size_ms(now_ms)
        total = self.rate.total(now_ms)
        measured = total / (window / 1000.0)
        self.bucket.update(bound, now_ms)
        left = min(credit(total, bound, window), max(0.0, self.bucket.level))
        throttle = max(throttle_time_ms(measured, bound, window), self.bucket.wait_ms(bound))
        if max_throttle_ms is not None:
            throttle = min(throttle, int(max_throttle_ms))
        return throttle, left, measured

    def idle(self, now_ms: float) -> bool:
        return self.rate.idle(now_ms)


def throttle_cap_ms(samples: int, window_ms: int) -> int:
    """The longest throttle any decision may carry: the whole quota window, ``quota.window.num`` ×
    ``quota.window.size.seconds`` (11 s by default), as Kafka's ``ClientQuotaManager`` bounds a
    throttle. Whatever usage is reported (a forged report included), nobody is held longer."""
    return samples * window_ms


def max_throttle_ms(qtype: int, window_ms: int, samples: int = QUOTA_WINDOW_NUM) -> float:
    """Request-quota throttles are bounded by one sample window, as Kafka's request quota manager does;
    bandwidth throttles by the whole quota window (``throttle_cap_ms``)."""
    return float(window_ms) if qtype == QuotaType.REQUEST else float(throttle_cap_ms(samples, window_ms))


class ProvisionalQuotas:
    """A broker's own throttle decisions for pairs ``(quota type, user, client id)`` the quota service has
    not decided yet (a new client id until the service's first answer, ~one report interval): the
    broker resolves the configured entries itself and measures what *it* sees of each group (Kafka's
    per-broker semantics, also for a cluster-wide entry: the service sums brokers once it answers)."""

    def __init__(self, samples: int = QUOTA_WINDOW_NUM, window_ms: int = QUOTA_WINDOW_SIZE_MS,
                 credit_ms: float = CREDIT_MS) -> None:
        self.samples = samples
        self.window_ms = window_ms
        self.credit_ms = credit_ms
        self._configs: dict[QuotaEntity, dict[str, float]] = {}
        self._matches: dict[tuple[int, str, str], Match | None] = {}
        self._groups: dict[tuple[int, tuple[str, str]], GroupState] = {}

    @property
    def configured(self) -> bool:
        """False while no quota entry exists: then nothing is ever throttled (the hot path skips all)."""
        return bool(self._configs)

    def set_configs(self, configs: Mapping[QuotaEntity, Mapping[str, float]]) -> None:
        self._configs = {e: dict(v) for e, v in configs.items()}
        self._matches.clear()
        self._groups.clear()

    def match(self, qtype: int, user: str, client_id: str) -> Match | None:
        key = (qtype, user, client_id)
        try:
            return self._matches[key]
        except KeyError:
            if len(self._matches) > 10_000:  # many short-lived client ids: start again
                self._matches.clear()
            m = self._matches[key] = resolve(self._configs, user, client_id, KEY_OF_TYPE[QuotaType(qtype)])
            return m

    def record(self, qtype: int, user: str, client_id: str, amount: float, now_ms: float) -> None:
        m = self.match(qtype, user, client_id)
        if m is not None and amount > 0:
            self._group(qtype, m, now_ms).record(amount, m.value, now_ms)

    def throttle_ms(self, qtype: int, user: str, client_id: str, now_ms: float) -> int:
        """Kafka's throttle time (with the bucket) for the pair's group as this broker measured it."""
        m = self.match(qtype, user, client_id)
        if m is None:
            return 0
        group = self._groups.get((qtype, m.group))
        if group is None:
            return 0
        return group.decide(m.value, now_ms, max_throttle_ms(qtype, self.window_ms, self.samples))[0]

    def decided(self, pairs: Iterable[tuple[int, str, str]]) -> None:
        """The quota service now decides for these pairs: forget their groups."""
        for qtype, user, client_id in pairs:
            m = self._matches.get((qtype, user, client_id))
            if m is not None:
                self._groups.pop((qtype, m.group), None)

    def _group(self, qtype: int, m: Match, now_ms: float) -> GroupState:
        key = (qtype, m.group)
        group = self._groups.get(key)
        if group is None:
            if len(self._groups) > 10_000:
                self._groups = {k: g for k, g in self._groups.items() if not g.idle(now_ms)}
            group = self._groups[key] = GroupState(self.samples, self.window_ms, self.credit_ms, now_ms)
        return group
