"""The KIP-848 group state machine on one shard, driven by heartbeats and a fake clock."""

from __future__ import annotations

import itertools

import pytest

from services.coordinator.config import GroupConfig
from services.coordinator.group import STABLE, UNRELEASED_PARTITIONS, UNREVOKED_PARTITIONS, GroupError
from services.coordinator.membership import HeartbeatRequest, HeartbeatResult
from services.coordinator.shard import GroupShard, OffsetCommit
from shared.errors import ErrorCode
from shared.types import TopicPartition as TP

SESSION = 10_000
T_ID = "00000000000000000000000000000001"
U_ID = "00000000000000000000000000000002"


class Harness:
    def __init__(self, topics: dict[str, tuple[str, int]] | None = None) -> None:
        ids = (f"member-{i}" for i in itertools.count())
        self.shard = GroupShard(0, GroupConfig(session_timeout_ms=SESSION, heartbeat_interval_ms=1000),
                                new_member_id=lambda: next(ids))
        self.shard.set_topics(topics or {"t": (T_ID, 6)})
        self.now = 0
        self.log: list[tuple[bytes, bytes | None]] = []
        self.epochs: dict[str, int] = {}
        self.owned: dict[str, set[TP]] = {}
        self.instances: dict[str, str | None] = {}
        self.subs: dict[str, tuple[tuple[str, ...], str | None]] = {}

    def hb(self, member: str = "", epoch: int | None = None, group: str = "g", topics: tuple[str, ...] | None = None,
           instance: str | None = None, regex: str | None = None, owned: set[TP] | None = None) -> HeartbeatResult:
        instance = instance or self.instances.get(member)
        if topics is None and regex is None:
            topics, regex = self.subs.get(member, (("t",), None))
        topics = topics or ()
        req = HeartbeatRequest(group, member, self.epochs.get(member, 0) if epoch is None else epoch, instance,
                               subscribed_topic_names=list(topics), subscribed_topic_regex=regex,
                               owned=self.owned.get(member, set()) if owned is None else owned,
                               rebalance_timeout_ms=5000)
        res, recs = self.shard.heartbeat(req, self.now)
        self.log.extend(recs)
        self.epochs[res.member_id] = res.member_epoch
        self.instances[res.member_id] = instance
        self.subs[res.member_id] = (topics, regex)
        if res.assignment is not None:
            self.owned[res.member_id] = set(res.assignment)  # the client releases/takes at once
        return res

    def converge(self, members: list[str], rounds: int = 6) -> None:
        for _ in range(rounds):
            for m in members:
                self.hb(m)

    def group(self) -> object:
        return self.shard.groups["g"]


def parts(*ps: int, topic: str = "t") -> set[TP]:
    return {TP(topic, p) for p in ps}


def test_join_three_members_spread_six_partitions() -> None:
    h = Harness()
    ids = [h.hb().member_id for _ in range(3)]
    h.converge(ids)
    assert sorted(len(h.owned[m]) for m in ids) == [2, 2, 2]
    assert set().union(*(h.owned[m] for m in ids)) == parts(*range(6))
    assert h.shard.groups["g"].state == "Stable"


def test_revoke_before_assign() -> None:
    h = Harness()
    a = h.hb().member_id
    assert h.owned[a] == parts(*range(6))
    b = h.hb().member_id
    assert h.owned[b] == set()  # a still holds everything
    g = h.shard.groups["g"]
    assert g.members[b].state == UNRELEASED_PARTITIONS
    res = h.hb(a, owned=parts(*range(6)))  # a is told to keep only its target
    assert len(res.assignment) == 3 and g.members[a].state == UNREVOKED_PARTITIONS
    assert h.hb(b).assignment == set()  # not released yet
    h.hb(a)  # a now reports it released them
    assert g.members[a].state == STABLE and g.members[a].epoch == g.target_epoch
    assert len(h.hb(b).assignment) == 3
    assert g.members[b].state == STABLE
    assert h.owned[a].isdisjoint(h.owned[b])


def test_a_member_whose_partitions_do_not_move_keeps_them_throughout() -> None:
    h = Harness({"t": (T_ID, 4)})
    a, b = h.hb().member_id, h.hb().member_id
    h.converge([a, b])
    kept = set(h.owned[a])
    c = h.hb().member_id
    for _ in range(4):
        for m in (a, b, c):
            h.hb(m)
            assert h.owned[a] <= kept  # a never gets a partition taken and given back
    assert len(h.owned[c]) == 1


def test_members_heartbeat_often_only_while_the_group_converges() -> None:
    """Normal interval (1000) once Stable and unchanged for an interval; 250 ms while a member joins,
    partitions wait for release, or the epoch moved less than an interval ago."""
    h = Harness()
    a = h.hb()
    assert a.heartbeat_interval_ms == 250  # the group was just created: more members may follow
    h.now = 400
    b = h.hb()  # joins: a must give up three partitions
    assert b.heartbeat_interval_ms == 250 and h.group().state == "Reconciling"
    h.now = 2000  # past the window, but a has not released yet
    assert h.hb(a.member_id).heartbeat_interval_ms == 250
    h.converge([a.member_id, b.member_id])
    assert h.group().state == "Stable"
    assert h.hb(a.member_id).heartbeat_interval_ms == 1000
    h.now = 3000
    h.hb(b.member_id, epoch=-1)  # leaves: the epoch moves again
    assert h.hb(a.member_id).heartbeat_interval_ms == 250
    h.converge([a.member_id])
    h.now = 4001
    assert h.hb(a.member_id).heartbeat_interval_ms == 1000


def test_leave_session_expiry_and_rebalance_timeout() -> None:
    h = Harness()
    a, b, c = (h.hb().member_id for _ in range(3))
    h.converge([a, b, c])
    h.hb(c, epoch=-1)
    assert "member-2" not in h.shard.groups["g"].members
    h.converge([a, b])
    assert sorted(len(h.owned[m]) for m in (a, b)) == [3, 3]
    h.now += SESSION - 1
    h.hb(a)
    h.now += 2
    h.log.extend(h.shard.expire(h.now))  # b's session ran out, a's did not
    assert list(h.shard.groups["g"].members) == [a]
    h.converge([a])
    assert h.owned[a] == parts(*range(6))


def test_static_member_restart_moves_nothing() -> None:
    h = Harness()
    a = h.hb(instance="i-a").member_id
    b = h.hb(instance="i-b").member_id
    h.converge([a, b])
    g = h.shard.groups["g"]
    before = {m: set(h.owned[m]) for m in (a, b)}
    epoch, b_epoch = g.epoch, g.members[b].epoch
    res = h.hb(a, epoch=-2, instance="i-a")
    assert res.member_epoch == -2
    h.hb(b, instance="i-b")
    assert h.owned[b] == before[b]
    new = h.hb(instance="i-a")  # the restarted process, a fresh member id, epoch 0
    assert new.member_id != a and new.assignment == before[a]
    assert g.epoch == epoch and g.members[b].epoch == b_epoch
    assert a not in g.members


def test_static_member_partitions_freed_after_session() -> None:
    h = Harness()
    a = h.hb(instance="i-a").member_id
    b = h.hb().member_id
    h.converge([a, b])
    h.hb(a, epoch=-2, instance="i-a")
    h.now += SESSION // 2
    h.hb(b)
    assert len(h.owned[b]) == 3  # still reserved
    h.now += SESSION // 2 + 1
    h.log.extend(h.shard.expire(h.now))
    h.converge([b])
    assert h.owned[b] == parts(*range(6))


@pytest.mark.parametrize(
    ("change", "code"),
    [
        (lambda h, a: h.hb(instance="i-a"), ErrorCode.UNRELEASED_INSTANCE_ID),
        (lambda h, a: h.hb(a, epoch=h.epochs[a] + 1, instance="i-a"), ErrorCode.FENCED_MEMBER_EPOCH),
        (lambda h, a: h.hb(a, epoch=1, instance="i-a"), ErrorCode.FENCED_MEMBER_EPOCH),
        (lambda h, a: h.hb("nobody", epoch=3), ErrorCode.UNKNOWN_MEMBER_ID),
        (lambda h, a: h.hb(a, instance="i-other"), ErrorCode.FENCED_INSTANCE_ID),
        (lambda h, a: h.hb(group="other", member=a, epoch=1), ErrorCode.UNKNOWN_MEMBER_ID),
        (lambda h, a: h.hb(group=""), ErrorCode.INVALID_GROUP_ID),
        (lambda h, a: h.hb(topics=()), ErrorCode.INVALID_REQUEST),
        (lambda h, a: h.hb(regex="(", topics=()), ErrorCode.INVALID_REQUEST),
    ],
)
def test_refused_heartbeats(change: object, code: ErrorCode) -> None:
    h = Harness()
    a = h.hb(instance="i-a").member_id
    h.converge([a])
    with pytest.raises(GroupError) as err:
        change(h, a)  # type: ignore[operator]
    assert err.value.code == code


def test_previous_epoch_is_accepted_when_a_response_was_lost() -> None:
    h = Harness()
    a = h.hb().member_id
    old = h.epochs[a]
    h.hb()  # b joins: group epoch bumps
    h.hb(a)  # a revokes half
    h.hb(a)  # then moves to the new epoch, but suppose the response is lost
    g = h.shard.groups["g"]
    assert g.members[a].epoch > old and g.members[a].previous_epoch == old
    h.hb(a, epoch=old, owned=set(g.members[a].assigned))


def test_group_max_size() -> None:
    h = Harness()
    h.shard.membership.config = GroupConfig(session_timeout_ms=SESSION, max_size=1)
    h.hb()
    with pytest.raises(GroupError) as err:
        h.hb()
    assert err.value.code == ErrorCode.GROUP_MAX_SIZE_REACHED


def test_regex_subscription_picks_up_new_topics() -> None:
    h = Harness({"orders-eu": (T_ID, 2), "other": (U_ID, 2)})
    a = h.hb(topics=(), regex="orders-.*").member_id
    h.converge([a])
    assert h.owned[a] == parts(0, 1, topic="orders-eu")
    h.log.extend(h.shard.set_topics({"orders-eu": (T_ID, 2), "other": (U_ID, 2),
                                     "orders-us": ("00000000000000000000000000000003", 1)}))
    h.converge([a])
    assert h.owned[a] == parts(0, 1, topic="orders-eu") | parts(0, topic="orders-us")


def test_commits_are_fenced_by_member_epoch_and_ownership() -> None:
    h = Harness()
    a = h.hb().member_id
    h.converge([a])
    e = h.epochs[a]
    errs, recs = h.shard.commit_offsets("g", a, e, [OffsetCommit(TP("t", 0), 10, metadata="x" * 5000),
                                                    OffsetCommit(TP("t", 1), 11), OffsetCommit(TP("zz", 0), 1)], h.now)
    assert errs == {TP("t", 0): ErrorCode.OFFSET_METADATA_TOO_LARGE, TP("t", 1): 0, TP("zz", 0): ErrorCode.STALE_MEMBER_EPOCH}
    assert h.shard.fetch_offsets("g", [TP("t", 1)]) == {TP("t", 1): None}  # not applied before the write
    h.shard.apply_offsets(recs)
    assert h.shard.fetch_offsets("g", [TP("t", 1)])[TP("t", 1)].offset == 11
    for epoch, member, code in [(e - 1, a, ErrorCode.STALE_MEMBER_EPOCH), (e + 1, a, ErrorCode.FENCED_MEMBER_EPOCH),
                                (e, "x", ErrorCode.UNKNOWN_MEMBER_ID), (-1, "", ErrorCode.UNKNOWN_MEMBER_ID)]:
        with pytest.raises(GroupError) as err:
            h.shard.commit_offsets("g", member, epoch, [OffsetCommit(TP("t", 1), 12)], h.now)
        assert err.value.code == code


def test_admin_commits_delete_and_retention_of_empty_groups() -> None:
    h = Harness()
    errs, recs = h.shard.commit_offsets("solo", "", -1, [OffsetCommit(TP("t", 0), 5)], h.now)
    h.shard.apply_offsets(recs)
    assert h.shard.group_ids() == ["solo"]
    a = h.hb().member_id
    with pytest.raises(GroupError) as err:
        h.shard.delete_group("g")
    assert err.value.code == ErrorCode.NON_EMPTY_GROUP
    errs, _ = h.shard.delete_offsets("g", [TP("t", 0)])
    assert errs[TP("t", 0)] == ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
    h.hb(a, epoch=-1)
    h.shard.apply_offsets(h.shard.delete_group("g"))
    with pytest.raises(GroupError) as err:
        h.shard.delete_group("g")
    assert err.value.code == ErrorCode.GROUP_ID_NOT_FOUND
    h.now += GroupConfig().offsets_retention_ms
    expired = h.shard.expire(h.now)
    h.shard.apply_offsets(expired)
    assert h.shard.group_ids() == []


def test_replaying_the_records_rebuilds_the_same_groups() -> None:
    h = Harness()
    a = h.hb(instance="i-a").member_id
    b, c = h.hb().member_id, h.hb().member_id
    h.converge([a, b, c], rounds=2)
    h.hb(c, epoch=-1)
    h.hb(a, epoch=-2, instance="i-a")
    h.hb(b)
    _, recs = h.shard.commit_offsets("g", b, h.epochs[b], [OffsetCommit(next(iter(h.owned[b])), 7)], h.now)
    h.log.extend(recs)
    h.shard.apply_offsets(recs)
    fresh = GroupShard(0, h.shard.config)
    fresh.set_topics({"t": (T_ID, 6)})
    for key, value in h.log:
        fresh.replay(key, value)
    g, f = h.shard.groups["g"], fresh.groups["g"]
    assert (f.epoch, f.target_epoch, f.target) == (g.epoch, g.target_epoch, g.target)
    view = {m.member_id: (m.epoch, m.previous_epoch, m.state, m.assigned, m.pending_revocation, m.instance_id)
            for m in g.members.values()}
    assert {m.member_id: (m.epoch, m.previous_epoch, m.state, m.assigned, m.pending_revocation, m.instance_id)
            for m in f.members.values()} == view
    assert fresh.offsets == h.shard.offsets
