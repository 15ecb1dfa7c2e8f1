"""The balancer loop's decisions (``services/controller/balancer_loop.py``) with an injected clock: paused
does nothing, triggers start moves bounded by the moves in flight, an operator's reassignment goes first,
a broker away is waited for until its grace time is over; and one check against an in-memory store."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from services.controller.balancer import BrokerView, PartitionView
from services.controller.balancer_loop import (
    AwayTracker,
    BalancerConfig,
    BalancerLoop,
    InFlight,
    Throttled,
    balancer_key,
    decide,
    partition_sizes,
)
from shared.metadata.keys import Keys
from shared.metadata.types import PartitionState, ReassignmentRecord, TopicRecord
from shared.types import TopicPartition

CONFIG = BalancerConfig(enable=True, max_concurrent_moves=4, throttle_bytes_per_second=1000,
                        unavailable_grace_ms=10_000, disk_skew_percent=20.0, check_interval_ms=1000)


def tp(p: int) -> TopicPartition:
    return TopicPartition("t", p)


def three_full_two_empty() -> tuple[list[BrokerView], list[PartitionView]]:
    brokers = [BrokerView(b) for b in (1, 2, 3, 4, 5)]
    parts = [PartitionView(tp(p), ((p % 3) + 1, ((p + 1) % 3) + 1)) for p in range(12)]
    return brokers, parts


def test_balanced_cluster_has_no_triggers_and_no_moves() -> None:
    parts = [PartitionView(tp(p), ((p % 3) + 1, ((p + 1) % 3) + 1)) for p in range(12)]
    d = decide([BrokerView(b) for b in (1, 2, 3)], parts, now_ms=0, config=CONFIG, paused=False, ours=(), others=())
    assert d.triggers == [] and d.moves == []


def test_paused_sees_the_triggers_and_moves_nothing() -> None:
    brokers, parts = three_full_two_empty()
    d = decide(brokers, parts, now_ms=0, config=CONFIG, paused=True, ours=(), others=())
    assert d.triggers and "joined" in d.triggers[0]
    assert d.moves == [] and d.why_idle == "paused"


def test_moves_are_bounded_by_the_moves_in_flight() -> None:
    brokers, parts = three_full_two_empty()
    d = decide(brokers, parts, now_ms=0, config=CONFIG, paused=False, ours=(), others=())
    assert len(d.moves) == 4 and all(m.goal == "replicas" for m in d.moves)
    assert all({4, 5} & set(m.replicas) for m in d.moves)
    d = decide(brokers, parts, now_ms=0, config=CONFIG, paused=False, ours={tp(0)}, others=())
    assert len(d.moves) == 3 and tp(0) not in {m.tp for m in d.moves}  # a partition in flight is left alone
    d = decide(brokers, parts, now_ms=0, config=CONFIG, paused=False, ours={tp(0), tp(1), tp(2), tp(3)}, others=())
    assert d.moves == [] and "in flight" in d.why_idle


def test_an_operators_reassignment_goes_first() -> None:
    brokers, parts = three_full_two_empty()
    d = decide(brokers, parts, now_ms=0, config=CONFIG, paused=False, ours=(), others={tp(5)})
    assert d.moves == [] and "operator" in d.why_idle


def test_a_broker_away_is_waited_for_until_the_grace_time_is_over() -> None:
    now = [0]
    away = AwayTracker()
    parts = [PartitionView(tp(p), ((p % 3) + 1, ((p + 1) % 3) + 1)) for p in range(12)]
    racks = {1: None, 2: None, 3: None}
    assert all(v.alive for v in away.views(racks, {1, 2, 3}, {1, 2, 3}, now[0]))
    now[0] = 1_000  # broker 3 is gone (its lease expired)
    views = away.views({1: None, 2: None}, {1, 2}, {1, 2, 3}, now[0])
    assert [(v.id, v.alive, v.away_since_ms) for v in views] == [(1, True, None), (2, True, None), (3, False, 1_000)]
    now[0] = 1_000 + CONFIG.unavailable_grace_ms - 1
    views = away.views({1: None, 2: None}, {1, 2}, {1, 2, 3}, now[0])
    d = decide(views, parts, now_ms=now[0], config=CONFIG, paused=False, ours=(), others=())
    assert d.moves == []  # within the grace time: it may come back
    now[0] += 1
    views = away.views({1: None, 2: None}, {1, 2}, {1, 2, 3}, now[0])
    d = decide(views, parts, now_ms=now[0], config=CONFIG, paused=False, ours=(), others=())
    assert any("excluded" in t for t in d.triggers)
    assert d.moves and all(m.goal == "availability" and 3 not in m.replicas for m in d.moves)
    # Back before being forgotten: alive again, no away time.
    views = away.views({1: None, 2: None, 3: None}, {1, 2, 3}, {1, 2, 3}, now[0] + 5)
    assert all(v.alive and v.away_since_ms is None for v in views)
    away.reset()
    assert away.away_since == {}


def test_a_decommissioning_broker_is_emptied() -> None:
    parts = [PartitionView(tp(p), ((p % 3) + 1, ((p + 1) % 3) + 1)) for p in range(6)]
    brokers = [BrokerView(b) for b in (1, 2, 3, 4)]
    d = decide(brokers, parts, now_ms=0, config=CONFIG, paused=False, ours=(), others=(), decommissioning={4, 3})
    assert any("excluded" in t for t in d.triggers) or d.moves
    assert all(3 not in m.replicas and 4 not in m.replicas for m in d.moves)


def test_partition_sizes_take_the_leaders_copy() -> None:
    view = SimpleNamespace(brokers=[
        SimpleNamespace(broker=1, partitions=[SimpleNamespace(topic="t", partition=0, size=100)]),
        SimpleNamespace(broker=2, partitions=[SimpleNamespace(topic="t", partition=0, size=90),
                                              SimpleNamespace(topic="t", partition=1, size=7)]),
    ])
    assert partition_sizes(view, {tp(0): 2, tp(1): 3}) == {tp(0): 90, tp(1): 7}


# -- one check against an in-memory store ------------------------------------------------------------------

class FakeStore:
    def __init__(self) -> None:
        self.keys = Keys("test")
        self.data: dict[bytes, tuple[Any, int, int]] = {}
        self.rev = 0

    async def get(self, key: bytes) -> tuple[Any, int, int] | None:
        return self.data.get(key)

    async def get_prefix(self, prefix: bytes) -> dict[bytes, tuple[Any, int, int]]:
        return {k: v for k, v in self.data.items() if k.startswith(prefix)}

    def put(self, key: bytes, value: Any) -> None:
        self.rev += 1
        self.data[key] = (value, self.rev, self.rev)

    def op_put(self, key: bytes, value: Any) -> Any:
        return ("put", key, value)

    def op_delete(self, key: bytes) -> Any:
        return ("delete", key, None)

    def cmp_mod_revision(self, key: bytes, rev: int) -> Any:
        return ("rev", key, rev)

    def cmp_absent(self, key: bytes) -> Any:
        return ("absent", key, None)


class FakeElection:
    active = True

    def __init__(self, store: FakeStore) -> None:
        self.store = store

    async def write(self, ops: list[Any], compares: list[Any] = (), why: str = "") -> None:  # type: ignore[assignment]
        for kind, key, value in ops:
            if kind == "put":
                self.store.put(key, value)
            else:
                self.store.data.pop(key, None)


class FakePartitions:
    def __init__(self, topic: TopicRecord) -> None:
        self.topic = topic
        self.ongoing: dict[TopicPartition, tuple[ReassignmentRecord, int]] = {}
        self.reassigning: set[TopicPartition] = set()
        self.observer = None
        self.requests: list[Any] = []

    async def load(self) -> Any:
        states = {TopicPartition(self.topic.name, p): (PartitionState(r[0], 0, list(r), 0), 1)
                  for p, r in self.topic.assignment.items()}
        return {self.topic.name: self.topic}, states, {1, 2, 3, 4, 5}

    async def load_reassignments(self) -> dict[TopicPartition, tuple[ReassignmentRecord, int]]:
        return dict(self.ongoing)

    async def alter_reassignments(self, requests: list[Any]) -> dict[Any, Any]:
        from services.controller.reassignment import Step
        self.requests.extend(requests)
        out = {}
        for t, target in requests:
            old = self.topic.assignment[t.partition]
            r = ReassignmentRecord(list(target), [b for b in target if b not in old], [b for b in old if b not in target])
            self.ongoing[t] = (r, 1)
            out[t] = Step(old + r.adding, PartitionState(old[0], 0, list(old), 1), r)
        return out


def _loop(paused: bool) -> tuple[BalancerLoop, FakeStore, FakePartitions, dict[str, Any]]:
    store = FakeStore()
    for b in (1, 2, 3, 4, 5):
        store.put(store.keys.broker(b), {"id": b, "address": f"127.0.0.1:{9000 + b}", "rack": None})
    if paused:
        store.put(balancer_key(store, "paused"), {"paused": True})
    topic = TopicRecord("t", "id", {p: [(p % 3) + 1, ((p + 1) % 3) + 1] for p in range(12)}, {})
    parts = FakePartitions(topic)
    configs: dict[str, Any] = {}
    api = SimpleNamespace(store=store, election=FakeElection(store), partitions=parts, active=True)
    loop = BalancerLoop(api, CONFIG, lambda: True, clock_ms=lambda: 5_000)

    async def no_sizes(leaders: Any) -> dict[TopicPartition, int]:
        return {}

    async def throttle(moves: Any, current: Any) -> Any:
        configs["moving"] = sorted(moves)
        return current

    loop.sizes = no_sizes  # type: ignore[method-assign]
    loop.throttle = throttle  # type: ignore[method-assign]
    return loop, store, parts, configs


def test_a_paused_check_writes_nothing() -> None:
    loop, store, parts, _ = _loop(paused=True)
    d = asyncio.run(loop.check())
    assert d.triggers and d.moves == [] and parts.requests == []
    assert loop.last_check_ms == 5_000 and loop.paused


def test_a_check_starts_moves_records_them_and_sees_them_complete() -> None:
    loop, store, parts, configs = _loop(paused=False)

    async def alter(api: Any, ctx: Any, request: Any) -> Any:
        steps = await parts.alter_reassignments([(TopicPartition(p.topic, p.partition), p.replicas)
                                                 for p in request.partitions])
        parts_out = [SimpleNamespace(topic=t.topic, partition=t.partition, done=False) for t in steps]
        return SimpleNamespace(partitions=parts_out)

    import services.controller.api.alter_partition_reassignments as alter_api
    original = alter_api.alter_partition_reassignments
    alter_api.alter_partition_reassignments = alter  # type: ignore[assignment]
    try:
        d = asyncio.run(loop.check())
        assert len(d.moves) == 4 and len(parts.requests) == 4 and loop.started == 4
        moves, _, _ = asyncio.run(loop.read_state())
        assert set(moves) == {m.tp for m in d.moves} and configs["moving"] == sorted(moves)
        assert all(isinstance(m, InFlight) and m.goal == "replicas" and m.adding for m in moves.values())
        # At the bound: the next check starts nothing.
        d2 = asyncio.run(loop.check())
        assert d2.moves == [] and len(parts.requests) == 4
        # Two moves complete (their reassignment records are gone): two more start.
        for t in list(moves)[:2]:
            parts.topic.assignment[t.partition] = list(moves[t].replicas)
            del parts.ongoing[t]
        d3 = asyncio.run(loop.check())
        assert loop.completed == 2 and len(d3.moves) == 2 and len(parts.requests) == 6
    finally:
        alter_api.alter_partition_reassignments = original  # type: ignore[assignment]


def test_metrics_reassigning_partitions_balancer_moves_and_paused() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from services.controller.metrics import ControllerObserver
    from shared.metrics import parse, total

    reg = CollectorRegistry()
    epoch = [3]
    obs = ControllerObserver(lambda: epoch[0], reg)
    loop, _, parts, _ = _loop(paused=True)
    parts.observer = obs  # type: ignore[assignment]
    loop = BalancerLoop(SimpleNamespace(store=loop.api.store, election=loop.api.election, partitions=parts),
                        CONFIG, lambda: True)
    parts.reassigning = {tp(0), tp(1)}
    loop.paused = True
    obs.balancer_moves("started", "replicas")
    obs.balancer_moves("started", "replicas")
    obs.balancer_moves("completed", "replicas")
    s = parse(generate_latest(reg).decode())
    assert total(s, "tidelog_controller_reassigning_partitions") == 2
    assert total(s, "tidelog_controller_balancer_paused") == 1
    assert total(s, "tidelog_controller_balancer_moves_total", event="started", goal="replicas") == 2
    assert total(s, "tidelog_controller_balancer_moves_total", event="completed") == 1
    epoch[0] = 0  # standby: the gauges say nothing
    s = parse(generate_latest(reg).decode())
    assert total(s, "tidelog_controller_reassigning_partitions") == 0


def test_the_throttle_is_set_on_the_moving_replicas_and_cleared_when_nothing_moves() -> None:
    loop, store, parts, _ = _loop(paused=False)
    del loop.throttle  # the real one (the helper replaced it on the instance)
    topic_configs: dict[str, dict[str, Any]] = {}

    class Topics:
        async def alter_configs(self, name: str, changes: dict[str, Any]) -> dict[str, Any]:
            cur = topic_configs.setdefault(name, {})
            for k, v in changes.items():
                if v is None:
                    cur.pop(k, None)
                else:
                    cur[k] = v
            return {"name": name, "topic_id": "id", "partitions": [], "replication_factor": 2, "configs": dict(cur),
                    "config_overrides": dict(cur)}

    loop.api.topic_manager = lambda: Topics()
    moving = {tp(0): InFlight(tp(0), [1, 4], "replicas", [4], [1, 2], 0)}
    t = asyncio.run(loop.throttle(moving, Throttled()))
    assert t.brokers == [1, 2, 4] and t.topics == ["t"] and t.rate == 1000
    for b in (1, 2, 4):
        assert store.data[store.keys.broker_config(str(b))][0] == {"leader.replication.throttled.rate": 1000,
                                                                  "follower.replication.throttled.rate": 1000}
    assert topic_configs["t"] == {"leader.replication.throttled.replicas": "0:1,0:2",
                                  "follower.replication.throttled.replicas": "0:4"}
    cleared = asyncio.run(loop.throttle({}, t))
    assert cleared.brokers == [] and cleared.topics == []
    assert all(store.keys.broker_config(str(b)) not in store.data for b in (1, 2, 4))
    assert topic_configs["t"] == {}
