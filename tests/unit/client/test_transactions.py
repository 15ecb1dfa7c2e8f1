"""The transactional producer's state machine (a pure table), KIP-1050's error classes, and the
transaction manager's rules with a scripted coordinator (no network): V2 restarts sequences at the
epoch EndTxn answers, V1 bumps the epoch after aborting a batch of unknown outcome, send refuses
records outside a transaction, a failed batch makes the transaction abortable, a fenced one fatal."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from shared.client.transactions import (
    TRANSITIONS,
    ConsumerGroupMetadata,
    ErrorKind,
    FatalTransactionError,
    IllegalTransactionStateError,
    RetriableTransactionError,
    TransactionAbortableError,
    TransactionManager,
    TxnState,
    classify,
    next_state,
    transaction_error,
)
from shared.errors import ErrorCode, TidelogError
from shared.proto import transactions_pb2 as tpb
from shared.types import TopicPartition

S = TxnState
E = ErrorCode
TP0, TP1 = TopicPartition("t", 0), TopicPartition("t", 1)

# Kafka's TransactionManager.isTransitionValid, written out pair by pair (PREPARED_TRANSACTION, KIP-939, left out)
ALLOWED = {
    (S.UNINITIALIZED, S.INITIALIZING), (S.INITIALIZING, S.INITIALIZING), (S.ABORTING_TRANSACTION, S.INITIALIZING),
    (S.INITIALIZING, S.READY), (S.COMMITTING_TRANSACTION, S.READY), (S.ABORTING_TRANSACTION, S.READY),
    (S.READY, S.IN_TRANSACTION),
    (S.IN_TRANSACTION, S.COMMITTING_TRANSACTION), (S.COMMITTING_TRANSACTION, S.COMMITTING_TRANSACTION),
    (S.IN_TRANSACTION, S.ABORTING_TRANSACTION), (S.ABORTABLE_ERROR, S.ABORTING_TRANSACTION),
    (S.ABORTING_TRANSACTION, S.ABORTING_TRANSACTION),
    (S.IN_TRANSACTION, S.ABORTABLE_ERROR), (S.COMMITTING_TRANSACTION, S.ABORTABLE_ERROR),
    (S.ABORTABLE_ERROR, S.ABORTABLE_ERROR),
} | {(s, S.FATAL_ERROR) for s in TxnState}


@pytest.mark.parametrize("source", list(TxnState))
@pytest.mark.parametrize("target", list(TxnState))
def test_the_transition_table(source: TxnState, target: TxnState) -> None:
    if (source, target) in ALLOWED:
        assert next_state(source, target) is target
    else:
        with pytest.raises(IllegalTransactionStateError):
            next_state(source, target)


def test_every_state_has_a_row_and_nothing_leaves_fatal_but_fatal() -> None:
    assert set(TRANSITIONS) == set(TxnState)
    assert [t for t, sources in TRANSITIONS.items() if S.FATAL_ERROR in sources] == [S.FATAL_ERROR]


@pytest.mark.parametrize(("code", "produce", "kind"), [
    (E.PRODUCER_FENCED, False, ErrorKind.FATAL),
    (E.PRODUCER_FENCED, True, ErrorKind.FATAL),
    (E.INVALID_PRODUCER_EPOCH, True, ErrorKind.FATAL),
    (E.INVALID_PRODUCER_EPOCH, False, ErrorKind.FATAL),
    (E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, False, ErrorKind.FATAL),
    (E.CLUSTER_AUTHORIZATION_FAILED, True, ErrorKind.FATAL),
    (E.INVALID_TXN_STATE, False, ErrorKind.FATAL),
    (E.UNKNOWN_SERVER_ERROR, False, ErrorKind.FATAL),
    (E.TRANSACTION_ABORTABLE, False, ErrorKind.ABORTABLE),
    (E.TRANSACTION_ABORTABLE, True, ErrorKind.ABORTABLE),
    (E.TOPIC_AUTHORIZATION_FAILED, False, ErrorKind.ABORTABLE),
    (E.GROUP_AUTHORIZATION_FAILED, False, ErrorKind.ABORTABLE),
    (E.UNKNOWN_PRODUCER_ID, False, ErrorKind.ABORTABLE),
    (E.INVALID_PRODUCER_ID_MAPPING, False, ErrorKind.ABORTABLE),
    (E.UNKNOWN_MEMBER_ID, False, ErrorKind.ABORTABLE),
    (E.ILLEGAL_GENERATION, False, ErrorKind.ABORTABLE),
    (E.FENCED_INSTANCE_ID, False, ErrorKind.ABORTABLE),
    (E.STALE_MEMBER_EPOCH, False, ErrorKind.ABORTABLE),
    (E.NOT_COORDINATOR, False, ErrorKind.RETRIABLE),
    (E.COORDINATOR_LOAD_IN_PROGRESS, False, ErrorKind.RETRIABLE),
    (E.COORDINATOR_NOT_AVAILABLE, False, ErrorKind.RETRIABLE),
    (E.CONCURRENT_TRANSACTIONS, False, ErrorKind.RETRIABLE),
    (E.REQUEST_TIMED_OUT, False, ErrorKind.RETRIABLE),
    # a batch of the transaction that failed for good (retries exhausted, timed out, refused): abortable
    (E.REQUEST_TIMED_OUT, True, ErrorKind.ABORTABLE),
    (E.NOT_ENOUGH_REPLICAS, True, ErrorKind.ABORTABLE),
    (E.OUT_OF_ORDER_SEQUENCE_NUMBER, True, ErrorKind.ABORTABLE),
    (E.INVALID_TXN_STATE, True, ErrorKind.ABORTABLE),
    (E.MESSAGE_TOO_LARGE, True, ErrorKind.ABORTABLE),
    (9999, False, ErrorKind.FATAL),
])
def test_kip_1050_classes(code: int, produce: bool, kind: ErrorKind) -> None:
    assert classify(code, produce=produce) is kind


def test_errors_carry_kind_code_and_cause() -> None:
    cause = TidelogError("fenced", code=E.PRODUCER_FENCED)
    err = transaction_error(cause, context="EndTxn")
    assert isinstance(err, FatalTransactionError) and err.fatal and not err.txn_requires_abort and not err.retriable
    assert err.code == E.PRODUCER_FENCED and err.__cause__ is cause
    ab = transaction_error(TidelogError("x", code=E.TRANSACTION_ABORTABLE))
    assert isinstance(ab, TransactionAbortableError) and ab.txn_requires_abort
    assert transaction_error(ab) is ab


# -- the manager, with a scripted coordinator -----------------------------------------------------


@dataclass
class ScriptedCoordinator:
    """Answers by method name from queues; records the requests."""

    answers: dict[str, list[Any]] = field(default_factory=dict)
    requests: list[tuple[str, Any]] = field(default_factory=list)

    def call(self, method: str, request: Any, deadline: float, error_of: Any = None) -> Any:
        self.requests.append((method, request))
        queue = self.answers.get(method)
        if not queue:
            raise AssertionError(f"unexpected {method}")
        answer = queue.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def methods(self) -> list[str]:
        return [m for m, _ in self.requests]

    def close(self) -> None:
        pass


@dataclass(eq=False)
class Batch:
    tp: TopicPartition
    count: int = 1
    base_sequence: int = -1
    encoded: tuple[bytes, bytes] | None = None


def manager(version: int = 2, **answers: list[Any]) -> tuple[TransactionManager, ScriptedCoordinator]:
    tm = TransactionManager(object(), "app-1", transaction_version=version, max_block_s=1)  # type: ignore[arg-type]
    coord = ScriptedCoordinator({"InitProducerId": [tpb.TxnInitProducerIdResponse(producer_id=7, producer_epoch=3)],
                                 **answers})
    tm.coordinator = coord  # type: ignore[assignment]
    tm.init_transactions()
    return tm, coord


def no_flush(timeout: float) -> None:
    pass


def no_unsent(error: BaseException) -> None:
    pass


def send(tm: TransactionManager, tp: TopicPartition, count: int = 1) -> Batch:
    """What Producer.send and the sender do for a batch: add the partition, then take sequence numbers."""
    tm.maybe_add_partition(tp)
    b = Batch(tp, count)
    tm.encode(b, lambda pid, epoch, seq: (b"%d/%d/%d" % (pid, epoch, seq), b""))
    return b


def test_init_then_send_outside_a_transaction_is_refused() -> None:
    tm, coord = manager()
    assert (tm.state, tm.producer_id, tm.producer_epoch) == (S.READY, 7, 3)
    req = coord.requests[0][1]
    assert (req.transactional_id, req.transaction_timeout_ms, req.client_transaction_version) == ("app-1", 60_000, 2)
    with pytest.raises(IllegalTransactionStateError):
        tm.maybe_add_partition(TP0)
    with pytest.raises(IllegalTransactionStateError):
        tm.commit_transaction(no_flush)
    with pytest.raises(IllegalTransactionStateError):
        tm.init_transactions()  # only once
    tm.begin_transaction()
    with pytest.raises(IllegalTransactionStateError):
        tm.begin_transaction()


def test_v2_commit_takes_the_answered_epoch_and_restarts_sequences() -> None:
    tm, coord = manager(EndTxn=[tpb.EndTxnResponse(producer_id=7, producer_epoch=4)])
    tm.begin_transaction()
    b = send(tm, TP0, 5)
    assert b.encoded == (b"7/3/0", b"")
    tm.acknowledged(b)
    assert tm.next_sequence(TP0) == 5
    flushed: list[float] = []
    tm.commit_transaction(flushed.append)
    assert flushed == [1] and tm.state is S.READY
    assert coord.methods() == ["InitProducerId", "EndTxn"]  # V2: no AddPartitionsToTxn
    end = coord.requests[-1][1]
    assert (end.producer_id, end.producer_epoch, end.committed, end.client_transaction_version) == (7, 3, True, 2)
    assert (tm.producer_id, tm.producer_epoch, tm.next_sequence(TP0)) == (7, 4, 0)
    tm.begin_transaction()
    assert send(tm, TP0).encoded == (b"7/4/0", b"")


def test_an_empty_transaction_ends_without_end_txn() -> None:
    tm, coord = manager()
    tm.begin_transaction()
    tm.commit_transaction(no_flush)
    tm.begin_transaction()
    tm.abort_transaction(no_unsent, no_flush)
    assert coord.methods() == ["InitProducerId"] and tm.state is S.READY


def test_a_failed_batch_makes_the_transaction_abortable_and_abort_recovers() -> None:
    tm, coord = manager(EndTxn=[tpb.EndTxnResponse(producer_id=7, producer_epoch=4)])
    tm.begin_transaction()
    b = send(tm, TP1)
    tm.completed(b, unwritten=False)
    tm.failed(b, TidelogError("expired", code=E.REQUEST_TIMED_OUT))
    assert tm.state is S.ABORTABLE_ERROR and tm.doomed() is tm.last_error
    with pytest.raises(TransactionAbortableError):
        tm.commit_transaction(no_flush)
    with pytest.raises(TransactionAbortableError):
        tm.maybe_add_partition(TP0)
    with pytest.raises(TransactionAbortableError):
        tm.send_offsets_to_transaction({TP0: 1}, ConsumerGroupMetadata("g"))
    dropped: list[BaseException] = []
    tm.abort_transaction(dropped.append, no_flush)
    assert isinstance(dropped[0], TransactionAbortableError)
    assert coord.requests[-1][1].committed is False
    assert (tm.state, tm.producer_epoch, tm.doomed()) == (S.READY, 4, None)
    tm.begin_transaction()  # and go on


def test_a_batch_failing_during_commit_makes_commit_raise_abortable() -> None:
    tm, coord = manager()
    tm.begin_transaction()
    b = send(tm, TP0)

    def flush(timeout: float) -> None:  # the batch fails while commit_transaction flushes
        tm.completed(b, unwritten=True)
        tm.failed(b, TidelogError("refused", code=E.TRANSACTION_ABORTABLE))

    with pytest.raises(TransactionAbortableError) as info:
        tm.commit_transaction(flush)
    assert info.value.code == E.TRANSACTION_ABORTABLE and tm.state is S.ABORTABLE_ERROR
    assert "EndTxn" not in coord.methods()


def test_a_fenced_batch_is_fatal_for_good() -> None:
    tm, _ = manager()
    tm.begin_transaction()
    b = send(tm, TP0)
    tm.completed(b, unwritten=True)
    tm.failed(b, TidelogError("old epoch", code=E.INVALID_PRODUCER_EPOCH))
    assert tm.state is S.FATAL_ERROR
    for call in (lambda: tm.commit_transaction(no_flush), lambda: tm.abort_transaction(no_unsent, no_flush),
                 tm.begin_transaction, lambda: tm.maybe_add_partition(TP0)):
        with pytest.raises(FatalTransactionError) as info:
            call()
        assert info.value.code == E.INVALID_PRODUCER_EPOCH


def test_end_txn_fenced_is_fatal() -> None:
    tm, _ = manager(EndTxn=[tpb.EndTxnResponse(error_code=E.PRODUCER_FENCED, error_message="newer epoch")])
    tm.begin_transaction()
    send(tm, TP0)
    with pytest.raises(FatalTransactionError):
        tm.commit_transaction(no_flush)
    assert tm.state is S.FATAL_ERROR


def test_a_timed_out_commit_can_be_called_again() -> None:
    tm, coord = manager(EndTxn=[RetriableTransactionError("still loading", E.COORDINATOR_LOAD_IN_PROGRESS),
                                tpb.EndTxnResponse(producer_id=7, producer_epoch=4)])
    tm.begin_transaction()
    send(tm, TP0)
    with pytest.raises(RetriableTransactionError):
        tm.commit_transaction(no_flush)
    assert tm.state is S.COMMITTING_TRANSACTION
    tm.commit_transaction(no_flush)
    assert tm.state is S.READY and coord.methods().count("EndTxn") == 2


def test_v1_adds_partitions_before_draining_and_bumps_the_epoch_after_an_unknown_outcome() -> None:
    added = tpb.AddPartitionsToTxnResponse(results=[tpb.TxnTopicResult(name="t", partitions=[
        tpb.TxnPartitionResult(partition=0), tpb.TxnPartitionResult(partition=1, error_code=E.CONCURRENT_TRANSACTIONS)])])
    again = tpb.AddPartitionsToTxnResponse(results=[tpb.TxnTopicResult(name="t", partitions=[
        tpb.TxnPartitionResult(partition=1)])])
    tm, coord = manager(1, AddPartitionsToTxn=[added, again], EndTxn=[tpb.EndTxnResponse()],
                        InitProducerId=[tpb.TxnInitProducerIdResponse(producer_id=7, producer_epoch=3),
                                        tpb.TxnInitProducerIdResponse(producer_id=7, producer_epoch=4)])
    assert tm.before_drain() == set()
    tm.begin_transaction()
    tm.maybe_add_partition(TP0)
    tm.maybe_add_partition(TP1)
    assert tm.before_drain() == {TP1}  # TP0 added; TP1 waits (retriable)
    assert tm.before_drain() == set()
    b = send(tm, TP0)
    tm.completed(b, unwritten=False)  # may be written: the epoch must move after the abort (KIP-360)
    tm.failed(b, TidelogError("timed out", code=E.REQUEST_TIMED_OUT))
    tm.abort_transaction(no_unsent, no_flush)
    assert coord.methods() == ["InitProducerId", "AddPartitionsToTxn", "AddPartitionsToTxn", "EndTxn", "InitProducerId"]
    bump = coord.requests[-1][1]
    assert (bump.producer_id, bump.producer_epoch, bump.client_transaction_version) == (7, 3, 1)
    assert (tm.state, tm.producer_epoch, tm.next_sequence(TP0)) == (S.READY, 4, 0)


def test_v1_a_partition_first_sent_to_while_others_are_being_added_waits_for_its_own_add() -> None:
    # CI failure of 5 December: the sender drained TP1's batch on a snapshot taken before the
    # application's send added TP1, so the leader saw it before AddPartitionsToTxn and answered
    # TRANSACTION_ABORTABLE. The sender now asks ``held`` as it drains each batch.
    tm, coord = manager(1, AddPartitionsToTxn=[tpb.AddPartitionsToTxnResponse(results=[tpb.TxnTopicResult(
        name="t", partitions=[tpb.TxnPartitionResult(partition=0)])])])
    tm.begin_transaction()
    tm.maybe_add_partition(TP0)
    real_call = coord.call

    def call_while_the_application_sends(method: str, request: Any, deadline: float, **kw: Any) -> Any:
        tm.maybe_add_partition(TP1)  # the application's send() on another thread, mid-request
        return real_call(method, request, deadline, **kw)

    coord.call = call_while_the_application_sends
    assert tm.before_drain() == set()  # TP0 was added; TP1 was not asked for
    assert (tm.held(TP0), tm.held(TP1)) == (False, True)


def test_send_offsets_sends_add_offsets_then_the_members_commit() -> None:
    tm, coord = manager(AddOffsetsToTxn=[tpb.AddOffsetsToTxnResponse(error_code=E.GROUP_AUTHORIZATION_FAILED)])
    tm.begin_transaction()
    with pytest.raises(TransactionAbortableError):
        tm.send_offsets_to_transaction({TP0: 5}, ConsumerGroupMetadata("g", 3, "m-1", "i-1"))
    assert coord.requests[-1][1].group_id == "g" and tm.state is S.ABORTABLE_ERROR


def test_idempotent_state_hooks_are_no_ops() -> None:
    from shared.client.idempotence import IdempotenceState

    st = IdempotenceState()
    assert st.transactional is False and st.before_drain() == set() and st.doomed() is None
    st.failed(Batch(TP0), TidelogError("x"))
