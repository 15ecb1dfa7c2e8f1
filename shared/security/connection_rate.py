"""Per-host connection creation rate on the client-facing doors (issue 23: "connections ... are
rate-limited per host"), as Kafka's per-IP quota ``connection_creation_rate`` (KIP-612).

``ConnectionRateLimiter`` is the rule, a pure class with the time passed in: one **token bucket** per host
(not Kafka's windowed rate: a bucket needs two numbers per host and answers "how long until one more
would be allowed" exactly). A host starts with ``burst`` tokens, earns ``rate_per_s`` tokens a second up
to ``burst``, and each admitted connection spends one; a connection that finds less than one token is
refused, spends nothing (Kafka un-records a throttled connection too) and is told how long until a token
is there. At most ``max_hosts`` hosts are kept (the least recently seen forgotten first: a forgotten host
starts again with a full bucket). Unlimited (``rate_per_s`` <= 0 or infinite) costs one attribute check.

The Kafka listener asks it once per accepted socket. gRPC has no accept hook, so ``GrpcConnectionGate``
sees calls instead: the first call from a peer (``ipv4:127.0.0.1:54321``: one TCP connection) it has not
admitted is a new connection and asks the limiter; an admitted peer is remembered, so its later calls
cost one dict lookup (``peer in gate.admitted``); a refused peer is not remembered (its next call asks
again). Remembered peers live in two generations swapped every ``idle_s`` (``connections.max.idle.ms``)
or when the newer one holds ``max_peers // 2``: a peer idle for two generations is forgotten, the rest
carry over on their next call, and no clock is read on the hot path.

Logging stays with the caller, except ``should_log(host, now)``: one WARNING line per host per
``LOG_EVERY_S``. Must not import ``services`` or ``pipelines``.
"""

from __future__ import annotations

import math
from collections import OrderedDict

from shared.request_context import peer_host

#: Kafka's setting: the ``connection_creation_rate`` quota of the (default) ``ips`` entity.
SETTING = "connection_creation_rate"
#: The default on a secure cluster (plaintext: unlimited, as Kafka): new connections per second per host.
SECURE_DEFAULT_RATE = 200.0
LOG_EVERY_S = 10.0
MAX_HOSTS = 10_000
MAX_PEERS = 100_000


def is_unlimited(rate_per_s: float | None) -> bool:
    return rate_per_s is None or not 0 < rate_per_s < math.inf


class ConnectionRateLimiter:
    """A token bucket per host: ``admit(host, now)`` is 0.0 when the connection may be made (and counts
    it), else the seconds until one would be."""

    __slots__ = ("unlimited", "rate", "burst", "max_hosts", "_hosts", "_logged", "refused")

    def __init__(self, rate_per_s: float | None, *, burst: float | None = None, max_hosts: int = MAX_HOSTS) -> None:
        self.unlimited = is_unlimited(rate_per_s)
        self.rate = 0.0 if self.unlimited else float(rate_per_s or 0.0)
        #: default: one second's worth of connections (at least one)
        self.burst = max(1.0, float(burst if burst is not None else self.rate))
        self.max_hosts = max(1, max_hosts)
        self._hosts: OrderedDict[str, tuple[float, float]] = OrderedDict()  # host -> (tokens, at)
        self._logged: OrderedDict[str, float] = OrderedDict()  # host -> when its last refusal was logged
        self.refused = 0

    def admit(self, host: str, now: float) -> float:
        if self.unlimited:
            return 0.0
        hosts = self._hosts
        entry = hosts.get(host)
        if entry is None:
            tokens = self.burst
            if len(hosts) >= self.max_hosts:
                hosts.popitem(last=False)
        else:
            tokens = min(self.burst, entry[0] + max(0.0, now - entry[1]) * self.rate)
            hosts.move_to_end(host)
        if tokens >= 1.0:
            hosts[host] = (tokens - 1.0, now)
            return 0.0
        hosts[host] = (tokens, now)
        self.refused += 1
        return (1.0 - tokens) / self.rate

    def should_log(self, host: str, now: float) -> bool:
        """True at most once per host per ``LOG_EVERY_S`` (for the caller's WARNING line)."""
        last = self._logged.get(host)
        if last is not None and now - last < LOG_EVERY_S:
            return False
        self._logged[host] = now
        self._logged.move_to_end(host)
        if len(self._logged) > self.max_hosts:
            self._logged.popitem(last=False)
        return True

    @property
    def hosts(self) -> int:
        return len(self._hosts)

    def describe(self) -> str:
        return "unlimited" if self.unlimited else f"{self.rate:g}/s per host (burst {self.burst:g})"


class GrpcConnectionGate:
    """New gRPC connections, told apart by their peer string, through a ``ConnectionRateLimiter``."""

    __slots__ = ("limiter", "idle_s", "max_peers", "admitted", "_previous", "_rotated_at")

    def __init__(self, limiter: ConnectionRateLimiter, *, idle_s: float = 600.0, max_peers: int = MAX_PEERS,
                 now: float = 0.0) -> None:
        self.limiter = limiter
        self.idle_s = idle_s
        self.max_peers = max(2, max_peers)
        #: the current generation of admitted peers: the hot path is ``peer in gate.admitted``
        self.admitted: dict[str, None] = {}
        self._previous: dict[str, None] = {}
        self._rotated_at = now

    def admit(self, peer: str, now: float, *, trusted: bool = False) -> float:
        """0.0 when the call's connection is (now) admitted, else the seconds until a new connection from
        its host would be. ``trusted`` (a verified client certificate) is admitted without asking the limiter."""
        if peer in self.admitted:
            return 0.0
        self._maybe_rotate(now)
        if peer in self._previous:  # seen in the last generation: carried over, not a new connection
            del self._previous[peer]
            self.admitted[peer] = None
            return 0.0
        if not trusted:
            wait = self.limiter.admit(peer_host(peer), now)
            if wait > 0.0:
                return wait
        self.admitted[peer] = None
        return 0.0

    def _maybe_rotate(self, now: float) -> None:
        since = now - self._rotated_at
        if since >= 2 * self.idle_s:  # both generations idle that long: forget them all
            self._previous = {}
            self.admitted = {}
            self._rotated_at = now
        elif since >= self.idle_s or len(self.admitted) >= self.max_peers // 2:
            self._previous = self.admitted
            self.admitted = {}
            self._rotated_at = now

    @property
    def peers(self) -> int:
        return len(self.admitted) + len(self._previous)
