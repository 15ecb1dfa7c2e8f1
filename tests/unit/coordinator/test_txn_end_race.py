"""Transactions V2: the producer's next EndTxn while the markers of its previous one are still being written.

The coordinator answers EndTxn once PrepareCommit/PrepareAbort is written, with the bumped epoch; the
markers and CompleteCommit/CompleteAbort follow. A producer that commits, begins again and at once
aborts (or commits) sends EndTxn with the bumped epoch while the state is still PrepareX at that
epoch. Kafka 4.x (TransactionCoordinator.endTransaction, V2 path) answers CONCURRENT_TRANSACTIONS
there -- its pending CompleteX is checked before the producer id and epoch -- and the client retries
until the markers are done. It is not PRODUCER_FENCED (fatal to the client)."""

from __future__ import annotations

import itertools

from services.coordinator.txn.config import TxnConfig
from services.coordinator.txn.decisions import Decision, MarkerPlan
from services.coordinator.txn.records import encode_key, encode_value
from services.coordinator.txn.shard import TxnShard
from services.coordinator.txn.state import TxnMetadata, TxnState
from shared.errors import ErrorCode
from shared.types import TopicPartition

S, E = TxnState, ErrorCode
T0 = TopicPartition("t", 0)
T1 = TopicPartition("t", 1)
V2 = 2


class Log:
    """A shard and its log: a decision is begun, its records appended and replayed, as the service does."""

    def __init__(self) -> None:
        self.pids = itertools.count(1000)
        self.shard = TxnShard(0, TxnConfig(), lambda: next(self.pids))

    def apply(self, d: Decision) -> Decision:
        self.shard.begin(d)
        for key, value in d.records:
            self.shard.replay(key, value)
        return d

    def end(self, pid: int, epoch: int, commit: bool, version: int = V2) -> Decision:
        return self.apply(self.shard.end_txn("tx", pid, epoch, commit, 0, version))

    def complete(self, plan: MarkerPlan) -> Decision:
        """The markers of ``plan`` are written: append the completion."""
        return self.apply(self.shard.complete(plan, 0))

    def state(self) -> TxnMetadata:
        return self.shard.txns["tx"]


def committed_not_completed(log: Log) -> tuple[int, int, Decision]:
    """init, a partition added (V2), EndTxn(commit) at V2: PrepareCommit at the bumped epoch, markers not
    yet written. Returns the producer id, the epoch before the commit and the commit's decision."""
    init = log.apply(log.shard.init_producer_id("tx", 60_000, 0))
    pid, e = init.producer_id, init.producer_epoch
    assert log.apply(log.shard.add_partitions("tx", pid, e, [T0], 0, V2)).ok
    commit = log.end(pid, e, commit=True)
    assert commit.ok and (commit.producer_id, commit.producer_epoch) == (pid, e + 1)
    assert commit.markers == MarkerPlan("tx", pid, e + 1, True, frozenset({T0}))
    m = log.state()
    assert (m.state, m.producer_epoch) == (S.PREPARE_COMMIT, e + 1)
    return pid, e, commit


def assert_waits(d: Decision) -> None:
    assert d.error == E.CONCURRENT_TRANSACTIONS, (d.error, d.message)
    assert not d.records and d.markers is None


def test_next_transactions_end_txn_at_the_bumped_epoch_waits_for_the_markers() -> None:
    log = Log()
    pid, e, commit = committed_not_completed(log)
    before = log.state()
    assert_waits(log.end(pid, e + 1, commit=False))  # the reported race: abort right after commit
    assert_waits(log.end(pid, e + 1, commit=True))
    assert_waits(log.end(pid, e, commit=True))  # the retry of the commit that bumped the epoch
    assert log.state() == before and not log.shard.pending

    log.complete(commit.markers)
    assert (log.state().state, log.state().producer_epoch) == (S.COMPLETE_COMMIT, e + 1)
    retry = log.end(pid, e, commit=True)  # the retry now sees the commit done
    assert retry.ok and not retry.records and (retry.producer_id, retry.producer_epoch) == (pid, e + 1)
    assert log.end(pid, e + 1, commit=True).error == E.INVALID_TXN_STATE  # nothing to commit (as Kafka)
    abort = log.end(pid, e + 1, commit=False)  # the client's retried abort goes through
    assert abort.ok and (abort.producer_id, abort.producer_epoch) == (pid, e + 2)
    assert log.state().state == S.PREPARE_ABORT


def test_abort_of_the_next_transaction_with_records_after_the_completion() -> None:
    """The brief's sequence with records: the partition leader adds the next transaction's partition
    (it rides on the completion), the client's abort waits, then aborts that transaction."""
    log = Log()
    pid, e, commit = committed_not_completed(log)
    add = log.shard.add_partitions("tx", pid, e + 1, [T1], 0, V2)
    assert add.error == E.CONCURRENT_TRANSACTIONS  # the leader waits for the completion too
    assert_waits(log.end(pid, e + 1, commit=False))

    done, [rode] = log.shard.then(log.shard.complete(commit.markers, 0),
                                  [lambda s: s.add_partitions("tx", pid, e + 1, [T1], 0, V2)])
    assert rode is not None
    log.shard.begin(done)  # being written: the id is busy
    assert_waits(log.end(pid, e + 1, commit=False))
    log.apply(done)
    assert (log.state().state, log.state().partitions) == (S.ONGOING, frozenset({T1}))

    abort = log.end(pid, e + 1, commit=False)
    assert abort.ok and abort.producer_epoch == e + 2
    assert abort.markers == MarkerPlan("tx", pid, e + 2, False, frozenset({T1}))


def test_same_after_a_v2_abort() -> None:
    log = Log()
    init = log.apply(log.shard.init_producer_id("tx", 60_000, 0))
    pid, e = init.producer_id, init.producer_epoch
    log.apply(log.shard.add_partitions("tx", pid, e, [T0], 0, V2))
    abort = log.end(pid, e, commit=False)
    assert abort.ok and log.state().state == S.PREPARE_ABORT
    assert_waits(log.end(pid, e + 1, commit=False))
    assert_waits(log.end(pid, e + 1, commit=True))
    assert_waits(log.end(pid, e, commit=False))  # retry of the bumping abort
    log.complete(abort.markers)
    assert log.end(pid, e + 1, commit=False).ok


def test_exhausted_epoch_next_producer_id_waits_too() -> None:
    """The same race when the commit moved the producer to a new producer id: it continues with
    (new id, 0) while PrepareCommit still holds the old id."""
    log = Log()
    log.apply(Decision("tx", records=((encode_key("tx"), encode_value(TxnMetadata(
        "tx", 7, 32766, 60_000, S.ONGOING, frozenset({T0}), start_ms=0, last_update_ms=0,
        client_version=V2).to_value())),)))
    commit = log.end(7, 32766, commit=True)
    assert commit.ok and (commit.producer_id, commit.producer_epoch) == (1000, 0)
    assert_waits(log.end(1000, 0, commit=False))
    assert_waits(log.end(1000, 0, commit=True))
    assert_waits(log.end(7, 32766, commit=True))  # retry
    log.complete(commit.markers)
    m = log.state()
    assert (m.producer_id, m.producer_epoch, m.previous_producer_id) == (1000, 0, 7)
    assert log.end(1000, 0, commit=False).ok


def test_other_answers_while_prepared_are_unchanged() -> None:
    log = Log()
    pid, e, _ = committed_not_completed(log)
    assert log.end(pid, e + 2, commit=False).error == E.PRODUCER_FENCED  # never handed out
    assert log.end(pid, e - 1, commit=False).error == E.PRODUCER_FENCED  # older than the retry
    assert log.end(pid + 1, e + 1, commit=False).error == E.INVALID_PRODUCER_ID_MAPPING
    assert log.end(pid, e, commit=False).error == E.INVALID_TXN_STATE  # a retry naming the other result


def test_v1_is_unchanged() -> None:
    log = Log()
    init = log.apply(log.shard.init_producer_id("tx", 60_000, 0))
    pid, e = init.producer_id, init.producer_epoch
    log.apply(log.shard.add_partitions("tx", pid, e, [T0], 0, 1))
    commit = log.end(pid, e, commit=True, version=1)
    assert commit.ok and commit.producer_epoch == e  # V1 keeps the epoch
    assert log.end(pid, e, commit=True, version=1).error == E.CONCURRENT_TRANSACTIONS
    assert log.end(pid, e, commit=False, version=1).error == E.INVALID_TXN_STATE
    assert log.end(pid, e + 1, commit=False, version=1).error == E.PRODUCER_FENCED
