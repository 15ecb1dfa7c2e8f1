"""Transactional offset commits in the group coordinator (TxnOffsetCommit, KIP-447): pending until the
transaction coordinator completes them (CompleteTxnOffsets); decided as records, changed by replay only."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.coordinator import records as r
from services.coordinator.config import GroupConfig
from services.coordinator.group import GroupError
from services.coordinator.membership import HeartbeatRequest
from services.coordinator.pending_offsets import TxnOffsetCommit, completes
from services.coordinator.shard import GroupShard, OffsetCommit
from shared.errors import ErrorCode
from shared.types import TopicPartition as TP
from tests.unit.coordinator.test_classic_group import Harness

T_ID = "00000000000000000000000000000001"
Rec = tuple[bytes, bytes | None]
PID = 4000


class Shard:
    """A shard with its log: every record decided is written (and applied, as the api layer does)."""

    def __init__(self) -> None:
        self.shard = GroupShard(0, GroupConfig(session_timeout_ms=10_000, offset_metadata_max_bytes=10))
        self.log: list[Rec] = []
        self.log.extend(self.shard.set_topics({"t": (T_ID, 4)}))
        self.now = 1_000

    def written(self, recs: list[Rec]) -> list[Rec]:
        self.log.extend(recs)
        self.shard.apply_offsets(recs)
        return recs

    def txn_commit(self, offset: int, tp: TP = TP("t", 0), pid: int = PID, epoch: int = 0, group: str = "g",
                   member: str = "", generation: int = -1, instance: str | None = None,
                   metadata: str = "") -> dict[TP, int]:
        errors, recs = self.shard.txn_commit_offsets(group, "tx", pid, epoch, member, instance, generation,
                                                     [TxnOffsetCommit(tp, offset, 3, metadata)], self.now)
        self.written(recs)
        return errors

    def complete(self, committed: bool, pid: int = PID, epoch: int = 1, version: int = 2,
                 group: str | None = None) -> list[Rec]:
        return self.written(self.shard.complete_txn_offsets(pid, epoch, committed, version, group))

    def commit(self, offset: int, tp: TP = TP("t", 0), group: str = "g") -> None:
        self.written(self.shard.commit_offsets(group, "", -1, [OffsetCommit(tp, offset)], self.now)[1])

    def offset(self, tp: TP = TP("t", 0), group: str = "g") -> int | None:
        v = self.shard.fetch_offsets(group, [tp])[tp]
        return None if v is None else v.offset

    def reloaded(self) -> GroupShard:
        fresh = GroupShard(0, self.shard.config)
        fresh.set_topics({"t": (T_ID, 4)})
        for key, value in self.log:
            fresh.replay(key, value)
        return fresh


# -- records ------------------------------------------------------------------------------------------

def test_pending_record_layout_round_trips_and_is_tidelog_s_own_type() -> None:
    key = r.encode_key(r.RecordKey(r.PENDING_TXN_OFFSET, "g", topic="t", partition=2, producer_id=PID))
    assert key == struct.pack(">h", 1000) + b"\x00\x01g" + b"\x00\x01t" + struct.pack(">iq", 2, PID)
    assert r.decode_key(key) == r.RecordKey(r.PENDING_TXN_OFFSET, "g", topic="t", partition=2, producer_id=PID)
    value = r.PendingOffsetValue(7, "tx", r.OffsetValue(42, 3, "meta", 99))
    data = r.encode_pending_offset(value)
    assert data[:2] == b"\x00\x00" and r.decode_pending_offset(data) == value


def test_unknown_record_types_are_skipped_by_decoding_and_replay() -> None:
    assert r.decode_key(struct.pack(">h", 1001) + b"\x00\x01g") is None
    s = Shard()
    before = s.shard.dump()
    s.shard.replay(struct.pack(">h", 1001) + b"\x00\x01g", b"\x00\x00anything")
    assert s.shard.dump() == before


# -- pending, then committed or aborted ---------------------------------------------------------------------

def test_pending_offsets_are_invisible_until_committed() -> None:
    s = Shard()
    s.commit(5)
    assert s.txn_commit(10) == {TP("t", 0): ErrorCode.NONE}
    assert s.offset() == 5
    assert s.shard.unstable("g", [TP("t", 0), TP("t", 1)]) == {TP("t", 0)}
    recs = s.complete(committed=True)
    assert [r.decode_key(k).type for k, _ in recs] == [r.OFFSET_COMMIT, r.PENDING_TXN_OFFSET]  # type: ignore[union-attr]
    assert recs[1][1] is None  # the pending record's tombstone
    assert s.offset() == 10 and s.shard.unstable("g", [TP("t", 0)]) == set()
    assert s.shard.fetch_offsets("g", [TP("t", 0)])[TP("t", 0)].leader_epoch == 3  # type: ignore[union-attr]


def test_abort_drops_pending_offsets() -> None:
    s = Shard()
    s.commit(5)
    s.txn_commit(10)
    recs = s.complete(committed=False)
    assert len(recs) == 1 and recs[0][1] is None
    assert s.offset() == 5 and not s.shard.pending.by_producer


def test_completion_is_idempotent_and_succeeds_for_an_unknown_producer() -> None:
    s = Shard()
    s.txn_commit(10)
    assert s.complete(committed=True)
    assert s.complete(committed=True) == []  # the transaction coordinator's retry
    assert s.complete(committed=False) == []
    assert s.complete(committed=True, pid=999) == []
    assert s.offset() == 10


def test_a_newer_commit_of_the_same_producer_and_partition_replaces_the_pending_one() -> None:
    s = Shard()
    s.txn_commit(10)
    s.txn_commit(12)
    s.txn_commit(7, tp=TP("t", 1))
    s.complete(committed=True)
    assert (s.offset(), s.offset(TP("t", 1))) == (12, 7)


def test_completion_by_group_leaves_other_groups_pending() -> None:
    s = Shard()
    s.txn_commit(10, group="g")
    s.txn_commit(20, group="h")
    s.complete(committed=True, group="g")
    assert s.offset(group="g") == 10 and s.offset(group="h") is None
    assert s.shard.unstable("h", [TP("t", 0)]) == {TP("t", 0)}
    s.complete(committed=True)  # the whole partition
    assert s.offset(group="h") == 20


def test_two_producers_pending_on_one_partition_complete_separately() -> None:
    s = Shard()
    s.txn_commit(10, pid=1)
    s.txn_commit(20, pid=2)
    s.complete(committed=False, pid=1)
    assert s.shard.unstable("g", [TP("t", 0)]) == {TP("t", 0)}
    s.complete(committed=True, pid=2)
    assert s.offset() == 20


def test_a_plain_commit_newer_than_the_pending_one_is_kept() -> None:
    s = Shard()
    s.txn_commit(10)
    s.now += 5
    s.commit(15)
    s.complete(committed=True)
    assert s.offset() == 15 and not s.shard.pending.by_producer


# -- epochs: which transaction a completion is for ----------------------------------------------------------

def test_completion_rule_per_transaction_version() -> None:
    assert completes(4, 5, 2) and not completes(5, 5, 2) and not completes(6, 5, 2)
    assert completes(5, 5, 1) and completes(4, 5, 0) and not completes(6, 5, 1)


def test_a_delayed_v2_completion_does_not_complete_the_next_transaction() -> None:
    s = Shard()
    s.txn_commit(10, epoch=4)
    s.complete(committed=True, epoch=5)  # markers at the bumped epoch
    s.txn_commit(20, epoch=5)  # the next transaction runs at epoch 5
    assert s.complete(committed=False, epoch=5) == []  # the first one's completion, delayed
    assert s.offset() == 10 and s.shard.unstable("g", [TP("t", 0)]) == {TP("t", 0)}
    s.complete(committed=True, epoch=6)
    assert s.offset() == 20


def test_v1_completion_at_the_transaction_s_epoch() -> None:
    s = Shard()
    s.txn_commit(10, epoch=3)
    s.complete(committed=True, epoch=3, version=1)
    assert s.offset() == 10


def test_an_older_producer_epoch_is_fenced() -> None:
    s = Shard()
    s.txn_commit(10, epoch=5)
    with pytest.raises(GroupError) as e:
        s.txn_commit(11, epoch=4)
    assert e.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    with pytest.raises(GroupError) as e:
        s.shard.txn_commit_offsets("g", "tx", -1, -1, "", None, -1, [], s.now)
    assert e.value.code == ErrorCode.INVALID_REQUEST


def test_per_partition_errors() -> None:
    s = Shard()
    errors, recs = s.shard.txn_commit_offsets("g", "tx", PID, 0, "", None, -1, [
        TxnOffsetCommit(TP("t", 0), 1, metadata="x" * 11), TxnOffsetCommit(TP("t", 1), -5),
        TxnOffsetCommit(TP("t", 2), 3)], s.now)
    assert errors == {TP("t", 0): ErrorCode.OFFSET_METADATA_TOO_LARGE, TP("t", 1): ErrorCode.INVALID_REQUEST,
                      TP("t", 2): ErrorCode.NONE}
    assert len(recs) == 1
    with pytest.raises(GroupError) as e:
        s.shard.txn_commit_offsets("", "tx", PID, 0, "", None, -1, [], s.now)
    assert e.value.code == ErrorCode.INVALID_GROUP_ID


# -- KIP-447: only the group's current member commits -----------------------------------------------------

def _member(s: Shard, instance: str | None = None) -> tuple[str, int]:
    result, recs = s.shard.heartbeat(HeartbeatRequest("g", "", 0, instance_id=instance, subscribed_topic_names=["t"]),
                                     s.now)
    s.written(recs)
    return result.member_id, result.member_epoch


def _refused(s: Shard, **kw: object) -> int:
    with pytest.raises(GroupError) as e:
        s.txn_commit(10, **kw)  # type: ignore[arg-type]
    return e.value.code


def test_consumer_group_members_commit_at_their_current_epoch() -> None:
    s = Shard()
    member, epoch = _member(s, instance="i1")
    assert s.txn_commit(10, member=member, generation=epoch, instance="i1") == {TP("t", 0): ErrorCode.NONE}
    assert _refused(s, member=member, generation=epoch - 1) == ErrorCode.ILLEGAL_GENERATION
    assert _refused(s, member=member, generation=epoch + 1) == ErrorCode.ILLEGAL_GENERATION
    assert _refused(s, member="zombie", generation=epoch) == ErrorCode.UNKNOWN_MEMBER_ID
    assert _refused(s, member=member, generation=epoch, instance="i2") == ErrorCode.FENCED_INSTANCE_ID
    assert s.txn_commit(11) == {TP("t", 0): ErrorCode.NONE}  # generation -1, no member: not checked


def test_an_unknown_group_refuses_a_generation() -> None:
    s = Shard()
    assert _refused(s, group="new", member="m", generation=1) == ErrorCode.ILLEGAL_GENERATION
    assert s.txn_commit(1, group="new") == {TP("t", 0): ErrorCode.NONE}  # a simple group
    assert _refused(s, group="new", member="m", generation=1) == ErrorCode.UNKNOWN_MEMBER_ID


def test_classic_group_members_commit_at_the_current_generation_even_while_rebalancing() -> None:
    h = Harness()
    a, _ = h.stable_pair()
    gen = h.generation[a]

    def txn(member: str, generation: int, instance: str | None = None) -> dict[TP, int] | int:
        try:
            return h.shard.txn_commit_offsets("g", "tx", PID, 0, member, instance, generation,
                                              [TxnOffsetCommit(TP("t", 0), 5)], h.now)[0]
        except GroupError as exc:
            return exc.code

    assert txn(a, gen) == {TP("t", 0): ErrorCode.NONE}
    assert txn(a, gen - 1) == ErrorCode.ILLEGAL_GENERATION
    assert txn("zombie", gen) == ErrorCode.UNKNOWN_MEMBER_ID
    assert txn(a, gen, instance="i9") == ErrorCode.UNKNOWN_MEMBER_ID  # no such static member
    assert txn("", -1) == {TP("t", 0): ErrorCode.NONE}  # before KIP-447: accepted, even with members


# -- deletes, expiry ---------------------------------------------------------------------------------------

def test_deleting_the_group_deletes_its_pending_offsets_too() -> None:
    s = Shard()
    s.commit(5)
    s.txn_commit(10, tp=TP("t", 1))
    recs = s.written(s.shard.delete_group("g"))
    assert {r.decode_key(k).type for k, _ in recs} == {r.OFFSET_COMMIT, r.PENDING_TXN_OFFSET}  # type: ignore[union-attr]
    assert "g" not in s.shard.group_ids() and not s.shard.pending.by_producer
    assert s.complete(committed=True) == []  # the transaction later commits: nothing left


def test_a_group_with_only_pending_offsets_exists() -> None:
    s = Shard()
    s.txn_commit(10, group="p")
    assert "p" in s.shard.group_ids() and s.shard.describe("p") is not None


def test_offset_delete_removes_pending_offsets_of_the_partition() -> None:
    s = Shard()
    s.txn_commit(10, tp=TP("t", 0))
    s.txn_commit(11, tp=TP("t", 1))
    errors, recs = s.shard.delete_offsets("g", [TP("t", 0)])
    s.written(recs)
    assert errors == {TP("t", 0): ErrorCode.NONE}
    assert s.shard.unstable("g", [TP("t", 0), TP("t", 1)]) == {TP("t", 1)}


def test_offsets_with_a_pending_commit_do_not_expire() -> None:
    s = Shard()
    s.commit(5, tp=TP("t", 0))
    s.commit(6, tp=TP("t", 1))
    s.txn_commit(10, tp=TP("t", 0))
    recs = s.written(s.shard.expire(s.now + s.shard.config.offsets_retention_ms + 1))
    assert s.offset(TP("t", 1)) is None and s.offset(TP("t", 0)) == 5
    assert all(r.decode_key(k).partition == 1 for k, _ in recs)  # type: ignore[union-attr]


# -- replay equals live ------------------------------------------------------------------------------------

def test_pending_offsets_survive_a_reload_and_complete_after_it() -> None:
    s = Shard()
    s.commit(5)
    s.txn_commit(10, epoch=2)
    s.txn_commit(11, tp=TP("t", 1), epoch=2, group="h")
    fresh = s.reloaded()
    assert fresh.dump() == s.shard.dump()
    assert fresh.unstable("g", [TP("t", 0)]) == {TP("t", 0)}
    s.shard = fresh
    s.complete(committed=True, epoch=3)
    assert s.offset() == 10 and s.offset(TP("t", 1), group="h") == 11
    assert s.reloaded().dump() == s.shard.dump()


OPS = st.lists(st.one_of(
    st.tuples(st.just("txn"), st.sampled_from(["g", "h"]), st.integers(0, 2), st.integers(1, 3), st.integers(0, 3),
              st.integers(0, 100)),
    st.tuples(st.just("complete"), st.sampled_from([None, "g", "h"]), st.integers(1, 3), st.integers(0, 4),
              st.booleans(), st.sampled_from([1, 2])),
    st.tuples(st.just("commit"), st.sampled_from(["g", "h"]), st.integers(0, 2), st.integers(0, 100)),
    st.tuples(st.just("delete_offsets"), st.sampled_from(["g", "h"]), st.integers(0, 2)),
    st.tuples(st.just("delete_group"), st.sampled_from(["g", "h"])),
    st.tuples(st.just("tick"), st.integers(0, 3)),
), max_size=40)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPS)
def test_replaying_the_log_gives_the_live_state(ops: list[tuple]) -> None:  # type: ignore[type-arg]
    s = Shard()
    for op in ops:
        kind = op[0]
        try:
            if kind == "txn":
                _, group, part, pid, epoch, offset = op
                s.txn_commit(offset, tp=TP("t", part), pid=pid, epoch=epoch, group=group)
            elif kind == "complete":
                _, group, pid, epoch, committed, version = op
                s.complete(committed, pid=pid, epoch=epoch, version=version, group=group)
            elif kind == "commit":
                _, group, part, offset = op
                s.commit(offset, tp=TP("t", part), group=group)
            elif kind == "delete_offsets":
                _, group, part = op
                s.written(s.shard.delete_offsets(group, [TP("t", part)])[1])
            elif kind == "delete_group":
                s.written(s.shard.delete_group(op[1]))
            else:
                s.now += op[1]
        except GroupError:
            pass
        assert s.reloaded().dump() == s.shard.dump()
