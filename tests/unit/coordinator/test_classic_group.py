"""The classic group protocol (JoinGroup/SyncGroup/Heartbeat/LeaveGroup) on one shard, driven with a
fake clock: every call's decisions are collected, parked requests are answered through them."""

from __future__ import annotations

import itertools
import random
import struct

import pytest
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription

from services.coordinator import classic_records as cr
from services.coordinator import records as r
from services.coordinator.classic_group import COMPLETING_REBALANCE, EMPTY, PREPARING_REBALANCE, STABLE
from services.coordinator.classic_messages import (
    Decisions,
    JoinRequest,
    JoinResponse,
    LeaveMember,
    SyncRequest,
    SyncResponse,
)
from services.coordinator.config import GroupConfig
from services.coordinator.consumer_protocol import assigned_partitions, subscribed_topics
from services.coordinator.group import GroupError
from services.coordinator.membership import HeartbeatRequest
from services.coordinator.shard import GroupShard, OffsetCommit
from shared.errors import ErrorCode
from shared.types import TopicPartition as TP

SESSION = 10_000
REBALANCE = 30_000
DELAY = 3_000
RANGE = [("range", b"meta")]


def subscription(*topics: str) -> bytes:
    return ConsumerProtocolSubscription(version=0, topics=list(topics), user_data=None).encode()


def assignment(topic: str, *partitions: int) -> bytes:
    return ConsumerProtocolAssignment(version=0, assigned_partitions=[(topic, list(partitions))], user_data=b"").encode()


class Harness:
    def __init__(self, delay: int = DELAY, **config: int) -> None:
        uuids = (f"u{i}" for i in itertools.count())
        self.shard = GroupShard(0, GroupConfig(classic_initial_rebalance_delay_ms=delay, **config),
                                new_uuid=lambda: next(uuids))
        self.shard.set_topics({"t": ("00000000000000000000000000000001", 6)})
        self.now = 0
        self.log: list[tuple[bytes, bytes | None]] = []
        self.joins: dict[int, JoinResponse] = {}
        self.syncs: dict[int, SyncResponse] = {}
        self.answered: list[int] = []  # every ticket answered, in order (each must appear once)
        self.generation: dict[str, int] = {}

    def take(self, d: Decisions) -> None:
        self.log.extend(d.records)
        self.answered.extend([*d.joins, *d.syncs])
        self.joins.update(d.joins)
        self.syncs.update(d.syncs)
        for resp in d.joins.values():
            if resp.error == ErrorCode.NONE:
                self.generation[resp.member_id] = resp.generation_id

    def join(self, member: str = "", client: str = "c", instance: str | None = None,
             protocols: list[tuple[str, bytes]] | None = None, version: int = 9, group: str = "g",
             protocol_type: str = "consumer", session: int = SESSION) -> JoinResponse | int:
        req = JoinRequest(group, member, instance, protocol_type, RANGE if protocols is None else protocols,
                          session, REBALANCE, client, "/127.0.0.1", api_version=version)
        answer, d = self.shard.join_group(req, self.now)
        self.take(d)
        return answer

    def join_new(self, client: str, **kw: object) -> int:
        """A dynamic member's two JoinGroups (MEMBER_ID_REQUIRED, then with its id): the parked ticket."""
        first = self.join(client=client, **kw)  # type: ignore[arg-type]
        assert isinstance(first, JoinResponse) and first.error == ErrorCode.MEMBER_ID_REQUIRED, first
        ticket = self.join(first.member_id, client=client, **kw)  # type: ignore[arg-type]
        assert isinstance(ticket, int)
        return ticket

    def sync(self, member: str, generation: int | None = None, assignments: dict[str, bytes] | None = None,
             instance: str | None = None) -> SyncResponse | int:
        gen = self.generation.get(member, -1) if generation is None else generation
        answer, d = self.shard.sync_group(SyncRequest("g", member, gen, instance, assignments=assignments or {}), self.now)
        self.take(d)
        return answer

    def heartbeat(self, member: str, generation: int | None = None, instance: str | None = None) -> ErrorCode:
        gen = self.generation.get(member, -1) if generation is None else generation
        return self.shard.classic_heartbeat("g", member, instance, gen, self.now)

    def leave(self, *members: LeaveMember) -> list[ErrorCode]:
        error, codes, d = self.shard.leave_group("g", list(members), self.now)
        assert error == ErrorCode.NONE
        self.take(d)
        return codes

    def tick(self, ms: int) -> None:
        self.now += ms
        self.take(self.shard.expire_classic(self.now))

    def commit(self, member: str, generation: int, instance: str | None = None) -> dict[TP, int]:
        errors, recs = self.shard.commit_offsets("g", member, generation, [OffsetCommit(TP("t", 0), 5)], self.now,
                                                 instance)
        self.shard.apply_offsets(recs)
        self.log.extend(recs)
        return errors

    def group(self):  # type: ignore[no-untyped-def]
        return self.shard.classic.groups["g"]

    def stable_pair(self) -> tuple[str, str]:
        """Two dynamic members a (leader) and b, Stable at generation 1 with assignments."""
        ta, tb = self.join_new("a"), self.join_new("b")
        self.tick(DELAY)
        self.tick(DELAY)  # b extended the initial delay once
        a, b = self.joins[ta].member_id, self.joins[tb].member_id
        assert self.sync(b) is not None and self.sync(a, assignments={a: assignment("t", 0), b: assignment("t", 1)})
        assert self.group().state == STABLE
        return a, b


def test_member_id_required_then_the_initial_delay_then_leader_gets_metadata() -> None:
    h = Harness()
    first = h.join(client="app")
    assert isinstance(first, JoinResponse) and first.error == ErrorCode.MEMBER_ID_REQUIRED
    assert first.member_id == "app-u0"  # <client.id>-<uuid>
    ticket = h.join(first.member_id, client="app")
    assert isinstance(ticket, int) and ticket not in h.joins  # parked for group.initial.rebalance.delay.ms
    h.tick(DELAY - 1)
    assert ticket not in h.joins and h.group().state == PREPARING_REBALANCE
    h.tick(1)
    resp = h.joins[ticket]
    assert (resp.error, resp.generation_id, resp.leader, resp.protocol_type, resp.protocol_name) == (
        ErrorCode.NONE, 1, "app-u0", "consumer", "range")
    assert [(m.member_id, m.metadata) for m in resp.members] == [("app-u0", b"meta")]
    assert h.group().state == COMPLETING_REBALANCE
    done = h.sync("app-u0", assignments={"app-u0": b"A"})
    assert isinstance(done, int) and h.syncs[done].assignment == b"A" and h.group().state == STABLE


def test_join_before_v4_needs_no_member_id_round_trip() -> None:
    h = Harness(delay=0)
    ticket = h.join(client="old", version=3)
    assert isinstance(ticket, int)
    h.tick(0)
    assert h.joins[ticket].member_id == "old-u0" and h.joins[ticket].generation_id == 1


def test_followers_get_no_metadata_and_wait_for_the_leaders_assignment() -> None:
    h = Harness()
    ta = h.join_new("a", protocols=[("range", b"ma")])
    tb = h.join_new("b", protocols=[("range", b"mb")])
    h.tick(DELAY)
    assert ta not in h.joins  # b joined during the delay: it is extended once
    h.tick(DELAY)
    a, b = h.joins[ta], h.joins[tb]
    assert a.leader == b.leader == a.member_id  # the first to join leads
    assert [(m.member_id, m.metadata) for m in a.members] == [(a.member_id, b"ma"), (b.member_id, b"mb")]
    assert b.members == ()
    waiting = h.sync(b.member_id)
    assert isinstance(waiting, int) and waiting not in h.syncs
    h.sync(a.member_id, assignments={a.member_id: b"for-a", b.member_id: b"for-b"})
    assert h.syncs[waiting].assignment == b"for-b" and h.syncs[waiting].protocol_name == "range"
    # The assignment is in the group's record.
    value = cr.decode_value(h.log[-1][1])  # type: ignore[arg-type]
    assert value.generation == 1 and value.leader == a.member_id
    assert {m.member_id: m.assignment for m in value.members} == {a.member_id: b"for-a", b.member_id: b"for-b"}


def test_protocol_is_chosen_by_votes_among_those_all_members_support() -> None:
    h = Harness()
    h.join_new("a", protocols=[("x", b""), ("y", b"")])
    h.join_new("b", protocols=[("y", b""), ("x", b"")])
    h.join_new("c", protocols=[("y", b""), ("z", b"")])
    bad = h.join(client="d", protocols=[("z", b"")])  # not supported by a and b
    assert isinstance(bad, JoinResponse) and bad.error == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    other_type = h.join(client="e", protocol_type="connect", protocols=[("y", b"")])
    assert isinstance(other_type, JoinResponse) and other_type.error == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    h.tick(10 * DELAY)
    assert h.group().protocol_name == "y"  # candidates {y}; x would have lost the vote anyway
    g2 = Harness(delay=0)
    g2.join_new("a", protocols=[("x", b""), ("y", b"")])
    g2.join_new("b", protocols=[("y", b""), ("x", b"")])
    g2.join_new("c", protocols=[("y", b""), ("x", b"")])
    g2.tick(0)
    assert g2.group().protocol_name == "y"  # votes: x 1, y 2


def test_heartbeat_answers() -> None:
    h = Harness()
    a, b = h.stable_pair()
    assert h.heartbeat(a) == ErrorCode.NONE
    assert h.heartbeat(a, generation=0) == ErrorCode.ILLEGAL_GENERATION
    assert h.heartbeat("nobody") == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.shard.classic_heartbeat("no-group", a, None, 1, h.now) == ErrorCode.UNKNOWN_MEMBER_ID
    h.join_new("c")  # a new member: everyone must rejoin
    assert h.group().state == PREPARING_REBALANCE
    assert h.heartbeat(a) == h.heartbeat(b) == ErrorCode.REBALANCE_IN_PROGRESS
    assert h.sync(a) == SyncResponse(ErrorCode.REBALANCE_IN_PROGRESS)


def test_rebalance_timeout_removes_members_that_did_not_rejoin() -> None:
    h = Harness()
    a, b = h.stable_pair()
    tc = h.join_new("c")
    ta = h.join(a)
    assert isinstance(ta, int)
    for _ in range(5):  # b is alive (it heartbeats) but does not rejoin
        h.tick(REBALANCE // 5 - 1)
        assert h.heartbeat(b) == ErrorCode.REBALANCE_IN_PROGRESS
    assert ta not in h.joins
    h.tick(5)  # the rebalance timeout
    assert h.joins[ta].generation_id == h.joins[tc].generation_id == 2
    assert [m.member_id for m in h.joins[ta].members] == [a, h.joins[tc].member_id]
    assert b not in h.group().members and h.heartbeat(b) == ErrorCode.UNKNOWN_MEMBER_ID


def test_session_expiry_removes_a_member_and_the_others_rebalance() -> None:
    h = Harness()
    a, b = h.stable_pair()
    for _ in range(4):
        h.tick(SESSION // 4 - 1)
        assert h.heartbeat(a) == ErrorCode.NONE  # b stays silent
    h.tick(10)
    assert b not in h.group().members and h.group().state == PREPARING_REBALANCE
    assert h.heartbeat(a) == ErrorCode.REBALANCE_IN_PROGRESS
    ta = h.join(a)
    assert isinstance(ta, int)  # every remaining member rejoined: the join phase completes at once
    assert h.joins[ta].generation_id == 2 and [m.member_id for m in h.joins[ta].members] == [a]


def test_leave_group_batch_by_member_id_and_instance_id() -> None:
    h = Harness(delay=0)
    ts = h.join(client="s", instance="i-s")
    td = h.join_new("d")
    h.tick(0)
    s, d = h.joins[ts].member_id, h.joins[td].member_id  # type: ignore[index]
    assert s == "i-s-u0"  # a static member's id starts with its instance id, as in Kafka
    h.sync(d)
    h.sync(s, assignments={})
    codes = h.leave(LeaveMember("", "i-s"), LeaveMember("ghost"), LeaveMember("", "i-unknown"))
    assert codes == [ErrorCode.NONE, ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.UNKNOWN_MEMBER_ID]
    assert h.group().state == PREPARING_REBALANCE and list(h.group().members) == [d]
    assert h.leave(LeaveMember(d)) == [ErrorCode.NONE]
    assert h.group().state == EMPTY and h.group().generation == 2  # the empty generation is written
    assert cr.decode_value(h.log[-1][1]).members == []  # type: ignore[arg-type]


def test_static_member_rejoins_without_a_rebalance_and_its_old_id_is_fenced() -> None:
    h = Harness(delay=0)
    tl = h.join(client="l", instance="i-l")
    tf = h.join(client="f", instance="i-f")
    h.tick(0)
    leader, follower = h.joins[tl].member_id, h.joins[tf].member_id  # type: ignore[index]
    h.sync(follower)
    h.sync(leader, assignments={leader: b"L", follower: b"F"})
    # The follower restarts: same instance id, no member id, same protocols.
    again = h.join(client="f", instance="i-f")
    assert isinstance(again, int)
    resp = h.joins[again]
    assert resp.error == ErrorCode.NONE and resp.member_id != follower and resp.generation_id == 1
    assert resp.leader == leader and not resp.skip_assignment and h.group().state == STABLE
    new_id = resp.member_id
    assert h.heartbeat(leader) == ErrorCode.NONE  # nobody else noticed
    assert h.heartbeat(follower, 1, instance="i-f") == ErrorCode.FENCED_INSTANCE_ID
    assert h.sync(new_id, 1, instance="i-f") == SyncResponse(ErrorCode.NONE, "consumer", "range", b"F")
    with pytest.raises(GroupError) as err:
        h.commit(follower, 1, instance="i-f")
    assert err.value.code == ErrorCode.FENCED_INSTANCE_ID
    # The static leader restarts (JoinGroup v9): it is told to skip the assignment.
    back = h.joins[h.join(client="l", instance="i-l")]  # type: ignore[index]
    assert back.leader == back.member_id and back.skip_assignment and len(back.members) == 2
    # An old client (v5) is not told it leads, so it does not assign again.
    old = h.joins[h.join(client="l", instance="i-l", version=5)]  # type: ignore[index]
    assert old.leader == back.member_id != old.member_id and old.members == ()
    assert h.group().generation == 1 and h.group().state == STABLE


def test_static_member_with_new_protocols_or_while_completing_rebalances() -> None:
    h = Harness(delay=0)
    tl = h.join(client="l", instance="i-l")
    h.tick(0)
    h.sync(h.joins[tl].member_id, assignments={})  # type: ignore[index]
    parked = h.join(client="l", instance="i-l", protocols=[("roundrobin", b""), ("range", b"")])
    # The group's protocol would change to roundrobin: a rebalance (that completes at once: it is alone).
    assert parked in h.joins and h.joins[parked].generation_id == 2  # type: ignore[index]
    assert h.group().state == COMPLETING_REBALANCE and h.group().protocol_name == "roundrobin"
    again = h.join(client="l", instance="i-l", protocols=[("roundrobin", b""), ("range", b"")])
    assert h.joins[again].generation_id == 3  # type: ignore[index]  # the leader may have assigned to the old id


def test_static_member_parked_join_is_fenced_by_its_replacement() -> None:
    h = Harness(delay=0)
    ts = h.join(client="s", instance="i-s")
    h.join_new("d")
    h.tick(0)
    s = h.joins[ts].member_id  # type: ignore[index]
    h.join_new("e")  # a rebalance: s rejoins and waits for the others
    parked = h.join(s, instance="i-s")
    assert isinstance(parked, int) and parked not in h.joins
    h.join(client="s", instance="i-s")  # the same instance, restarted
    assert h.joins[parked].error == ErrorCode.FENCED_INSTANCE_ID


def test_a_retried_join_replaces_the_parked_one() -> None:
    h = Harness()
    first = h.join_new("a")
    member = h.shard.classic.groups["g"].members
    mid = next(iter(member))
    second = h.join(mid, client="a")
    assert h.joins[first].error == ErrorCode.REBALANCE_IN_PROGRESS and second not in h.joins


def test_member_that_never_syncs_is_removed_after_the_rebalance_timeout() -> None:
    h = Harness()
    ta, tb = h.join_new("a"), h.join_new("b")
    h.tick(2 * DELAY)
    a = h.joins[ta].member_id
    h.sync(a, assignments={})
    for _ in range(6):
        h.tick(REBALANCE // 6)
        h.heartbeat(a)
    assert h.joins[tb].member_id not in h.group().members and h.group().state == PREPARING_REBALANCE


def test_pending_member_id_is_forgotten_after_the_session_timeout() -> None:
    h = Harness()
    first = h.join(client="a")
    assert isinstance(first, JoinResponse)
    h.tick(SESSION)
    late = h.join(first.member_id, client="a")
    assert isinstance(late, JoinResponse) and late.error == ErrorCode.UNKNOWN_MEMBER_ID


def test_bad_requests() -> None:
    h = Harness(classic_min_session_timeout_ms=6000, classic_max_session_timeout_ms=60_000)
    for session in (5999, 60_001):
        resp = h.join(client="a", session=session)
        assert isinstance(resp, JoinResponse) and resp.error == ErrorCode.INVALID_SESSION_TIMEOUT
    resp = h.join(client="a", group="")
    assert isinstance(resp, JoinResponse) and resp.error == ErrorCode.INVALID_GROUP_ID
    resp = h.join(client="a", protocols=[])
    assert isinstance(resp, JoinResponse) and resp.error == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    resp = h.join(client="a", protocols=[("range", b""), ("range", b"x")])
    assert isinstance(resp, JoinResponse) and resp.error == ErrorCode.INVALID_REQUEST
    assert h.sync("x", 1) == SyncResponse(ErrorCode.UNKNOWN_MEMBER_ID, message="group 'g' has no members")


def test_group_max_size() -> None:
    h = Harness(delay=0, classic_max_size=1)
    h.join_new("a")
    resp = h.join(client="b", version=3)
    assert isinstance(resp, JoinResponse) and resp.error == ErrorCode.GROUP_MAX_SIZE_REACHED


def test_commits_are_fenced_by_generation() -> None:
    h = Harness()
    a, b = h.stable_pair()
    assert h.commit(a, 1) == {TP("t", 0): ErrorCode.NONE}
    for member, gen, code in ((a, 0, ErrorCode.ILLEGAL_GENERATION), ("nobody", 1, ErrorCode.UNKNOWN_MEMBER_ID),
                              ("", -1, ErrorCode.UNKNOWN_MEMBER_ID)):
        with pytest.raises(GroupError) as err:
            h.commit(member, gen)
        assert err.value.code == code
    h.join_new("c")  # PreparingRebalance: the current generation still commits
    assert h.commit(a, 1) == {TP("t", 0): ErrorCode.NONE}
    h.join(a)
    h.join(b)
    h.tick(DELAY)  # everyone rejoined: CompletingRebalance at generation 2
    assert h.group().state == COMPLETING_REBALANCE
    with pytest.raises(GroupError) as err:
        h.commit(a, 2)
    assert err.value.code == ErrorCode.REBALANCE_IN_PROGRESS
    h.leave(*(LeaveMember(m) for m in list(h.group().members)))
    assert h.group().state == EMPTY and h.commit("", -1) == {TP("t", 0): ErrorCode.NONE}


def test_classic_and_consumer_groups_exclude_each_other_until_empty() -> None:
    h = Harness(delay=0)
    h.join_new("a")
    h.tick(0)
    with pytest.raises(GroupError) as err:
        h.shard.heartbeat(HeartbeatRequest("g", subscribed_topic_names=["t"]), h.now)
    assert err.value.code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert "g" not in h.shard.groups
    h.leave(*(LeaveMember(m) for m in list(h.group().members)))
    h.commit("", -1)  # offsets of the classic group survive the take-over
    result, recs = h.shard.heartbeat(HeartbeatRequest("g", subscribed_topic_names=["t"]), h.now)
    assert recs[0] == (cr.encode_key("g"), None) and "g" not in h.shard.classic.groups
    assert h.shard.fetch_offsets("g", None)[TP("t", 0)].offset == 5
    # ... and the other way round: a non-empty consumer group refuses JoinGroup; an empty one is replaced.
    resp = h.join(client="b")
    assert isinstance(resp, JoinResponse) and resp.error == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    h.shard.heartbeat(HeartbeatRequest("g", result.member_id, -1), h.now)
    resp = h.join(client="b")
    assert isinstance(resp, JoinResponse) and resp.error == ErrorCode.MEMBER_ID_REQUIRED
    assert "g" not in h.shard.groups and "g" in h.shard.classic.groups
    tombstoned = {k for k, v in h.log if v is None}
    assert r.encode_key(r.RecordKey(r.GROUP_METADATA, "g")) in tombstoned


def test_records_replay_into_the_same_group() -> None:
    h = Harness()
    a, b = h.stable_pair()
    fresh = GroupShard(0, h.shard.config)
    for key, value in h.log:
        fresh.replay(key, value)
    fresh.loaded(h.now)
    g, f = h.group(), fresh.classic.groups["g"]
    assert (f.state, f.generation, f.protocol_type, f.protocol_name, f.leader_id) == (
        STABLE, g.generation, "consumer", "range", a)
    assert [(m.member_id, m.client_id, m.client_host, m.metadata("range"), m.assignment) for m in f.members.values()] == [
        (m.member_id, m.client_id, m.client_host, m.metadata("range"), m.assignment) for m in g.members.values()]
    assert fresh.classic.heartbeat("g", b, None, 1, h.now) == ErrorCode.NONE  # members keep their generation
    # DeleteGroups: refused while members; tombstones once empty.
    with pytest.raises(GroupError) as err:
        h.shard.delete_group("g")
    assert err.value.code == ErrorCode.NON_EMPTY_GROUP
    h.leave(LeaveMember(a), LeaveMember(b))
    recs = h.shard.delete_group("g")
    assert recs[-1] == (cr.encode_key("g"), None) and "g" not in h.shard.classic.groups
    for key, value in recs:
        fresh.replay(key, value)
    assert "g" not in fresh.classic.groups


def test_empty_group_without_offsets_is_deleted_after_the_retention_check_interval() -> None:
    h = Harness(delay=0, offsets_retention_check_interval_ms=60_000)
    h.join_new("a")
    h.tick(0)
    h.leave(*(LeaveMember(m) for m in list(h.group().members)))
    assert h.shard.expire(h.now + 59_999) == []
    assert h.shard.expire(h.now + 60_000) == [(cr.encode_key("g"), None)] and "g" not in h.shard.classic.groups


def test_offsets_of_a_subscribed_topic_cannot_be_deleted() -> None:
    h = Harness(delay=0)
    t = h.join_new("a", protocols=[("range", subscription("t"))])
    h.tick(0)
    a = h.joins[t].member_id
    h.sync(a, assignments={a: assignment("t", 0, 1)})
    h.commit(a, 1)
    errors, _ = h.shard.delete_offsets("g", [TP("t", 0), TP("u", 0)])
    assert errors == {TP("t", 0): ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC, TP("u", 0): ErrorCode.NONE}


def test_every_parked_request_is_answered_exactly_once() -> None:
    """Random joins, syncs, heartbeats, leaves and clock moves: no ticket is answered twice, and once
    everyone has left none is left waiting."""
    for seed in range(30):
        rnd = random.Random(seed)
        h = Harness(delay=rnd.choice([0, 500, DELAY]))
        issued: set[int] = set()
        members: list[tuple[str, str | None]] = []  # (member id, instance id)
        for _ in range(120):
            op = rnd.random()
            if op < 0.25 or not members:
                instance = rnd.choice([None, "i-1", "i-2"])
                answer = h.join(client=f"c{rnd.randrange(9)}", instance=instance, version=rnd.choice([3, 9]))
                if isinstance(answer, int):
                    issued.add(answer)
            elif op < 0.45:
                mid, inst = rnd.choice(members)
                answer = h.join(mid, instance=inst, protocols=rnd.choice([RANGE, [("range", b"other")]]))
                if isinstance(answer, int):
                    issued.add(answer)
            elif op < 0.65:
                mid, inst = rnd.choice(members)
                group = h.shard.classic.groups["g"]
                got = h.sync(mid, group.generation, {m: b"x" for m in group.members}, instance=inst)
                if isinstance(got, int):
                    issued.add(got)
            elif op < 0.75:
                mid, inst = rnd.choice(members)
                h.leave(LeaveMember(mid, inst))
            elif op < 0.85:
                h.heartbeat(*rnd.choice(members))
            else:
                h.tick(rnd.choice([100, 1000, SESSION, REBALANCE]))
            group = h.shard.classic.groups.get("g")
            members = [(m.member_id, m.instance_id) for m in group.members.values()] if group else []
        for mid, inst in members:
            h.leave(LeaveMember(mid, inst))
        h.tick(REBALANCE)
        assert len(h.answered) == len(set(h.answered)), f"seed {seed}: a ticket answered twice"
        assert issued <= set(h.answered), f"seed {seed}: tickets never answered: {issued - set(h.answered)}"


def test_group_metadata_value_layouts() -> None:
    member = cr.ClassicMemberValue("m", "i", "c", "/h", 300, 45, b"sub", b"asg")
    v = cr.GroupMetadataValue("consumer", 7, "range", "m", 1234, [member])
    assert cr.decode_value(cr.encode_value(v)) == v
    # v0, written by hand: no timestamp, no instance id, no rebalance timeout (it is the session timeout).
    v0 = (struct.pack(">h", 0) + b"\x00\x08consumer" + struct.pack(">i", 2) + b"\xff\xff" + b"\xff\xff"
          + struct.pack(">i", 1) + b"\x00\x01m" + b"\x00\x01c" + b"\x00\x02/h" + struct.pack(">i", 45)
          + struct.pack(">i", 1) + b"s" + struct.pack(">i", 0))
    assert cr.decode_value(v0) == cr.GroupMetadataValue("consumer", 2, None, None, -1,
                                                         [cr.ClassicMemberValue("m", None, "c", "/h", 45, 45, b"s", b"")])
    # v4 (flexible), written by hand: compact lengths (+1) and empty tagged-field sections.
    v4 = (struct.pack(">h", 4) + b"\x09consumer" + struct.pack(">i", 3) + b"\x06range" + b"\x02m"
          + struct.pack(">q", 9) + b"\x02" + b"\x02m" + b"\x00" + b"\x02c" + b"\x03/h" + struct.pack(">ii", 60, 45)
          + b"\x02s" + b"\x01" + b"\x00" + b"\x00")
    assert cr.decode_value(v4) == cr.GroupMetadataValue("consumer", 3, "range", "m", 9,
                                                         [cr.ClassicMemberValue("m", None, "c", "/h", 60, 45, b"s", b"")])


def test_consumer_protocol_bytes_cross_checked_with_kafka_python() -> None:
    sub = ConsumerProtocolSubscription(version=3, topics=["a", "b"], user_data=None, owned_partitions=[],
                                       generation_id=4, rack_id=None).encode()
    assert subscribed_topics(sub) == {"a", "b"}
    assert assigned_partitions(assignment("t", 2, 0)) == {TP("t", 0), TP("t", 2)}
    assert assigned_partitions(b"") == set()
    assert subscribed_topics(b"\x00") is None and assigned_partitions(b"\x00\x00\x7f\xff\xff\xff") is None


def test_a_stable_or_empty_classic_group_reloads_to_the_same_dump() -> None:
    h = Harness()
    a, b = h.stable_pair()
    h.commit(a, h.generation[a])

    def loaded() -> GroupShard:
        fresh = GroupShard(0, h.shard.config)
        fresh.set_topics({"t": ("00000000000000000000000000000001", 6)})
        for key, value in h.log:
            fresh.replay(key, value)
        return fresh

    assert loaded().dump() == h.shard.dump()
    h.leave(LeaveMember(a), LeaveMember(b))  # the join phase ends at once: Empty, with a record
    assert h.group().state == EMPTY
    assert loaded().dump() == h.shard.dump()


def test_random_walks_reload_to_the_live_group_whenever_it_is_stable_or_empty() -> None:
    """A classic group's record is a snapshot (the join and sync phases are not in it, as in Kafka):
    whenever the live group is Stable or Empty, loading its records gives the same group."""
    for seed in range(30):
        rnd = random.Random(seed)
        h = Harness(delay=rnd.choice([0, 500, DELAY]))
        members: list[tuple[str, str | None]] = []
        for step in range(120):
            op = rnd.random()
            if op < 0.25 or not members:
                h.join(client=f"c{rnd.randrange(9)}", instance=rnd.choice([None, "i-1", "i-2"]),
                       version=rnd.choice([3, 9]))
            elif op < 0.45:
                mid, inst = rnd.choice(members)
                h.join(mid, instance=inst, protocols=rnd.choice([RANGE, [("range", b"other")]]))
            elif op < 0.65:
                mid, inst = rnd.choice(members)
                group = h.shard.classic.groups["g"]
                h.sync(mid, group.generation, {m: bytes([i]) for i, m in enumerate(group.members)}, instance=inst)
            elif op < 0.75:
                mid, inst = rnd.choice(members)
                h.leave(LeaveMember(mid, inst))
            elif op < 0.85:
                h.heartbeat(*rnd.choice(members))
            else:
                h.tick(rnd.choice([100, 1000, SESSION, REBALANCE]))
            group = h.shard.classic.groups.get("g")
            members = [(m.member_id, m.instance_id) for m in group.members.values()] if group else []
            if group is None or group.state in (STABLE, EMPTY):
                fresh = GroupShard(0, h.shard.config)
                for key, value in h.log:
                    fresh.replay(key, value)
                loaded, live = fresh.dump()["classic"], h.shard.dump()["classic"]
                assert loaded == live, f"seed {seed}, step {step}: {_values(loaded)} != {_values(live)}"


def _values(dumped: object) -> dict[str, cr.GroupMetadataValue | None]:
    assert isinstance(dumped, dict)
    return {gid: None if value is None else cr.decode_value(value) for gid, (_, value) in dumped.items()}
