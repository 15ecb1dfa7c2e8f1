"""The transaction coordinator's shard (services/coordinator/txn/shard.py): each handler's answers and
errors, fencing, timeouts, expiration, KIP-890 transactions V2 and KAFKA-17754's delayed EndTxn.
Decisions are applied as the service layer will: begin, append, replay, then markers and complete."""

from __future__ import annotations

import itertools

from services.coordinator.txn.config import TxnConfig
from services.coordinator.txn.decisions import Decision, MarkerPlan, ProducerIdAndEpoch, Rec, for_request_version
from services.coordinator.txn.records import TxnLogValue, encode_key, encode_value
from services.coordinator.txn.shard import TxnShard
from services.coordinator.txn.state import TxnMetadata, TxnState
from shared.errors import ErrorCode
from shared.offsets_topic import partition_for
from shared.types import TopicPartition

S, E = TxnState, ErrorCode
T0 = TopicPartition("t", 0)
T1 = TopicPartition("t", 1)
U0 = TopicPartition("u", 0)
DAY = 24 * 3600 * 1000


class Harness:
    """A shard plus its log: decisions are begun, their records appended and replayed."""

    def __init__(self, config: TxnConfig | None = None, first_pid: int = 1000) -> None:
        self.pids = itertools.count(first_pid)
        self.shard = TxnShard(0, config or TxnConfig(), lambda: next(self.pids))
        self.log: list[Rec] = []
        self.markers: list[MarkerPlan] = []

    def apply(self, d: Decision) -> Decision:
        self.shard.begin(d)
        for key, value in d.records:
            self.log.append((key, value))
            self.shard.replay(key, value)
        return d

    def finish(self, d: Decision, now_ms: int = 0) -> Decision:
        """Write ``d``'s markers (if any) and append the completion."""
        assert d.markers is not None
        self.markers.append(d.markers)
        return self.apply(self.shard.complete(d.markers, now_ms))

    def run(self, d: Decision, now_ms: int = 0) -> Decision:
        self.apply(d)
        if d.markers is not None and d.records:
            self.finish(d, now_ms)
        return d

    def init(self, txn: str = "tx", now_ms: int = 0, timeout_ms: int = 60_000,
             expected: tuple[int, int] | None = None) -> Decision:
        exp = None if expected is None else ProducerIdAndEpoch(*expected)
        return self.apply(self.shard.init_producer_id(txn, timeout_ms, now_ms, exp))

    def add(self, pid: int, epoch: int, parts: list[TopicPartition], txn: str = "tx", now_ms: int = 0,
            version: int = 1) -> Decision:
        return self.apply(self.shard.add_partitions(txn, pid, epoch, parts, now_ms, version))

    def end(self, pid: int, epoch: int, commit: bool, txn: str = "tx", now_ms: int = 0, version: int = 1) -> Decision:
        return self.apply(self.shard.end_txn(txn, pid, epoch, commit, now_ms, version))

    def state(self, txn: str = "tx") -> TxnMetadata:
        return self.shard.txns[txn]

    def load(self, m: TxnMetadata) -> None:
        """Put crafted metadata in place, as loading its record would."""
        self.shard.replay(encode_key(m.transactional_id), encode_value(m.to_value()))


def ongoing(h: Harness, version: int = 1, parts: list[TopicPartition] | None = None) -> tuple[int, int]:
    d = h.init()
    assert d.ok
    assert h.add(d.producer_id, d.producer_epoch, parts or [T0], version=version).ok
    return d.producer_id, d.producer_epoch


# -- InitProducerId -------------------------------------------------------------------------------

def test_init_of_a_new_id_allocates_a_producer_id() -> None:
    h = Harness()
    d = h.init(now_ms=5)
    assert (d.error, d.producer_id, d.producer_epoch, len(d.records)) == (E.NONE, 1000, 0, 1)
    m = h.state()
    assert (m.state, m.producer_id, m.producer_epoch, m.timeout_ms, m.last_update_ms) == (S.EMPTY, 1000, 0, 60_000, 5)


def test_init_refuses_bad_requests() -> None:
    h = Harness()
    assert h.init("").error == E.INVALID_REQUEST
    assert h.init(timeout_ms=0).error == E.INVALID_TRANSACTION_TIMEOUT
    assert h.init(timeout_ms=15 * 60 * 1000 + 1).error == E.INVALID_TRANSACTION_TIMEOUT
    assert h.init(timeout_ms=15 * 60 * 1000).ok
    assert Harness(TxnConfig(max_timeout_ms=1000)).init(timeout_ms=1001).error == E.INVALID_TRANSACTION_TIMEOUT


def test_init_while_prepared_or_busy_is_concurrent() -> None:
    h = Harness()
    pid, epoch = ongoing(h)
    d = h.end(pid, epoch, commit=True)
    assert h.init().error == E.CONCURRENT_TRANSACTIONS  # PrepareCommit: markers not written yet
    h.finish(d)
    busy = h.shard.init_producer_id("tx", 1000, 0)
    h.shard.begin(busy)  # written, not yet replayed
    assert h.init().error == E.CONCURRENT_TRANSACTIONS
    assert h.add(pid, epoch, [T1]).error == E.CONCURRENT_TRANSACTIONS
    assert h.add(pid, epoch + 1, [T1]).error == E.PRODUCER_FENCED  # the producer is checked first
    h.shard.abandon("tx")
    assert h.init().ok


def test_second_producer_fences_the_first_and_aborts_its_transaction() -> None:
    h = Harness()
    pid, e = ongoing(h, parts=[T0, U0])
    d = h.init()  # a new producer instance: no (id, epoch)
    assert d.error == E.CONCURRENT_TRANSACTIONS and d.records
    assert d.pending == S.PREPARE_EPOCH_FENCE
    assert d.markers == MarkerPlan("tx", pid, e + 2, False, frozenset({T0, U0}))
    assert h.state().state == S.PREPARE_ABORT
    assert h.end(pid, e, commit=True).error == E.PRODUCER_FENCED  # the old producer cannot commit
    assert h.init().error == E.CONCURRENT_TRANSACTIONS  # until the markers are written
    h.finish(d)
    assert h.state().state == S.COMPLETE_ABORT
    again = h.init()  # the new producer's retry
    assert again.ok and (again.producer_id, again.producer_epoch) == (pid, e + 4)
    assert h.add(pid, e, [T0]).error == E.PRODUCER_FENCED
    assert h.end(pid, e, commit=False).error == E.PRODUCER_FENCED
    assert h.init(expected=(pid, e)).error == E.PRODUCER_FENCED
    assert h.init(expected=(pid + 1, e + 4)).error == E.PRODUCER_FENCED


def test_v2_fenced_producer_cannot_pass_its_abort_for_a_retry() -> None:
    h = Harness()
    pid, e = ongoing(h, version=2)
    d = h.init()
    h.finish(d)
    assert h.state().state == S.COMPLETE_ABORT and h.state().producer_epoch == e + 2
    # a timeout abort (epoch + 1) would take this for a retry; a fence (epoch + 2) does not
    assert h.end(pid, e, commit=False, version=2).error == E.PRODUCER_FENCED
    assert h.add(pid, e + 1, [T0], version=2).error == E.PRODUCER_FENCED


def test_init_with_own_epoch_bumps_by_one_and_its_retry_is_recognised() -> None:
    h = Harness()
    d0 = h.init()
    pid = d0.producer_id
    d1 = h.init(expected=(pid, 0))
    assert (d1.producer_id, d1.producer_epoch) == (pid, 1)
    retry = h.init(expected=(pid, 0))  # the answer was lost
    assert retry.ok and (retry.producer_id, retry.producer_epoch) == (pid, 1)
    assert h.init(expected=(pid, 5)).error == E.PRODUCER_FENCED
    fresh = h.init()  # a new instance skips an epoch: 2 is never handed out
    assert fresh.producer_epoch == 3
    assert h.init(expected=(pid, 1)).error == E.PRODUCER_FENCED  # the fenced one is not taken for a retry
    assert h.init(expected=(pid, 3)).producer_epoch == 4


def test_init_retry_survives_a_coordinator_change() -> None:
    h = Harness()
    pid = h.init().producer_id
    h.init(expected=(pid, 0))
    loaded = Harness()
    for key, value in h.log:
        loaded.shard.replay(key, value)
    retry = loaded.init(expected=(pid, 0))
    assert retry.ok and retry.producer_epoch == 1


def test_exhausted_epoch_rotates_the_producer_id() -> None:
    h = Harness()
    h.load(TxnMetadata("tx", 7, 32766, 1000, S.COMPLETE_COMMIT, last_update_ms=0))
    d = h.init(expected=(7, 32766))
    assert (d.producer_id, d.producer_epoch) == (1000, 0)
    assert h.state().previous_producer_id == 7
    retry = h.init(expected=(7, 32766))
    assert retry.ok and (retry.producer_id, retry.producer_epoch) == (1000, 0)
    h2 = Harness()
    h2.load(TxnMetadata("tx", 7, 32765, 1000, S.EMPTY, last_update_ms=0))
    fresh = h2.init()  # 32765 + 2 would leave no room: new id, epoch 1 (0 is skipped)
    assert (fresh.producer_id, fresh.producer_epoch) == (1000, 1)
    assert h2.init(expected=(7, 32766)).error == E.PRODUCER_FENCED


# -- AddPartitionsToTxn / AddOffsetsToTxn ---------------------------------------------------------

def test_add_partitions_starts_and_extends_the_transaction() -> None:
    h = Harness()
    d = h.init()
    pid, e = d.producer_id, d.producer_epoch
    a = h.add(pid, e, [T0], now_ms=100)
    assert a.ok and h.state().state == S.ONGOING and h.state().start_ms == 100
    again = h.add(pid, e, [T0], now_ms=200)
    assert again.ok and not again.records  # already in: answered without a write
    h.add(pid, e, [T1], now_ms=300)
    m = h.state()
    assert (m.partitions, m.start_ms, m.last_update_ms) == (frozenset({T0, T1}), 100, 300)


def test_add_partitions_errors() -> None:
    h = Harness()
    assert h.add(1, 0, [T0]).error == E.INVALID_PRODUCER_ID_MAPPING  # unknown id
    assert h.add(1, 0, [T0], txn="").error == E.INVALID_REQUEST
    pid, e = ongoing(h)
    assert h.add(pid + 1, e, [T1]).error == E.INVALID_PRODUCER_ID_MAPPING
    assert h.add(pid, e + 1, [T1]).error == E.PRODUCER_FENCED
    assert h.add(pid, e - 1, [T1]).error == E.PRODUCER_FENCED
    d = h.end(pid, e, commit=True)
    assert h.add(pid, e, [T1]).error == E.CONCURRENT_TRANSACTIONS  # PrepareCommit
    h.finish(d)
    assert h.add(pid, e, [T1]).ok  # a new transaction


def test_add_offsets_adds_the_groups_offsets_partition() -> None:
    h = Harness()
    d = h.init()
    assert h.shard.add_offsets("tx", d.producer_id, d.producer_epoch, "my-group", 0, 50).ok
    h.apply(h.shard.add_offsets("tx", d.producer_id, d.producer_epoch, "my-group", 0, 50))
    assert h.state().partitions == {TopicPartition("__consumer_offsets", partition_for("my-group", 50))}


def test_verify_partitions_answers_transaction_abortable() -> None:
    h = Harness()
    pid, e = ongoing(h)
    assert h.shard.verify_partitions("tx", pid, e, [T0, T1]) == {T0: E.NONE, T1: E.TRANSACTION_ABORTABLE}
    assert h.shard.verify_partitions("tx", pid, e + 1, [T0]) == {T0: E.PRODUCER_FENCED}
    assert h.shard.verify_partitions("tx", pid + 1, e, [T0]) == {T0: E.INVALID_PRODUCER_ID_MAPPING}
    assert h.shard.verify_partitions("nope", pid, e, [T0]) == {T0: E.INVALID_PRODUCER_ID_MAPPING}
    h.end(pid, e, commit=False)
    assert h.shard.verify_partitions("tx", pid, e, [T0]) == {T0: E.CONCURRENT_TRANSACTIONS}


# -- EndTxn ---------------------------------------------------------------------------------------

def test_v1_commit_keeps_the_epoch() -> None:
    h = Harness()
    pid, e = ongoing(h, parts=[T0, T1])
    d = h.end(pid, e, commit=True, now_ms=50)
    assert d.ok and (d.producer_id, d.producer_epoch) == (pid, e)
    assert d.markers == MarkerPlan("tx", pid, e, True, frozenset({T0, T1}))
    assert MarkerPlan("tx", pid, e, True, frozenset({T1, U0, T0})).topics() == {"t": [0, 1], "u": [0]}
    assert h.state().state == S.PREPARE_COMMIT
    assert h.end(pid, e, commit=True).error == E.CONCURRENT_TRANSACTIONS
    assert h.end(pid, e, commit=False).error == E.INVALID_TXN_STATE
    h.finish(d, now_ms=60)
    m = h.state()
    assert (m.state, m.producer_epoch, m.partitions, m.last_update_ms) == (S.COMPLETE_COMMIT, e, frozenset(), 60)
    retry = h.end(pid, e, commit=True)
    assert retry.ok and not retry.records and (retry.producer_id, retry.producer_epoch) == (pid, e)
    assert h.end(pid, e, commit=False).error == E.INVALID_TXN_STATE


def test_end_txn_errors() -> None:
    h = Harness()
    assert h.end(1, 0, True).error == E.INVALID_PRODUCER_ID_MAPPING
    assert h.end(1, 0, True, txn="").error == E.INVALID_REQUEST
    d = h.init()
    pid, e = d.producer_id, d.producer_epoch
    assert h.end(pid + 1, e, True).error == E.INVALID_PRODUCER_ID_MAPPING
    assert h.end(pid, e + 1, True).error == E.PRODUCER_FENCED
    assert h.end(pid, e, True).error == E.INVALID_TXN_STATE  # Empty: nothing to commit
    assert h.end(pid, e, False).error == E.INVALID_TXN_STATE  # V1 cannot abort nothing
    assert h.end(pid, e, True, version=2).error == E.INVALID_TXN_STATE


def test_v2_commit_bumps_the_epoch_and_recognises_its_retry() -> None:
    h = Harness()
    pid, e = ongoing(h, version=2)
    d = h.end(pid, e, commit=True, version=2)
    assert d.ok and (d.producer_id, d.producer_epoch) == (pid, e + 1)
    assert d.markers == MarkerPlan("tx", pid, e + 1, True, frozenset({T0}))  # markers carry the bumped epoch
    assert h.end(pid, e, commit=True, version=2).error == E.CONCURRENT_TRANSACTIONS  # retry while prepared
    assert h.end(pid, e, commit=False, version=2).error == E.INVALID_TXN_STATE
    # the producer's next transaction, ending before these markers are written: it waits (Kafka 4.x)
    assert h.end(pid, e + 1, commit=True, version=2).error == E.CONCURRENT_TRANSACTIONS
    h.finish(d)
    m = h.state()
    assert (m.state, m.producer_epoch, m.client_version) == (S.COMPLETE_COMMIT, e + 1, 2)
    retry = h.end(pid, e, commit=True, version=2)
    assert retry.ok and not retry.records and (retry.producer_id, retry.producer_epoch) == (pid, e + 1)
    assert h.end(pid, e, commit=False, version=2).error == E.INVALID_TXN_STATE


def test_v2_abort_of_a_transaction_that_added_nothing() -> None:
    h = Harness()
    d = h.init(now_ms=1)
    pid, e = d.producer_id, d.producer_epoch
    a = h.end(pid, e, commit=False, now_ms=7, version=2)  # the produce may have added a partition: ask
    assert a.ok and a.producer_epoch == e + 1 and a.markers is not None and not a.markers.partitions
    assert h.state().start_ms == 7
    h.finish(a)
    again = h.end(pid, e + 1, commit=False, version=2)  # same epoch after a completed one: a new empty abort
    assert again.ok and again.records and again.producer_epoch == e + 2
    h.finish(again)
    assert h.end(pid, e + 2, commit=True, version=2).error == E.INVALID_TXN_STATE


def test_v2_exhausted_epoch_moves_to_the_next_producer_id() -> None:
    h = Harness()
    h.load(TxnMetadata("tx", 7, 32766, 1000, S.ONGOING, frozenset({T0}), start_ms=0, last_update_ms=0,
                       client_version=2))
    d = h.end(7, 32766, commit=True, version=2)
    assert d.ok and (d.producer_id, d.producer_epoch) == (1000, 0)  # the producer goes on with these
    assert d.markers == MarkerPlan("tx", 7, 32767, True, frozenset({T0}))
    assert h.state().next_producer_id == 1000
    h.finish(d)
    m = h.state()
    assert (m.producer_id, m.producer_epoch, m.previous_producer_id, m.next_producer_id) == (1000, 0, 7, -1)
    retry = h.end(7, 32766, commit=True, version=2)
    assert retry.ok and (retry.producer_id, retry.producer_epoch) == (1000, 0)
    assert h.end(7, 32766, commit=False, version=2).error == E.INVALID_TXN_STATE
    assert h.add(1000, 0, [T1], version=2).ok


# -- KAFKA-17754: a delayed EndTxn of an earlier transaction ---------------------------------------

def test_delayed_end_txn_cannot_touch_a_later_v2_transaction() -> None:
    h = Harness()
    pid, e = ongoing(h, version=2)
    h.run(h.shard.end_txn("tx", pid, e, True, 0, 2))  # T1 committed; a copy of this EndTxn is delayed
    assert h.add(pid, e + 1, [T1], version=2).ok  # T2: the leader adds T1 implicitly on produce
    before = h.state()
    for commit in (True, False):
        late = h.end(pid, e, commit, version=2)
        assert late.error == E.PRODUCER_FENCED and not late.records
    assert h.state() == before
    d2 = h.end(pid, e + 1, commit=False, version=2)  # T2 aborts
    assert d2.ok
    assert h.end(pid, e, True, version=2).error == E.PRODUCER_FENCED  # while T2 is PrepareAbort
    h.finish(d2)
    assert h.end(pid, e, True, version=2).error == E.PRODUCER_FENCED  # T2 done: e is two behind
    assert h.state().state == S.COMPLETE_ABORT


def test_v1_cannot_tell_a_delayed_end_txn_from_a_current_one() -> None:
    """The bug KIP-890 fixes, kept visible: with the epoch unchanged, the late commit lands on T2."""
    h = Harness()
    pid, e = ongoing(h, version=1)
    h.run(h.shard.end_txn("tx", pid, e, True, 0, 1))
    assert h.add(pid, e, [T1], version=1).ok  # T2
    late = h.end(pid, e, True, version=1)
    assert late.ok and h.state().state == S.PREPARE_COMMIT


# -- timers ---------------------------------------------------------------------------------------

def test_timed_out_transaction_is_aborted_and_its_producer_fenced() -> None:
    h = Harness()
    d = h.init(timeout_ms=1000)
    pid, e = d.producer_id, d.producer_epoch
    h.add(pid, e, [T0], now_ms=0)
    assert h.shard.expire_timed_out(1000) == []
    [abort] = h.shard.expire_timed_out(1001)
    assert abort.ok and abort.pending == S.PREPARE_EPOCH_FENCE
    assert abort.markers == MarkerPlan("tx", pid, e + 1, False, frozenset({T0}))
    h.shard.begin(abort)
    assert h.shard.expire_timed_out(5000) == []  # in flight
    h.run(abort, now_ms=1002)
    assert h.state().state == S.COMPLETE_ABORT
    assert h.add(pid, e, [T1]).error == E.PRODUCER_FENCED
    assert h.end(pid, e, commit=True).error == E.PRODUCER_FENCED


def test_v2_producer_recovers_from_a_timeout_abort() -> None:
    h = Harness()
    d = h.init(timeout_ms=1000)
    pid, e = d.producer_id, d.producer_epoch
    h.add(pid, e, [T0], now_ms=0, version=2)
    [abort] = h.shard.expire_timed_out(2000)
    h.run(abort)
    assert h.end(pid, e, commit=True, version=2).error == E.INVALID_TXN_STATE  # it was aborted
    ok = h.end(pid, e, commit=False, version=2)
    assert ok.ok and (ok.producer_id, ok.producer_epoch) == (pid, e + 1)


def test_ids_expire_after_transactional_id_expiration_ms() -> None:
    h = Harness()
    h.init("idle", now_ms=0)
    pid, e = ongoing(h)
    assert h.shard.expire_ids(7 * DAY - 1) == []
    [tomb] = h.shard.expire_ids(7 * DAY)  # the ongoing one never expires
    assert tomb.transactional_id == "idle" and tomb.records == ((encode_key("idle"), None),)
    assert tomb.pending == S.DEAD
    h.shard.begin(tomb)
    assert h.init("idle", now_ms=7 * DAY).error == E.CONCURRENT_TRANSACTIONS
    h.apply(tomb)
    assert "idle" not in h.shard.txns
    assert h.init("idle", now_ms=7 * DAY).producer_id != pid
    assert [d.transactional_id for d in h.shard.expire_ids(10, expiration_ms=5)] == []
    assert len(h.shard.expire_ids(7 * DAY + 5, expiration_ms=5)) == 1


# -- completion and loading -----------------------------------------------------------------------

def test_a_loaded_prepared_transaction_is_finished_by_the_new_owner() -> None:
    h = Harness()
    pid, e = ongoing(h, version=2, parts=[T0, U0])
    d = h.end(pid, e, commit=True, version=2)  # PrepareCommit written; the owner dies before the markers
    new = Harness()
    for key, value in h.log:
        new.shard.replay(key, value)
    assert new.shard.unfinished() == [d.markers]
    assert d.markers is not None
    done = new.apply(new.shard.complete(d.markers, 5))
    assert done.ok and new.state().state == S.COMPLETE_COMMIT
    assert new.shard.unfinished() == []


def test_complete_refuses_a_stale_plan() -> None:
    h = Harness()
    pid, e = ongoing(h)
    d = h.end(pid, e, commit=False)
    assert d.markers is not None
    h.finish(d)
    assert h.shard.complete(d.markers, 0).error == E.INVALID_TXN_STATE


def test_the_next_transactions_first_add_rides_on_the_completion() -> None:
    """V2: AddPartitionsToTxn that waited on the completion is decided on the completed state and its
    record appended after CompleteCommit in the same decision; replaying both is the state a separate
    completion then add would give."""
    h = Harness()
    pid, e = ongoing(h, version=2)
    end = h.end(pid, e, commit=True, now_ms=5, version=2)
    assert end.markers is not None
    assert h.shard.add_partitions("tx", pid, e + 1, [T1], 6, 2).error == E.CONCURRENT_TRANSACTIONS
    before = dict(h.shard.txns)
    complete = h.shard.complete(end.markers, 9)
    riders = [lambda s: s.add_partitions("tx", pid, e + 1, [T1], 9, 2),
              lambda s: s.add_partitions("tx", pid, e + 1, [U0], 9, 2)]
    combined, taken = h.shard.then(complete, riders)
    assert h.shard.txns == before and not h.shard.pending  # deciding changed nothing
    assert [t is not None and t.ok for t in taken] == [True, True]
    assert combined.records[0] == complete.records[0] and len(combined.records) == 3
    assert combined.pending == S.ONGOING and combined.markers is None
    h.apply(combined)
    m = h.state()
    assert (m.state, m.producer_id, m.producer_epoch, m.partitions) == (S.ONGOING, pid, e + 1, frozenset({T1, U0}))
    assert m.start_ms == 9
    # the same state as the completion and the adds appended one by one
    g = Harness()
    gp, ge = ongoing(g, version=2)
    g.run(g.end(gp, ge, commit=True, now_ms=5, version=2), now_ms=9)
    g.add(gp, ge + 1, [T1], now_ms=9, version=2)
    g.add(gp, ge + 1, [U0], now_ms=9, version=2)
    assert g.state() == m


def test_a_refused_rider_is_left_out_of_the_completion() -> None:
    h = Harness()
    pid, e = ongoing(h, version=2)
    end = h.end(pid, e, commit=True, version=2)
    assert end.markers is not None
    complete = h.shard.complete(end.markers, 1)
    combined, taken = h.shard.then(complete, [lambda s: s.add_partitions("tx", pid, e, [T1], 1, 2),  # old epoch
                                              lambda s: s.add_partitions("other", 1, 0, [T1], 1, 2),
                                              lambda s: s.end_txn("tx", pid, e + 1, True, 1, 2)])
    assert taken[0] is None and taken[1] is None and taken[2] is None
    assert combined == complete
    h.apply(combined)
    assert h.state().state == S.COMPLETE_COMMIT


def test_replay_skips_unknown_key_versions() -> None:
    h = Harness()
    h.shard.replay(b"\x00\x05\x00\x01x", encode_value(TxnLogValue(1, 0, 1, 0, None, 0, -1)))
    assert h.shard.txns == {}


def test_old_clients_are_told_invalid_producer_epoch() -> None:
    assert for_request_version(E.PRODUCER_FENCED, "EndTxn", 1) == E.INVALID_PRODUCER_EPOCH
    assert for_request_version(E.PRODUCER_FENCED, "EndTxn", 2) == E.PRODUCER_FENCED
    assert for_request_version(E.PRODUCER_FENCED, "InitProducerId", 3) == E.INVALID_PRODUCER_EPOCH
    assert for_request_version(E.CONCURRENT_TRANSACTIONS, "EndTxn", 0) == E.CONCURRENT_TRANSACTIONS
