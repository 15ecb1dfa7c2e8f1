"""The continuous balancer's loop: reads the cluster, asks the pure planner (``balancer.py``), applies.

On the active controller only, every ``balancer.check.interval.ms``:

1. builds a ``BrokerView`` per broker — registered ones with their rack and liveness (a crashed broker
   whose port refuses is not alive before its lease expires), and brokers that still hold replicas but
   are gone, with the time this controller first saw them away (``AwayTracker``; in memory, so a
   controller failover restarts the grace time: the new active controller waits a full
   ``balancer.broker.unavailable.grace.ms`` before moving a dead broker's replicas — the safe side);
2. builds a ``PartitionView`` per partition from the topic assignments, sized by the brokers'
   DescribeLogDirs answers (the leader's copy, else the largest; 0 when no broker answers);
3. asks ``triggers``; when there is a reason, the balancer is not paused and no operator's reassignment
   is running (``tidelog reassign``/``decommission`` go first; the balancer waits for them), asks ``plan``
   for at most ``balancer.max.concurrent.moves`` minus its moves in flight;
4. applies the moves through ``alter_partition_reassignments`` (the REST ``POST /v1/reassignments`` API
   function), sets the replication throttle (``balancer.throttle.bytes.per.second``; 0 = none) on the
   moving replicas' brokers and topics as ``kafka-reassign-partitions.sh --throttle`` does
   (``shared.cli.throttle.throttle_plan``), and clears it once no balancer move is in flight.

State in etcd (so a failover keeps it): ``balancer/paused``; ``balancer/moves`` (the balancer's
reassignments in flight with their goals, and what it throttled); ``balancer/decommissioning/<id>``
(brokers being decommissioned: excluded, every replica moved off them). A decommissioning mark of a
broker that is gone and holds nothing is dropped.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field

from services.controller.balancer import (
    DEFAULT_DISK_SKEW_PERCENT,
    DEFAULT_ENABLE,
    DEFAULT_MAX_CONCURRENT_MOVES,
    DEFAULT_UNAVAILABLE_GRACE_MS,
    BrokerView,
    Move,
    PartitionView,
    excluded_brokers,
    plan,
    triggers,
)
from shared.cli.throttle import FOLLOWER_RATE, FOLLOWER_REPLICAS, LEADER_RATE, LEADER_REPLICAS, throttle_plan
from shared.request_context import RequestContext
from shared.settings import ServiceSettings
from shared.types import TopicPartition

log = logging.getLogger(__name__)

#: ``balancer.check.interval.ms``'s default.
DEFAULT_CHECK_INTERVAL_MS = 30_000
#: ``balancer.throttle.bytes.per.second``'s default: 50 MiB/s, well under a disk's or a NIC's rate, so
#: produce traffic keeps its share while data moves (0: no throttle).
DEFAULT_THROTTLE_BYTES_PER_SECOND = 50 * 1024 * 1024


class BalancerSettings(ServiceSettings):
    """The balancer's controller settings (``TIDELOG_BALANCER_*``), mixed into ``ControllerSettings``."""

    balancer_enable: bool = Field(DEFAULT_ENABLE, description="balancer.enable: move replicas on its own")
    balancer_max_concurrent_moves: int = Field(DEFAULT_MAX_CONCURRENT_MOVES, ge=1, le=10_000,
                                               description="balancer.max.concurrent.moves")
    balancer_throttle_bytes_per_second: int = Field(DEFAULT_THROTTLE_BYTES_PER_SECOND, ge=0,
                                                    description="balancer.throttle.bytes.per.second (0: none)")
    balancer_broker_unavailable_grace_ms: int = Field(DEFAULT_UNAVAILABLE_GRACE_MS, ge=0,
                                                      description="balancer.broker.unavailable.grace.ms")
    balancer_disk_skew_percent: float = Field(DEFAULT_DISK_SKEW_PERCENT, ge=0, le=10_000,
                                              description="balancer.disk.skew.percent")
    balancer_check_interval_ms: int = Field(DEFAULT_CHECK_INTERVAL_MS, ge=100, le=86_400_000,
                                            description="balancer.check.interval.ms")


@dataclass(frozen=True)
class BalancerConfig:
    enable: bool = DEFAULT_ENABLE
    max_concurrent_moves: int = DEFAULT_MAX_CONCURRENT_MOVES
    throttle_bytes_per_second: int = DEFAULT_THROTTLE_BYTES_PER_SECOND
    unavailable_grace_ms: int = DEFAULT_UNAVAILABLE_GRACE_MS
    disk_skew_percent: float = DEFAULT_DISK_SKEW_PERCENT
    check_interval_ms: int = DEFAULT_CHECK_INTERVAL_MS

    @classmethod
    def of(cls, s: Any) -> BalancerConfig:
        return cls(s.balancer_enable, s.balancer_max_concurrent_moves, s.balancer_throttle_bytes_per_second,
                   s.balancer_broker_unavailable_grace_ms, s.balancer_disk_skew_percent, s.balancer_check_interval_ms)

    def as_kafka(self) -> dict[str, Any]:
        return {"balancer.enable": self.enable, "balancer.max.concurrent.moves": self.max_concurrent_moves,
                "balancer.throttle.bytes.per.second": self.throttle_bytes_per_second,
                "balancer.broker.unavailable.grace.ms": self.unavailable_grace_ms,
                "balancer.disk.skew.percent": self.disk_skew_percent,
                "balancer.check.interval.ms": self.check_interval_ms}


# -- pure parts -------------------------------------------------------------------------------------------

class AwayTracker:
    """When each broker was last seen alive, by the injected clock (ms). A broker never seen alive by this
    controller counts as away since the first look (a failover restarts the grace time)."""

    def __init__(self) -> None:
        self.away_since: dict[int, int] = {}
        self.racks: dict[int, str | None] = {}

    def reset(self) -> None:
        self.away_since.clear()

    def views(self, registered: Mapping[int, str | None], live: Iterable[int], known: Iterable[int],
              now_ms: int) -> list[BrokerView]:
        """Views of the registered brokers and of every other ``known`` one (holding replicas)."""
        alive = set(live) & set(registered)
        known = set(known)
        self.racks.update(registered)
        out = []
        for b in sorted(set(registered) | known):
            if b in alive:
                self.away_since.pop(b, None)
                out.append(BrokerView(b, self.racks.get(b), True, None))
            else:
                since = self.away_since.setdefault(b, now_ms)
                out.append(BrokerView(b, self.racks.get(b), False, since))
        for b in list(self.away_since):
            if b not in registered and b not in known:
                del self.away_since[b]  # gone and holding nothing: forget it
        return out


@dataclass(frozen=True)
class Decision:
    triggers: list[str]
    moves: list[Move]
    why_idle: str = ""  # why no move was planned although triggers fired


def decide(brokers: list[BrokerView], partitions: list[PartitionView], *, now_ms: int, config: BalancerConfig,
           paused: bool, ours: Iterable[TopicPartition], others: Iterable[TopicPartition],
           decommissioning: Iterable[int] = ()) -> Decision:
    """What one check does. ``ours``: the balancer's reassignments in flight; ``others``: the operator's."""
    ours, others, decom = set(ours), set(others), set(decommissioning)
    why = triggers(brokers, partitions, now_ms=now_ms, grace_ms=config.unavailable_grace_ms,
                   decommissioning=decom, disk_skew_percent=config.disk_skew_percent)
    if not why:
        return Decision([], [])
    if paused:
        return Decision(why, [], "paused")
    if others:
        return Decision(why, [], f"waiting for {len(others)} reassignments started by an operator")
    budget = config.max_concurrent_moves - len(ours)
    if budget <= 0:
        return Decision(why, [], f"{len(ours)} moves in flight (balancer.max.concurrent.moves)")
    excluded = excluded_brokers(brokers, now_ms, config.unavailable_grace_ms, decom)
    # A broker away but within its grace time may come back: its partitions stay as they are (a move
    # would wait on it, since every target replica must join the ISR).
    waiting = {b.id for b in brokers if not b.alive and b.id not in excluded}
    locked = ours | {p.tp for p in partitions if waiting.intersection(p.replicas)}
    moves = plan(brokers, partitions, excluded=excluded, in_progress=locked, max_moves=budget,
                 disk_skew_percent=config.disk_skew_percent)
    return Decision(why, moves, "" if moves else "no move improves the goals now")


def partition_sizes(log_dirs: Any, leaders: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
    """Each partition's size from a ``LogDirsView``: its leader's copy, else the largest copy reported."""
    by: dict[TopicPartition, dict[int, int]] = {}
    for b in log_dirs.brokers:
        for p in b.partitions:
            by.setdefault(TopicPartition(p.topic, p.partition), {})[b.broker] = p.size
    return {tp: sizes.get(leaders.get(tp, -1), max(sizes.values())) for tp, sizes in by.items()}


# -- the loop -------------------------------------------------------------------------------------------

@dataclass
class InFlight:
    tp: TopicPartition
    replicas: list[int]
    goal: str
    adding: list[int]
    existing: list[int]
    started_ms: int

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.tp.topic, "partition": self.tp.partition, "replicas": self.replicas, "goal": self.goal,
                "adding": self.adding, "existing": self.existing, "started_ms": self.started_ms}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> InFlight:
        return cls(TopicPartition(d["topic"], int(d["partition"])), list(d["replicas"]), d["goal"],
                   list(d.get("adding", [])), list(d.get("existing", [])), int(d.get("started_ms", 0)))


@dataclass
class Throttled:
    brokers: list[int] = field(default_factory=list)
    topics: list[str] = field(default_factory=list)
    rate: int = 0


def balancer_key(store: Any, name: str) -> bytes:
    return f"{store.keys.root}balancer/{name}".encode()


def decommissioning_prefix(store: Any) -> bytes:
    return balancer_key(store, "decommissioning/")


def internal_context() -> RequestContext:
    return RequestContext("balancer", "controller-balancer", "controller", "", time.monotonic())


class BalancerLoop:
    """``api`` is the controller's ``ControllerApi`` (store, election, partition controller)."""

    def __init__(self, api: Any, config: BalancerConfig, is_active: Callable[[], bool], *,
                 clock_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        self.api = api
        self.config = config
        self.is_active = is_active
        self.clock_ms = clock_ms
        self.away = AwayTracker()
        self.last_check_ms: int | None = None
        self.last_triggers: list[str] = []
        self.last_plan: list[Move] = []
        self.last_plan_ms: int | None = None
        self.last_idle = ""
        self.last_error = ""
        self.in_flight: dict[TopicPartition, InFlight] = {}
        self.started = 0
        self.completed = 0
        self.paused = False
        self._next_ms = 0
        self._topic_throttles: dict[str, dict[str, str]] | None = None
        obs = getattr(api.partitions, "observer", None)
        if obs is not None:
            obs.reassigning = lambda: len(api.partitions.reassigning)
            obs.balancer_paused = lambda: int(self.paused)

    # -- etcd state --

    async def read_paused(self) -> bool:
        got = await self.api.store.get(balancer_key(self.api.store, "paused"))
        return bool(got and got[0].get("paused"))

    async def read_state(self) -> tuple[dict[TopicPartition, InFlight], Throttled, int | None]:
        got = await self.api.store.get(balancer_key(self.api.store, "moves"))
        if got is None:
            return {}, Throttled(), None
        moves = {m.tp: m for m in (InFlight.from_json(d) for d in got[0].get("moves", []))}
        t = got[0].get("throttled", {})
        return moves, Throttled(list(t.get("brokers", [])), list(t.get("topics", [])), int(t.get("rate", 0))), got[2]

    async def write_state(self, moves: Mapping[TopicPartition, InFlight], throttled: Throttled, rev: int | None) -> int:
        store = self.api.store
        key = balancer_key(store, "moves")
        value = {"moves": [m.to_json() for m in moves.values()],
                 "throttled": {"brokers": throttled.brokers, "topics": throttled.topics, "rate": throttled.rate}}
        guard = store.cmp_mod_revision(key, rev) if rev is not None else store.cmp_absent(key)
        await self.api.election.write([store.op_put(key, value)], [guard], "balancer state changed concurrently")
        got = await store.get(key)
        return got[2] if got else 0

    async def read_decommissioning(self) -> dict[int, int]:
        """Broker id -> mod revision of its mark."""
        prefix = decommissioning_prefix(self.api.store)
        snap = await self.api.store.get_prefix(prefix)
        return {int(k.decode()[len(prefix):]): mod for k, (_, _, mod) in snap.items()}

    # -- one check --

    async def sizes(self, leaders: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        from services.controller.api.describe_log_dirs import DescribeLogDirs, describe_log_dirs
        try:
            view = await describe_log_dirs(self.api, internal_context(), DescribeLogDirs())
        except Exception as exc:  # sizes are the last goal: plan by counts without them
            log.info("balancer: disk use unknown", extra={"error": str(exc)})
            return {}
        return partition_sizes(view, leaders)

    async def check(self) -> Decision:
        now = self.clock_ms()
        self.last_check_ms = now
        store, parts_ctl = self.api.store, self.api.partitions
        self.paused = await self.read_paused()
        topics, states, live = await parts_ctl.load()
        ongoing = await parts_ctl.load_reassignments()
        snap = await store.get_prefix(store.keys.brokers_prefix())
        registered = {int(v["id"]): v.get("rack") for v, _, _ in snap.values()}
        moves, throttled, rev = await self.read_state()
        done = [tp for tp in moves if tp not in ongoing or ongoing[tp][0].target != moves[tp].replicas]
        for tp in done:
            self._completed(moves.pop(tp))
        assignment = {TopicPartition(t.name, p): list(r) for t in topics.values() for p, r in t.assignment.items()}
        known = {b for reps in assignment.values() for b in reps}
        brokers = self.away.views(registered, live, known, now)
        decom = await self.read_decommissioning()
        for b, mod in decom.items():  # gone and empty: the decommission is over
            if b not in registered and b not in known:
                await self.api.election.write([store.op_delete(balancer_key(store, f"decommissioning/{b}"))],
                                              [store.cmp_mod_revision(balancer_key(store, f"decommissioning/{b}"), mod)])
        leaders = {tp: st.leader for tp, (st, _) in states.items()}
        sizes = await self.sizes(leaders)
        views = [PartitionView(tp, tuple(r), sizes.get(tp, 0)) for tp, r in sorted(assignment.items())]
        decision = decide(brokers, views, now_ms=now, config=self.config, paused=self.paused, ours=set(moves),
                          others=set(ongoing) - set(moves), decommissioning=decom)
        self.last_triggers, self.last_idle = decision.triggers, decision.why_idle
        if decision.moves:
            self.last_plan, self.last_plan_ms = decision.moves, now
            moves.update(await self.apply(decision.moves, assignment, now))
        if done or decision.moves:  # recorded before throttling: a failure there leaves them ours
            rev = await self.write_state(moves, throttled, rev)
        self.in_flight = moves
        before = throttled
        throttled = await self.throttle(moves, throttled)
        if throttled != before:
            await self.write_state(moves, throttled, rev)
        return decision

    def _completed(self, m: InFlight) -> None:
        self.completed += 1
        obs = getattr(self.api.partitions, "observer", None)
        if obs is not None and hasattr(obs, "balancer_moves"):
            obs.balancer_moves("completed", m.goal)
        log.info("balancer move done", extra={"tp": str(m.tp), "goal": m.goal, "replicas": str(m.replicas)})

    async def apply(self, moves: list[Move], assignment: Mapping[TopicPartition, list[int]],
                    now: int) -> dict[TopicPartition, InFlight]:
        """Start the moves as reassignments (all or none); the ones still in flight after the call."""
        from services.controller.api.alter_partition_reassignments import (
            PlanPartition,
            ReassignmentPlan,
            alter_partition_reassignments,
        )
        request = ReassignmentPlan(partitions=[PlanPartition(topic=m.tp.topic, partition=m.tp.partition,
                                                             replicas=list(m.replicas)) for m in moves])
        result = await alter_partition_reassignments(self.api, internal_context(), request)
        done = {TopicPartition(p.topic, p.partition) for p in result.partitions if p.done}
        obs = getattr(self.api.partitions, "observer", None)
        out: dict[TopicPartition, InFlight] = {}
        for m in moves:
            self.started += 1
            if obs is not None and hasattr(obs, "balancer_moves"):
                obs.balancer_moves("started", m.goal)
            existing = list(assignment.get(m.tp, []))
            flight = InFlight(m.tp, list(m.replicas), m.goal, [b for b in m.replicas if b not in existing],
                              existing, now)
            if m.tp in done:
                self._completed(flight)
            else:
                out[m.tp] = flight
        log.info("balancer moves started", extra={"moves": len(moves), "goals": str(sorted({m.goal for m in moves})),
                                                  "in_flight": len(out)})
        return out

    async def throttle(self, moves: Mapping[TopicPartition, InFlight], current: Throttled) -> Throttled:
        """Throttle the moving replicas' traffic; clear what the balancer set once nothing moves. What could
        not be cleared stays recorded (the next check tries again); what is set is recorded even if a
        later write fails."""
        from services.controller.api.alter_configs import AlterTopicConfigs, alter_configs
        from services.controller.api.broker_configs import AlterBrokerConfigsOf, alter_broker_configs
        ctx = internal_context()

        async def attempt(what: str, call: Any) -> bool:
            try:
                await call
                return True
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a topic deleted meanwhile, a conflict: the next check tries again
                log.info("balancer: throttle not changed", extra={"on": what, "error": str(exc)})
                return False

        rate = self.config.throttle_bytes_per_second
        data = {tp: (m.adding, m.existing) for tp, m in moves.items() if m.adding}
        if not data or rate <= 0:
            left = Throttled(rate=current.rate)
            for b in current.brokers:
                if not await attempt(f"broker {b}", alter_broker_configs(
                        self.api, ctx, AlterBrokerConfigsOf(str(b), {LEADER_RATE: None, FOLLOWER_RATE: None}))):
                    left.brokers.append(b)
            for t in current.topics:
                if not await attempt(f"topic {t}", alter_configs(
                        self.api, ctx, AlterTopicConfigs(t, {LEADER_REPLICAS: None, FOLLOWER_REPLICAS: None}))):
                    left.topics.append(t)
            self._topic_throttles = None
            return left if left.brokers or left.topics else Throttled()
        brokers, topics = throttle_plan({(tp.topic, tp.partition): v for tp, v in data.items()})
        out = Throttled(sorted(brokers | set(current.brokers)), sorted(set(topics) | set(current.topics)), rate)
        for b in out.brokers:
            if b not in current.brokers or current.rate != rate:
                await attempt(f"broker {b}", alter_broker_configs(
                    self.api, ctx, AlterBrokerConfigsOf(str(b), {LEADER_RATE: rate, FOLLOWER_RATE: rate})))
        if topics != self._topic_throttles:
            ok = [await attempt(f"topic {t}", alter_configs(self.api, ctx, AlterTopicConfigs(t, dict(configs))))
                  for t, configs in topics.items()]
            self._topic_throttles = topics if all(ok) else None
        return out

    # -- running --

    async def run(self, tick_s: float = 0.5) -> None:
        if not self.config.enable:
            return
        while True:
            await asyncio.sleep(min(tick_s, self.config.check_interval_ms / 1000))
            if not self.is_active():
                self.away.reset()
                self._next_ms = 0
                continue
            now = self.clock_ms()
            if self._next_ms == 0:
                self._next_ms = now + self.config.check_interval_ms  # a newly active controller waits one interval
            if now < self._next_ms:
                continue
            self._next_ms = now + self.config.check_interval_ms
            try:
                await self.check()
                self.last_error = ""
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # fenced, conflict, a broker gone meanwhile: the next check tries again
                self.last_error = f"{type(exc).__name__}: {exc}"
                log.info("balancer check failed", extra={"error": self.last_error})

