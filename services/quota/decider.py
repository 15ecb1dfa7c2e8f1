"""The quota service's decisions: usage reports in, throttle decisions out. Pure: time is passed in (ms).

Each report adds one broker's usage per ``(quota type, user, client-id)``.
The usage is resolved to the quota that applies (Kafka's precedence, see
``shared.quota.entities``) and recorded in a windowed rate per quota group:
per broker by default (Kafka's semantics: each broker limits what it sees),
or one rate summed over all brokers when the entry is ``cluster_wide``. The
answer lists, for every pair the broker served recently that has a quota,
Kafka's throttle time and the credit left before the rate passes the bound
(split evenly over the brokers a cluster-wide group is seen on).

Kafka decides per request; here a broker applies a decision until the next
one, so a client idle for a while could take a whole window's worth
(``T × W``) in one burst between two decisions, and the window would then
swing between bursts and long throttles. So each group also has a token
bucket at the quota (``Smoother``, holding ``credit_ms`` of it) and the credit
is capped by what the bucket holds; an overshoot past it throttles for the
time the bucket needs to refill (at most one quota window). The decision's
throttle time is the larger of Kafka's and the bucket's: usage flows at the
quota instead of in window-sized bursts. It never exceeds Kafka's cap, the
whole quota window (``samples × window_ms``, 11 s by default), however much
usage is reported: a forged report cannot hold a client out for hours.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from shared.quota.decision import CREDIT_MS, GroupState, max_throttle_ms
from shared.quota.entities import KEY_OF_TYPE, Match, QuotaEntity, QuotaType, resolve
from shared.quota.rate import QUOTA_WINDOW_NUM, QUOTA_WINDOW_SIZE_MS

Pair = tuple[QuotaType, str, str]  # quota type, user, client id
CLUSTER = -1  # the scope of a cluster-wide rate


@dataclass(frozen=True)
class Decision:
    quota_type: QuotaType
    user: str
    client_id: str
    throttle_time_ms: int
    credit: float
    quota: float
    rate: float


class QuotaDecider:
    def __init__(self, samples: int = QUOTA_WINDOW_NUM, window_ms: int = QUOTA_WINDOW_SIZE_MS,
                 credit_ms: float = CREDIT_MS) -> None:
        self.samples = samples
        self.window_ms = window_ms
        self.credit_ms = credit_ms
        self._configs: dict[QuotaEntity, dict[str, float]] = {}
        self._matches: dict[Pair, Match | None] = {}
        self._groups: dict[tuple[QuotaType, tuple[str, str], int], GroupState] = {}
        self._seen: dict[int, dict[Pair, float]] = {}  # broker -> pair -> last report with usage (ms)
        self._group_brokers: dict[tuple[QuotaType, tuple[str, str]], dict[int, float]] = {}
        self._forgot_at = float("-inf")

    @property
    def forget_after_ms(self) -> float:
        return self.samples * self.window_ms

    def set_configs(self, configs: Mapping[QuotaEntity, Mapping[str, float]]) -> None:
        """Replace the quota entries (from etcd); rates of groups that still exist are kept."""
        self._configs = {e: dict(v) for e, v in configs.items()}
        self._matches.clear()

    def match(self, pair: Pair) -> Match | None:
        if pair not in self._matches:
            self._matches[pair] = resolve(self._configs, pair[1], pair[2], KEY_OF_TYPE[pair[0]])
        return self._matches[pair]

    def _group(self, pair: Pair, m: Match, broker: int, now_ms: float) -> GroupState:
        key = (pair[0], m.group, CLUSTER if m.cluster_wide else broker)
        group = self._groups.get(key)
        if group is None:
            group = self._groups[key] = GroupState(self.samples, self.window_ms, self.credit_ms, now_ms)
        return group

    def report(self, broker: int, now_ms: float, usage: Iterable[tuple[QuotaType, str, str, float]]) -> list[Decision]:
        """Record one broker's usage; return the decisions for every pair it recently served."""
        seen = self._seen.setdefault(broker, {})
        for qtype, user, client_id, amount in usage:
            pair = (QuotaType(qtype), user, client_id)
            seen[pair] = now_ms
            m = self.match(pair)
            if m is None or amount <= 0:
                continue
            self._group(pair, m, broker, now_ms).record(amount, m.value, now_ms)
            self._group_brokers.setdefault((pair[0], m.group), {})[broker] = now_ms
        self._forget(now_ms)
        return [d for pair in seen if (d := self._decide(pair, broker, now_ms)) is not None]

    def _decide(self, pair: Pair, broker: int, now_ms: float) -> Decision | None:
        m = self.match(pair)
        if m is None:
            return None
        throttle, left, measured = self._group(pair, m, broker, now_ms).decide(
            m.value, now_ms, max_throttle_ms(pair[0], self.window_ms, self.samples))
        if m.cluster_wide:
            left /= max(1, len(self._group_brokers.get((pair[0], m.group), {})))
        return Decision(pair[0], pair[1], pair[2], throttle, left, m.value, measured)

    def _forget(self, now_ms: float) -> None:
        """Drop pairs, brokers and rates with no usage for a whole window (``samples × window``);
        looked at once per sample window, not on every report."""
        if now_ms - self._forgot_at < self.window_ms:
            return
        self._forgot_at = now_ms
        horizon = now_ms - self.forget_after_ms
        for seen in self._seen.values():
            for pair in [p for p, t in seen.items() if t < horizon]:
                del seen[pair]
        for brokers in self._group_brokers.values():
            for b in [b for b, t in brokers.items() if t < horizon]:
                del brokers[b]
        for key in [k for k, g in self._groups.items() if g.idle(now_ms)]:
            del self._groups[key]
