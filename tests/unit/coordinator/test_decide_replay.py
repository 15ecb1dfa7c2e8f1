"""Decide, then replay: whatever a shard is asked (heartbeats, commits, leaves, timeouts, topic
growth, deletes), replaying every record it emitted into a fresh shard gives the same state."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.coordinator import records as r
from services.coordinator.config import GroupConfig
from services.coordinator.group import (
    MEMBER_TRANSITIONS,
    STABLE,
    UNKNOWN,
    UNRELEASED_PARTITIONS,
    UNREVOKED_PARTITIONS,
    GroupError,
    IllegalTransition,
    Member,
    Step,
    next_assignment,
    transition,
)
from services.coordinator.membership import HeartbeatRequest
from services.coordinator.records import MemberState
from services.coordinator.shard import GroupShard, OffsetCommit
from shared.errors import ErrorCode
from shared.types import TopicPartition as TP

SESSION = 10_000
T_ID = "00000000000000000000000000000001"
U_ID = "00000000000000000000000000000002"
SUBSCRIPTIONS: list[tuple[tuple[str, ...], str | None]] = [(("t",), None), (("u",), None), (("t", "u"), None),
                                                            ((), "[tu]"), (("t",), None)]
GROUPS = ("g", "h")


@dataclass
class Client:
    """What a consumer knows of itself: its id, epoch, instance id, what it owns."""

    member_id: str = ""
    epoch: int = 0
    instance: str | None = None
    owned: set[TP] = field(default_factory=set)
    #: what it owned before its last response (a slow client has not released it yet)
    before: set[TP] = field(default_factory=set)
    sub: int = 0


class World:
    def __init__(self) -> None:
        ids = (f"m{i}" for i in itertools.count())
        self.shard = GroupShard(0, GroupConfig(session_timeout_ms=SESSION, heartbeat_interval_ms=1000),
                                new_member_id=lambda: next(ids))
        self.u_partitions = 2
        self.log: list[tuple[bytes, bytes | None]] = []
        self.log.extend(self.shard.set_topics(self.topics()))
        self.now = 1_000
        self.clients: dict[tuple[str, int], Client] = {}

    def topics(self) -> dict[str, tuple[str, int]]:
        return {"t": (T_ID, 4), "u": (U_ID, self.u_partitions)}

    def written(self, recs: list[tuple[bytes, bytes | None]]) -> None:
        """The records are committed: log them, replay the offsets among them (as the api layer does)."""
        self.log.extend(recs)
        self.shard.apply_offsets(recs)

    def heartbeat(self, group: str, slot: int, kind: str, sub: int, release: bool) -> None:
        c = self.clients.setdefault((group, slot), Client(instance=f"i{slot}" if slot % 2 else None))
        if kind == "sub":
            c.sub = sub
        topics, regex = SUBSCRIPTIONS[c.sub]
        epoch = {"leave": -1, "static-leave": -2, "rejoin": 0}.get(kind, c.epoch)
        member_id = "" if kind == "rejoin" and c.instance is not None else c.member_id
        if kind == "rejoin" and c.instance is None:
            member_id, epoch = "", 0
        owned = set(c.owned) if release else c.owned | c.before
        req = HeartbeatRequest(group, member_id, epoch, c.instance, subscribed_topic_names=list(topics),
                               subscribed_topic_regex=regex, owned=owned, rebalance_timeout_ms=5_000)
        try:
            res, recs = self.shard.heartbeat(req, self.now)
        except GroupError:
            return
        self.written(recs)
        c.member_id, c.epoch = res.member_id, max(res.member_epoch, 0)
        c.before = owned
        c.owned = set(res.assignment) if res.assignment is not None else set()

    def round(self, group: str, release: bool) -> None:
        """Every client of the group heartbeats once (the group converges over a few rounds)."""
        for (g, slot), c in list(self.clients.items()):
            if g == group and c.member_id:
                self.heartbeat(group, slot, "beat", c.sub, release)

    def commit(self, group: str, slot: int, partition: int, offset: int, admin: bool) -> None:
        c = self.clients.get((group, slot), Client())
        member_id, epoch = ("", -1) if admin else (c.member_id, c.epoch)
        try:
            _, recs = self.shard.commit_offsets(group, member_id, epoch, [OffsetCommit(TP("t", partition), offset)],
                                                self.now)
        except GroupError:
            return
        self.written(recs)

    def advance(self, ms: int) -> None:
        self.now += ms
        self.written(self.shard.expire(self.now))

    def grow(self) -> None:
        self.u_partitions += 1
        self.written(self.shard.set_topics(self.topics()))

    def delete(self, group: str, offsets_only: bool) -> None:
        try:
            if offsets_only:
                _, recs = self.shard.delete_offsets(group, [TP("t", 0), TP("t", 1)])
            else:
                recs = self.shard.delete_group(group)
        except GroupError:
            return
        self.written(recs)

    def loaded(self) -> GroupShard:
        fresh = GroupShard(0, self.shard.config)
        fresh.set_topics(self.topics())
        for key, value in self.log:
            fresh.replay(key, value)
        return fresh


group_ids = st.sampled_from(GROUPS[:1] * 4 + GROUPS[1:])  # mostly one group, so that it gets busy
slots = st.integers(0, 3)
heartbeats = st.tuples(st.just("heartbeat"), group_ids, slots,
                       st.sampled_from(["beat"] * 6 + ["sub", "leave", "static-leave", "rejoin"]),
                       st.integers(0, len(SUBSCRIPTIONS) - 1), st.integers(0, 5).map(bool))
operations = st.one_of(
    heartbeats, heartbeats, heartbeats, heartbeats,
    st.tuples(st.just("round"), group_ids, st.integers(0, 3).map(bool)),
    st.tuples(st.just("commit"), group_ids, slots, st.integers(0, 3), st.integers(0, 1000), st.booleans()),
    st.tuples(st.just("advance"), st.sampled_from([100, 1_000, 1_000, 6_000, SESSION + 1])),
    st.tuples(st.just("grow")),
    st.tuples(st.just("delete"), group_ids, st.booleans()),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(operations, min_size=15, max_size=80))
def test_replaying_every_emitted_record_gives_the_same_state(ops: list[tuple[object, ...]]) -> None:
    w = World()
    for op in ops:
        name, *args = op
        getattr(w, str(name))(*args)
    assert w.loaded().dump() == w.shard.dump()


def test_a_rebalance_replays_to_the_same_state() -> None:
    """A fixed walk through revoke-then-assign, a static leave and rejoin, and a session timeout."""
    w = World()
    for slot in range(3):
        w.heartbeat("g", slot, "beat", 0, True)
    for _ in range(4):
        for slot in range(3):
            w.heartbeat("g", slot, "beat", 0, True)
    w.heartbeat("g", 1, "static-leave", 0, True)
    w.heartbeat("g", 1, "rejoin", 0, True)
    w.commit("g", 0, 0, 5, False)
    w.advance(SESSION + 1)
    group = w.shard.groups["g"]
    assert not group.members and group.epoch > 0
    assert w.loaded().dump() == w.shard.dump()


def test_member_transitions_are_a_table() -> None:
    assert transition(STABLE, Step.REVOKE) == UNREVOKED_PARTITIONS
    assert transition(UNREVOKED_PARTITIONS, Step.WAIT_FOR_RELEASE) == UNREVOKED_PARTITIONS
    assert transition(UNREVOKED_PARTITIONS, Step.ASSIGN_SOME) == UNRELEASED_PARTITIONS
    assert transition(UNRELEASED_PARTITIONS, Step.ASSIGN_ALL) == STABLE
    assert transition(UNREVOKED_PARTITIONS, Step.REVOCATION_TIMED_OUT) == UNKNOWN
    for state, step in [(STABLE, Step.WAIT_FOR_RELEASE), (STABLE, Step.REVOCATION_TIMED_OUT),
                        (UNRELEASED_PARTITIONS, Step.WAIT_FOR_RELEASE)]:
        with pytest.raises(IllegalTransition):
            transition(state, step)
    assert {s for s, _ in MEMBER_TRANSITIONS} == set(MemberState)
    assert not [step for (s, step) in MEMBER_TRANSITIONS if s == UNKNOWN and step == Step.REVOKE]


def test_an_unknown_state_code_loads_as_unknown_and_the_member_is_fenced_until_it_owns_nothing() -> None:
    w = World()
    w.heartbeat("g", 0, "beat", 0, True)
    w.heartbeat("g", 0, "beat", 0, True)
    c = w.clients[("g", 0)]
    key = next(k for k, v in reversed(w.log) if k[:2] == b"\x00\x08" and v is not None)
    value = r.encode_current(r.CurrentAssignmentValue(c.epoch, 0, r.MemberState.STABLE, {T_ID: [0, 1, 2, 3]}))
    future = value[:10] + bytes([5]) + value[11:]  # a state code of a later version
    assert r.decode_current(future).state == UNKNOWN
    w.written([(key, future)])
    w.shard.replay(key, future)
    with pytest.raises(GroupError) as err:
        w.shard.heartbeat(HeartbeatRequest("g", c.member_id, c.epoch, owned=c.owned, subscribed_topic_names=["t"],
                                           rebalance_timeout_ms=5_000), w.now)
    assert err.value.code == ErrorCode.FENCED_MEMBER_EPOCH
    res, recs = w.shard.heartbeat(HeartbeatRequest("g", c.member_id, c.epoch, owned=set(),
                                                   subscribed_topic_names=["t"], rebalance_timeout_ms=5_000), w.now)
    w.written(recs)
    assert w.shard.groups["g"].members[c.member_id].state == STABLE and len(res.assignment or ()) == 4
    assert w.loaded().dump() == w.shard.dump()


def test_next_assignment_revokes_before_it_assigns() -> None:
    a = Member("a", assigned={TP("t", 0), TP("t", 1)}, epoch=3)
    b = Member("b", epoch=3)
    members = {"a": a, "b": b}
    step1 = next_assignment(b, {TP("t", 1)}, 4, members, set())
    assert (step1.epoch, step1.previous_epoch, step1.state, step1.assigned) == (4, 3, UNRELEASED_PARTITIONS, frozenset())
    step2 = next_assignment(a, {TP("t", 0)}, 4, members, {TP("t", 0), TP("t", 1)})
    assert (step2.epoch, step2.state, step2.assigned, step2.pending_revocation) == (
        3, UNREVOKED_PARTITIONS, {TP("t", 0)}, {TP("t", 1)})
    a.state, a.assigned, a.pending_revocation = step2.state, set(step2.assigned), set(step2.pending_revocation)
    assert next_assignment(a, {TP("t", 0)}, 4, members, {TP("t", 0), TP("t", 1)}) == a.current()  # not released yet
    step3 = next_assignment(a, {TP("t", 0)}, 4, members, {TP("t", 0)})
    assert (step3.epoch, step3.previous_epoch, step3.state, step3.pending_revocation) == (4, 3, STABLE, frozenset())


def test_a_member_that_does_not_revoke_in_time_is_fenced() -> None:
    w = World()
    w.heartbeat("g", 0, "beat", 0, True)
    w.heartbeat("g", 2, "beat", 0, True)
    w.heartbeat("g", 0, "beat", 0, True)  # told to revoke half
    first = w.clients[("g", 0)].member_id
    assert w.shard.groups["g"].members[first].state == UNREVOKED_PARTITIONS
    for _ in range(6):  # keeps heartbeating while still owning the revoked partitions
        w.now += 1_000
        w.heartbeat("g", 0, "beat", 0, False)
        w.heartbeat("g", 2, "beat", 0, True)
        w.written(w.shard.expire(w.now))
    assert first not in w.shard.groups["g"].members
    assert w.loaded().dump() == w.shard.dump()
