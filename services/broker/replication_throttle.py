"""Replication throttles (Kafka's ``ReplicationQuotaManager``): the rules, pure, with an injected clock.

Kafka's configs, all bytes per second or partition lists:

- broker, dynamic: ``leader.replication.throttled.rate`` caps what this broker, as leader, sends to
  throttled followers; ``follower.replication.throttled.rate`` caps what it fetches, as follower, for
  throttled partitions. Unset: no limit.
- topic: ``leader.replication.throttled.replicas`` / ``follower.replication.throttled.replicas``, either
  ``*`` (every replica) or ``partition:broker,partition:broker``. A broker throttles a partition as leader
  when the leader list names (partition, itself), and as follower when the follower list does.

As in Kafka, only replicas outside the ISR are throttled (a reassignment's new replicas catching up):
in-sync followers are never slowed, so ``acks=all`` does not wait for the throttle. The measure is a
token bucket holding at most ``burst_s`` seconds of the rate: a read may take a whole batch past what
is left (the bucket goes into debt), and throttled partitions are left alone until the debt is repaid,
so over any long interval the bytes moved stay within one burst plus one read of ``rate x time``.

No I/O, no asyncio: the fetch paths (``replica_fetcher``, ``follower_sessions``) ask and record.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
BROKER_CONFIGS = (LEADER_RATE, FOLLOWER_RATE)
TOPIC_CONFIGS = (LEADER_REPLICAS, FOLLOWER_REPLICAS)

ALL = "*"


@functools.lru_cache(maxsize=256)  # asked per partition per fetch while a rate is set: parse each value once
def parse_throttled_replicas(value: str) -> str | frozenset[tuple[int, int]]:
    """``"*"``, or the set of ``(partition, broker)`` pairs of ``"0:1,0:2,1:3"``; "" is the empty set.
    Raises ValueError naming the bad entry (Kafka accepts the same forms)."""
    text = value.strip()
    if text == ALL:
        return ALL
    pairs: set[tuple[int, int]] = set()
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            continue
        p, sep, b = entry.partition(":")
        if not sep or not p.strip().isdigit() or not b.strip().isdigit():
            raise ValueError(f"expected partition:broker or *, got {entry!r}")
        pairs.add((int(p), int(b)))
    return frozenset(pairs)


def format_throttled_replicas(pairs: set[tuple[int, int]] | frozenset[tuple[int, int]]) -> str:
    """The config value for ``pairs``, sorted: ``0:1,0:2,1:3``."""
    return ",".join(f"{p}:{b}" for p, b in sorted(pairs))


def names_replica(value: Any, partition: int, broker: int) -> bool:
    """Whether a throttled-replicas config value names (``partition``, ``broker``); a bad value names none."""
    if not value:
        return False
    try:
        parsed = parse_throttled_replicas(str(value))
    except ValueError:
        return False
    return parsed == ALL or (partition, broker) in parsed


def parse_rate(value: Any) -> float | None:
    """A throttled rate in bytes/s; None (no limit) for unset, empty or Kafka's Long.MAX_VALUE."""
    if value is None or value == "":
        return None
    rate = float(value)
    if rate < 0:
        raise ValueError(f"a throttled rate must be >= 0 bytes/s, got {value!r}")
    return None if rate >= 2**63 - 1 else rate


class ReplicationQuota:
    """One direction's byte-rate limit (leader or follower) on one broker: a token bucket."""

    def __init__(self, rate: float | None = None, *, clock: Callable[[], float] = time.monotonic,
                 burst_s: float = 1.0) -> None:
        self.clock = clock
        self.burst_s = burst_s
        self.rate: float | None = None
        self._tokens = 0.0
        self._at = clock()
        self.bytes_recorded = 0  # bytes of throttled partitions moved (metrics)
        self.times_exceeded = 0  # reads refused because the bucket was empty (metrics)
        self.set_rate(rate)

    @property
    def capacity(self) -> float:
        return (self.rate or 0.0) * self.burst_s

    def set_rate(self, rate: float | None) -> None:
        if rate == self.rate:
            return
        self._refill()
        was_limited, self.rate = self.rate is not None, rate
        if rate is None:
            self._tokens = 0.0
        elif not was_limited:
            self._tokens = self.capacity  # a new limit starts with a full bucket
        else:
            self._tokens = min(self._tokens, self.capacity)  # a debt is kept

    def _refill(self) -> None:
        now = self.clock()
        if self.rate is not None:
            self._tokens = min(self.capacity, self._tokens + self.rate * max(now - self._at, 0.0))
        self._at = now

    @property
    def limited(self) -> bool:
        return self.rate is not None

    def exceeded(self) -> bool:
        """Kafka's ``isQuotaExceeded``: nothing may be moved for throttled partitions right now."""
        if self.rate is None:
            return False
        self._refill()
        if self._tokens <= 0:
            self.times_exceeded += 1
            return True
        return False

    def allowance(self, cap: int) -> int:
        """How many bytes a throttled read may ask for now: what is left in the bucket, at most ``cap``
        (at least 1 while not exceeded: the read then returns one whole batch and the bucket goes into debt)."""
        if self.rate is None:
            return cap
        self._refill()
        return max(1, min(cap, int(self._tokens))) if self._tokens > 0 else 0

    def record(self, n: int) -> None:
        """``n`` bytes of throttled partitions moved."""
        if n <= 0:
            return
        self.bytes_recorded += n
        if self.rate is not None:
            self._refill()
            self._tokens -= n


@dataclass
class ReplicationThrottles:
    """A broker's two quotas and the rule deciding which replica traffic they apply to."""

    broker_id: int
    clock: Callable[[], float] = time.monotonic
    leader: ReplicationQuota = field(init=False)
    follower: ReplicationQuota = field(init=False)

    def __post_init__(self) -> None:
        self.leader = ReplicationQuota(clock=self.clock)
        self.follower = ReplicationQuota(clock=self.clock)

    def set_broker_configs(self, configs: Mapping[str, Any]) -> None:
        """Apply this broker's effective dynamic configs (its own entry over the cluster default)."""
        for name, quota in ((LEADER_RATE, self.leader), (FOLLOWER_RATE, self.follower)):
            try:
                quota.set_rate(parse_rate(configs.get(name)))
            except ValueError:
                quota.set_rate(None)

    def leader_throttled(self, topic_configs: Mapping[str, Any], partition: int, follower: int,
                         isr: list[int]) -> bool:
        """Kafka's ``shouldLeaderThrottle`` without the quota test: this broker leads ``partition``, the
        topic's leader list names it here, and ``follower`` is not in the ISR."""
        return (self.leader.limited and follower not in isr
                and names_replica(topic_configs.get(LEADER_REPLICAS), partition, self.broker_id))

    def follower_throttled(self, topic_configs: Mapping[str, Any], partition: int, isr: list[int]) -> bool:
        """Kafka's ``shouldFollowerThrottle`` without the quota test: this broker follows ``partition``
        from outside the ISR and the topic's follower list names it here."""
        return (self.follower.limited and self.broker_id not in isr
                and names_replica(topic_configs.get(FOLLOWER_REPLICAS), partition, self.broker_id))


def effective_broker_configs(own: Mapping[str, Any] | None, default: Mapping[str, Any] | None) -> dict[str, Any]:
    """A broker's dynamic configs: the cluster-wide ``<default>`` entry overlaid with its own."""
    return {**(default or {}), **(own or {})}
