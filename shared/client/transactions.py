"""The transactional producer's transaction manager (Kafka's ``TransactionManager``).

A ``Producer(transactional_id=...)`` hands a ``TransactionManager`` to its sender in place of
``IdempotenceState`` (the sender knows both only as ``idempotence.ProducerState``): it keeps the same
books (producer id, epoch, sequence numbers, in-flight counts) and adds the transaction's state and
the calls to the transaction coordinator (``shared/proto/transactions.proto``), found with
``FindCoordinator(key_type=1)`` and found again after NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE or
COORDINATOR_LOAD_IN_PROGRESS.

Usage, as Kafka's::

    p = Producer(servers, transactional_id="my-app-1")
    p.init_transactions()                 # fences earlier producers with this id, ends their transaction
    while True:
        p.begin_transaction()
        try:
            p.send("out", b"...")
            p.send_offsets_to_transaction(offsets, consumer.group_metadata())
            p.commit_transaction()        # flushes first
        except TransactionAbortableError:
            p.abort_transaction()         # and go on with the next transaction
        except FatalTransactionError:
            p.close()                     # fenced or not authorised: this producer is done
            raise

Transactions V2 (KIP-890 part 2, ``transaction_version=2``, the default): the client sends no
AddPartitionsToTxn for data partitions (the partition leader adds them; the produce request carries the
transactional id), the coordinator bumps the epoch at every EndTxn and answers the producer id and
epoch to continue with; sequence numbers then restart at 0. V1: partitions are added with
AddPartitionsToTxn before their first batch is sent. Both send AddOffsetsToTxn for
``send_offsets_to_transaction``, then TxnOffsetCommit (KIP-447: the consumer's generation, member id
and instance id, so a zombie member's commit is refused) to the group coordinator.

Errors, classified as KIP-1050 does (``classify``; every error raised by these calls is a
``TransactionError`` with ``kind``, ``code`` and the original ``TidelogError`` as ``__cause__``):

- **retriable** (``RetriableTransactionError``): coordinator moved or loading, concurrent transactions,
  timeouts. Retried inside the call until ``max_block_ms``; if it still fails the state is unchanged and
  the application may call the same method again (Kafka's ``TimeoutException``).
- **abortable** (``TransactionAbortableError``): this transaction cannot commit — a batch failed
  (TRANSACTION_ABORTABLE, a delivery timeout, an unknown producer id, an authorisation failure on a topic
  or group), or the consumer's group membership is stale (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION,
  FENCED_INSTANCE_ID, STALE/FENCED_MEMBER_EPOCH). The application must call ``abort_transaction()``
  and may then go on with new transactions.
- **fatal** (``FatalTransactionError``): the producer must be closed. PRODUCER_FENCED and
  INVALID_PRODUCER_EPOCH (another producer with the same transactional id took over: KIP-1050's
  "application recoverable" — close, and let the new instance work), TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
  CLUSTER_AUTHORIZATION_FAILED (KIP-1050's "invalid configuration"), INVALID_TXN_STATE from the
  coordinator, and any error the protocol does not expect. Every later call raises it again.

Calling a method in the wrong state (``send`` outside a transaction, ``commit_transaction`` before
``begin_transaction``, ...) raises ``IllegalTransactionStateError`` (Kafka's ``IllegalStateException``)
and changes nothing.

The state machine is ``TRANSITIONS``, a pure table (Kafka's states; ``next_state`` checks a move).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

import grpc

from shared.client.cluster import ClusterClient
from shared.client.group_coordinator import GroupCoordinatorClient
from shared.client.group_member import first_commit_error
from shared.client.idempotence import IdempotenceState, SequencedBatch
from shared.errors import RETRIABLE, ErrorCode, TidelogError, error_for
from shared.proto import coordinator_pb2 as cpb
from shared.proto import tidelog_pb2 as pb
from shared.proto import transactions_pb2 as tpb
from shared.proto import transactions_pb2_grpc as tpb_grpc
from shared.types import TopicPartition

log = logging.getLogger(__name__)

COORDINATOR_TYPE_TRANSACTION = 1


# -- the state machine ------------------------------------------------------------------------------


class TxnState(Enum):
    """Kafka's ``TransactionManager.State`` (client side)."""

    UNINITIALIZED = "UNINITIALIZED"
    INITIALIZING = "INITIALIZING"
    READY = "READY"
    IN_TRANSACTION = "IN_TRANSACTION"
    COMMITTING_TRANSACTION = "COMMITTING_TRANSACTION"
    ABORTING_TRANSACTION = "ABORTING_TRANSACTION"
    ABORTABLE_ERROR = "ABORTABLE_ERROR"
    FATAL_ERROR = "FATAL_ERROR"


S = TxnState

#: target state -> the states it may be entered from (Kafka's ``isTransitionValid``); FATAL_ERROR from any.
TRANSITIONS: Mapping[TxnState, frozenset[TxnState]] = {
    S.UNINITIALIZED: frozenset(),
    # init_transactions(); again after a timed-out attempt; after an abort that needs a new epoch (V1, KIP-360)
    S.INITIALIZING: frozenset({S.UNINITIALIZED, S.INITIALIZING, S.ABORTING_TRANSACTION}),
    S.READY: frozenset({S.INITIALIZING, S.COMMITTING_TRANSACTION, S.ABORTING_TRANSACTION}),
    S.IN_TRANSACTION: frozenset({S.READY}),
    S.COMMITTING_TRANSACTION: frozenset({S.IN_TRANSACTION, S.COMMITTING_TRANSACTION}),
    S.ABORTING_TRANSACTION: frozenset({S.IN_TRANSACTION, S.ABORTABLE_ERROR, S.ABORTING_TRANSACTION}),
    S.ABORTABLE_ERROR: frozenset({S.IN_TRANSACTION, S.COMMITTING_TRANSACTION, S.ABORTABLE_ERROR}),
    S.FATAL_ERROR: frozenset(TxnState),
}


class IllegalTransactionStateError(RuntimeError):
    """A method called in a state that does not allow it (Kafka's ``IllegalStateException``)."""


def next_state(source: TxnState, target: TxnState) -> TxnState:
    """``target`` if the machine may move there from ``source``; else ``IllegalTransactionStateError``."""
    if source not in TRANSITIONS[target]:
        raise IllegalTransactionStateError(f"invalid transition attempted from state {source.name} "
                                           f"to state {target.name}")
    return target


# -- error classification (KIP-1050) ----------------------------------------------------------------


class ErrorKind(Enum):
    RETRIABLE = "retriable"
    ABORTABLE = "abortable"
    FATAL = "fatal"


#: The producer is done: fenced (KIP-1050 "application recoverable": close it, the newer instance works
#: on) or not authorised (KIP-1050 "invalid configuration").
FATAL_CODES = frozenset({
    ErrorCode.PRODUCER_FENCED,
    ErrorCode.INVALID_PRODUCER_EPOCH,
    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
    ErrorCode.TRANSACTION_COORDINATOR_FENCED,
})

#: The transaction cannot commit; abort it and go on.
ABORTABLE_CODES = frozenset({
    ErrorCode.TRANSACTION_ABORTABLE,
    ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    ErrorCode.GROUP_AUTHORIZATION_FAILED,
    ErrorCode.UNKNOWN_PRODUCER_ID,
    ErrorCode.INVALID_PRODUCER_ID_MAPPING,
    ErrorCode.OPERATION_NOT_ATTEMPTED,
    # the consumer's membership is stale (KIP-447's zombie check): Kafka's CommitFailedException
    ErrorCode.UNKNOWN_MEMBER_ID,
    ErrorCode.ILLEGAL_GENERATION,
    ErrorCode.FENCED_INSTANCE_ID,
    ErrorCode.STALE_MEMBER_EPOCH,
    ErrorCode.FENCED_MEMBER_EPOCH,
    ErrorCode.REBALANCE_IN_PROGRESS,
    ErrorCode.OFFSET_METADATA_TOO_LARGE,
    ErrorCode.INVALID_COMMIT_OFFSET_SIZE,
})


def classify(code: int, *, produce: bool = False) -> ErrorKind:
    """KIP-1050's class of error ``code``. ``produce``: the answer to a batch of the transaction, whose
    every non-fatal failure (retries exhausted or timed out included) only dooms the transaction;
    otherwise an answer of the transaction or group coordinator, where an unexpected error is fatal."""
    try:
        c = ErrorCode(code)
    except ValueError:
        return ErrorKind.ABORTABLE if produce else ErrorKind.FATAL
    if c in FATAL_CODES:
        return ErrorKind.FATAL
    if produce:
        return ErrorKind.ABORTABLE
    if c in RETRIABLE or c == ErrorCode.REQUEST_TIMED_OUT:
        return ErrorKind.RETRIABLE
    if c in ABORTABLE_CODES:
        return ErrorKind.ABORTABLE
    return ErrorKind.FATAL


class TransactionError(Exception):
    """An error of a transactional producer call; ``kind`` says what the application must do, ``code`` is
    Kafka's error code, ``__cause__`` the ``TidelogError`` answered. The flags mirror confluent-kafka's
    ``KafkaError.retriable()``, ``txn_requires_abort()`` and ``fatal()``."""

    kind: ErrorKind = ErrorKind.FATAL

    def __init__(self, message: str, code: int = ErrorCode.UNKNOWN_SERVER_ERROR) -> None:
        super().__init__(message)
        self.code = code

    @property
    def retriable(self) -> bool:
        return self.kind is ErrorKind.RETRIABLE

    @property
    def txn_requires_abort(self) -> bool:
        return self.kind is ErrorKind.ABORTABLE

    @property
    def fatal(self) -> bool:
        return self.kind is ErrorKind.FATAL


class RetriableTransactionError(TransactionError):
    """Not done within ``max_block_ms``; nothing changed: call the same method again."""

    kind = ErrorKind.RETRIABLE


class TransactionAbortableError(TransactionError):
    """The transaction cannot commit: call ``abort_transaction()``, then go on."""

    kind = ErrorKind.ABORTABLE


class FatalTransactionError(TransactionError):
    """The producer can do nothing more (fenced, not authorised, ...): close it."""

    kind = ErrorKind.FATAL


_ERROR_CLASSES = {ErrorKind.RETRIABLE: RetriableTransactionError, ErrorKind.ABORTABLE: TransactionAbortableError,
                  ErrorKind.FATAL: FatalTransactionError}


def transaction_error(cause: BaseException, *, produce: bool = False, context: str = "") -> TransactionError:
    """The ``TransactionError`` for ``cause`` (a ``TidelogError`` keeps its code), with ``__cause__`` set."""
    if isinstance(cause, TransactionError):
        return cause
    code = cause.code if isinstance(cause, TidelogError) else ErrorCode.UNKNOWN_SERVER_ERROR
    kind = classify(code, produce=produce)
    err = _ERROR_CLASSES[kind](f"{context}: {cause}" if context else str(cause), code)
    err.__cause__ = cause
    return err


@dataclass(frozen=True)
class ConsumerGroupMetadata:
    """What ``send_offsets_to_transaction`` needs of the consumer (Kafka's ``ConsumerGroupMetadata``):
    ``generation_id`` is the member epoch; -1 and an empty ``member_id`` skip the zombie check."""

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


@dataclass(frozen=True)
class TransactionHandle:
    """An open transaction, flushed, as another process needs it to end the transaction with EndTxn
    (``Producer.transaction_handle()``): a Spark sink's tasks write and hand these to the driver, which
    commits them all once every task succeeded. Picklable.

    Ending it from elsewhere: EndTxn(``transactional_id``, ``producer_id``, ``producer_epoch``,
    ``committed``, ``client_transaction_version=transaction_version``) to the transactional id's
    coordinator. With transactions V2 the coordinator bumps the epoch as it ends the transaction, so the
    same EndTxn sent again (its answer was lost) is recognised as a retry: success if the transaction
    ended the same way, INVALID_TXN_STATE if it ended the other way (aborted on timeout, say); once a
    later transaction of the id began (a new producer's ``init_transactions()`` aborts this one),
    PRODUCER_FENCED (KIP-890: an old EndTxn never ends a later transaction)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    transaction_version: int


# -- the transaction coordinator --------------------------------------------------------------------

REDISCOVER = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS})


class TxnCoordinatorClient:
    """Finds the coordinator of one transactional id (any broker answers FindCoordinator with key type
    1) and calls it, retrying retriable answers until a deadline."""

    def __init__(self, cluster: ClusterClient, transactional_id: str, retry_backoff_s: float = 0.1) -> None:
        self.cluster = cluster
        self.transactional_id = transactional_id
        self.retry_backoff_s = retry_backoff_s
        self._lock = threading.Lock()
        self._channel: grpc.Channel | None = None
        self._stub: tpb_grpc.TransactionCoordinatorStub | None = None

    def _find(self) -> str:
        snap = self.cluster.snapshot if self.cluster.snapshot.brokers else self.cluster.refresh()
        last: TidelogError = TidelogError("no broker answered FindCoordinator", code=ErrorCode.COORDINATOR_NOT_AVAILABLE)
        for addr in list(snap.brokers.values()) + self.cluster.bootstrap:
            stub = self.cluster.reachable_stub(addr)
            if stub is None:
                continue
            try:
                resp = stub.FindCoordinator(pb.FindCoordinatorRequest(
                    group_ids=[self.transactional_id], key_type=COORDINATOR_TYPE_TRANSACTION), timeout=5)
            except grpc.RpcError as exc:
                self.cluster.check_authentication(addr)
                last = TidelogError(f"FindCoordinator: {exc.code()}", code=ErrorCode.NETWORK_EXCEPTION)
                continue
            c = resp.coordinators[0]
            if c.error_code == 0 and c.address:
                return c.address
            last = error_for(c.error_code or ErrorCode.COORDINATOR_NOT_AVAILABLE, c.error_message)
        raise last

    def _current(self) -> tpb_grpc.TransactionCoordinatorStub:
        with self._lock:
            if self._stub is None:
                self._channel = self.cluster.channel(self._find())
                self._stub = tpb_grpc.TransactionCoordinatorStub(self._channel)
            return self._stub

    def reset(self) -> None:
        with self._lock:
            if self._channel is not None:
                self._channel.close()
            self._channel = self._stub = None

    def call(self, method: str, request: Any, deadline: float,
             error_of: Callable[[Any], int] = lambda r: r.error_code) -> Any:
        """The response of ``method`` whose error is not retriable; a retriable one (or a transport
        failure) is retried until ``deadline`` (monotonic), then raised as ``RetriableTransactionError``."""
        backoff = self.retry_backoff_s
        while True:
            try:
                resp = getattr(self._current(), method)(request, timeout=max(1.0, min(30.0, deadline - time.monotonic())))
                code = error_of(resp)
                if code == 0 or classify(code) is not ErrorKind.RETRIABLE:
                    return resp
                err: TidelogError = error_for(code, getattr(resp, "error_message", ""))
                if code in REDISCOVER:
                    self.reset()
            except grpc.RpcError as exc:
                err = TidelogError(f"{method}: {exc.code()}", code=ErrorCode.NETWORK_EXCEPTION)
                self.reset()
            except TidelogError as exc:  # no coordinator found (yet)
                err = exc
            except ValueError as exc:  # the channel was closed under the call
                err = TidelogError(str(exc), code=ErrorCode.NETWORK_EXCEPTION)
            if time.monotonic() + backoff > deadline:
                raise RetriableTransactionError(f"{method} for transactional id {self.transactional_id!r} did not "
                                                f"complete in time: {err}", err.code) from err
            time.sleep(backoff)
            backoff = min(backoff * 2, 1.0)

    def close(self) -> None:
        self.reset()


# -- the manager ------------------------------------------------------------------------------------


class TransactionManager(IdempotenceState):
    """One transactional producer's books and transaction state. The application's thread calls the
    transaction methods; the sender thread calls ``before_drain``, ``doomed``, ``failed`` and the
    ``IdempotenceState`` methods. ``lock`` guards everything."""

    transactional = True

    def __init__(self, cluster: ClusterClient, transactional_id: str, *, transaction_timeout_ms: int = 60_000,
                 transaction_version: int = 2, max_block_s: float = 60.0, retry_backoff_s: float = 0.1) -> None:
        super().__init__()
        if not transactional_id:
            raise ValueError("transactional_id must not be empty")
        if transaction_version not in (1, 2):
            raise ValueError(f"transaction_version must be 1 or 2, got {transaction_version!r}")
        self.cluster = cluster
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.transaction_version = transaction_version
        self.max_block_s = max_block_s
        self.coordinator = TxnCoordinatorClient(cluster, transactional_id, retry_backoff_s)
        self.state = TxnState.UNINITIALIZED
        self.last_error: TransactionError | None = None
        self.partitions: set[TopicPartition] = set()  # in the current transaction (sent to, or added: V1)
        self._pending_add: set[TopicPartition] = set()  # V1: to add before their batches go out
        self._has_work = False  # something was sent or offsets added: EndTxn is needed
        self._epoch_bump_needed = False  # V1: a batch's outcome is unknown; bump the epoch after the abort
        self._groups: dict[str, GroupCoordinatorClient] = {}

    # -- the state machine ------------------------------------------------------------------------

    def _to(self, target: TxnState, error: TransactionError | None = None) -> None:
        with self.lock:
            self._to_locked(target, error)

    def _to_locked(self, target: TxnState, error: TransactionError | None = None) -> None:
        if self.state is TxnState.FATAL_ERROR:
            return  # nothing leaves it
        if target is TxnState.ABORTABLE_ERROR and self.state is TxnState.ABORTING_TRANSACTION:
            return  # already aborting: the abort goes on
        self.state = next_state(self.state, target)
        if error is not None:
            self.last_error = error
        if target in (TxnState.ABORTABLE_ERROR, TxnState.FATAL_ERROR):
            log.warning("transactional id %s: %s error: %s", self.transactional_id, target.name, error)

    def _fail(self, error: TransactionError) -> TransactionError:
        """Enter the error's state (an abortable error outside a transaction is fatal) and return it."""
        with self.lock:
            if error.kind is ErrorKind.FATAL:
                self._to_locked(TxnState.FATAL_ERROR, error)
            elif error.kind is ErrorKind.ABORTABLE:
                if self.state in TRANSITIONS[TxnState.ABORTABLE_ERROR]:
                    self._to_locked(TxnState.ABORTABLE_ERROR, error)
                elif self.state is not TxnState.ABORTING_TRANSACTION:
                    fatal = FatalTransactionError(str(error), error.code)
                    fatal.__cause__ = error.__cause__
                    self._to_locked(TxnState.FATAL_ERROR, fatal)
                    return fatal
        return error

    def _require(self, *allowed: TxnState, what: str) -> None:
        """Raise the last error in an error state, ``IllegalTransactionStateError`` in any other not allowed."""
        with self.lock:
            state, err = self.state, self.last_error
        if state in allowed:
            return
        if state is TxnState.FATAL_ERROR and err is not None:
            raise err
        if state is TxnState.ABORTABLE_ERROR and err is not None:
            raise TransactionAbortableError(f"cannot {what}: the transaction must be aborted ({err})", err.code) from err
        raise IllegalTransactionStateError(f"cannot {what} in state {state.name}")

    def _deadline(self) -> float:
        return time.monotonic() + self.max_block_s

    # -- the application's calls ----------------------------------------------------------------------

    def init_transactions(self) -> None:
        """Get the producer id and epoch of the transactional id (fencing earlier producers with it and
        ending their open transaction)."""
        self._require(TxnState.UNINITIALIZED, TxnState.INITIALIZING, what="initialize transactions")
        self._to(TxnState.INITIALIZING)
        self._init_producer_id(bump=False)
        self._to(TxnState.READY)

    def _init_producer_id(self, bump: bool) -> None:
        req = tpb.TxnInitProducerIdRequest(
            transactional_id=self.transactional_id, transaction_timeout_ms=self.transaction_timeout_ms,
            producer_id=self.producer_id if bump else -1, producer_epoch=self.producer_epoch if bump else -1,
            client_transaction_version=self.transaction_version)
        resp = self.coordinator.call("InitProducerId", req, self._deadline())
        if resp.error_code:
            raise self._fail(transaction_error(error_for(resp.error_code, resp.error_message), context="InitProducerId"))
        self._restart(resp.producer_id, resp.producer_epoch)

    def _restart(self, producer_id: int, producer_epoch: int) -> None:
        """A new producer id or epoch: every partition's sequence starts at 0 again (nothing is in flight)."""
        with self.lock:
            self.producer_id, self.producer_epoch = producer_id, producer_epoch
            self._next_sequence.clear()
            self._acked_next_sequence.clear()
            self._sequenced.clear()
            self._refusals_seen.clear()
            self._reset_needed = False
            self._epoch_bump_needed = False

    def begin_transaction(self) -> None:
        self._require(TxnState.READY, what="begin a transaction")
        with self.lock:
            self._to_locked(TxnState.IN_TRANSACTION)
            self.partitions.clear()
            self._pending_add.clear()
            self._has_work = False

    def maybe_add_partition(self, tp: TopicPartition) -> None:
        """``send()`` is about to queue a record for ``tp`` (Kafka's ``maybeAddPartition``)."""
        state = self.state
        if state is not TxnState.IN_TRANSACTION:
            self._require(TxnState.IN_TRANSACTION, what="send")
        if tp in self.partitions:
            return
        with self.lock:
            self._has_work = True
            if tp not in self.partitions:
                self.partitions.add(tp)
                if self.transaction_version < 2:
                    self._pending_add.add(tp)

    def send_offsets_to_transaction(self, offsets: Mapping[TopicPartition, int], group: ConsumerGroupMetadata) -> None:
        """Commit ``offsets`` (the next offsets to consume) of ``group`` with the transaction: AddOffsetsToTxn,
        then TxnOffsetCommit to the group coordinator with the consumer's membership (KIP-447)."""
        self._require(TxnState.IN_TRANSACTION, what="send offsets to the transaction")
        if not offsets:
            return
        deadline = self._deadline()
        with self.lock:
            self._has_work = True
            pid, epoch = self.producer_id, self.producer_epoch
        resp = self.coordinator.call("AddOffsetsToTxn", tpb.AddOffsetsToTxnRequest(
            transactional_id=self.transactional_id, producer_id=pid, producer_epoch=epoch, group_id=group.group_id,
            client_transaction_version=self.transaction_version), deadline)
        if resp.error_code:
            raise self._fail(transaction_error(error_for(resp.error_code, resp.error_message), context="AddOffsetsToTxn"))
        by: dict[str, list[cpb.OffsetCommitPartition]] = {}
        for tp, off in sorted(offsets.items()):
            by.setdefault(tp.topic, []).append(cpb.OffsetCommitPartition(
                partition=tp.partition, committed_offset=int(getattr(off, "offset", off)), committed_leader_epoch=-1))
        req = cpb.TxnOffsetCommitRequest(
            transactional_id=self.transactional_id, group_id=group.group_id, producer_id=pid, producer_epoch=epoch,
            generation_id=group.generation_id, member_id=group.member_id,
            group_instance_id=group.group_instance_id or "",
            topics=[cpb.OffsetCommitTopic(name=t, partitions=ps) for t, ps in by.items()])
        client = self._groups.get(group.group_id)
        if client is None:
            client = self._groups[group.group_id] = GroupCoordinatorClient(self.cluster, group.group_id)
        backoff = 0.05
        while True:
            try:
                answer = client.call("TxnOffsetCommit", req, deadline_s=max(deadline - time.monotonic(), 0.1))
            except TidelogError as exc:
                raise RetriableTransactionError(f"TxnOffsetCommit: {exc}", exc.code) from exc
            code, message = first_commit_error(answer)
            if code == 0:
                return
            err = error_for(code, message)
            if classify(code) is not ErrorKind.RETRIABLE:
                raise self._fail(transaction_error(err, context="TxnOffsetCommit"))
            if time.monotonic() + backoff > deadline:
                raise RetriableTransactionError(f"TxnOffsetCommit did not complete in time: {err}", code) from err
            time.sleep(backoff)
            backoff = min(backoff * 2, 1.0)

    def commit_transaction(self, flush: Callable[[float], None]) -> None:
        """Flush (every batch of the transaction acknowledged), then EndTxn(commit). A batch that failed
        makes it abortable; a timeout leaves the state as it was (call again)."""
        self._require(TxnState.IN_TRANSACTION, TxnState.COMMITTING_TRANSACTION, what="commit the transaction")
        self._to(TxnState.COMMITTING_TRANSACTION)
        try:
            flush(self.max_block_s)
        except TidelogError as exc:  # KafkaTimeoutError: still sending
            raise RetriableTransactionError(f"commit_transaction: flush did not complete: {exc}", exc.code) from exc
        self._require(TxnState.COMMITTING_TRANSACTION, what="commit the transaction")  # a batch failed meanwhile
        self._end(committed=True)

    def handle(self, flush: Callable[[float], None]) -> TransactionHandle:
        """Flush (every batch of the transaction acknowledged), then the open transaction's handle, for
        another process to end it (see ``TransactionHandle``). A batch that failed makes the transaction
        abortable (raised here); a timeout leaves the state as it was."""
        self._require(TxnState.IN_TRANSACTION, what="hand over the transaction")
        try:
            flush(self.max_block_s)
        except TidelogError as exc:  # KafkaTimeoutError: still sending
            raise RetriableTransactionError(f"transaction_handle: flush did not complete: {exc}", exc.code) from exc
        self._require(TxnState.IN_TRANSACTION, what="hand over the transaction")  # a batch failed meanwhile
        with self.lock:
            return TransactionHandle(self.transactional_id, self.producer_id, self.producer_epoch,
                                     self.transaction_version)

    def abort_transaction(self, abort_unsent: Callable[[BaseException], None], flush: Callable[[float], None]) -> None:
        """Fail the batches not yet sent, wait for those in flight, then EndTxn(abort)."""
        self._require(TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR, TxnState.ABORTING_TRANSACTION,
                      what="abort the transaction")
        self._to(TxnState.ABORTING_TRANSACTION)
        abort_unsent(TransactionAbortableError(f"transaction of {self.transactional_id!r} aborted",
                                               ErrorCode.TRANSACTION_ABORTABLE))
        try:
            flush(self.max_block_s)
        except TidelogError as exc:
            raise RetriableTransactionError(f"abort_transaction: batches in flight did not complete: {exc}",
                                            exc.code) from exc
        self._end(committed=False)

    def _end(self, committed: bool) -> None:
        with self.lock:
            has_work, pid, epoch = self._has_work, self.producer_id, self.producer_epoch
        if has_work:
            resp = self.coordinator.call("EndTxn", tpb.EndTxnRequest(
                transactional_id=self.transactional_id, producer_id=pid, producer_epoch=epoch, committed=committed,
                client_transaction_version=self.transaction_version), self._deadline())
            if resp.error_code:
                raise self._fail(transaction_error(error_for(resp.error_code, resp.error_message), context="EndTxn"))
            if self.transaction_version >= 2 and resp.producer_id >= 0 and resp.producer_epoch >= 0:
                self._restart(resp.producer_id, resp.producer_epoch)  # V2: the next transaction's epoch
        if not committed and self.transaction_version < 2 and self._epoch_bump_needed:
            self._to(TxnState.INITIALIZING)  # KIP-360: a batch's fate is unknown; a new epoch fences it
            self._init_producer_id(bump=True)
        with self.lock:
            self.partitions.clear()
            self._pending_add.clear()
            self._has_work = False
            self._to_locked(TxnState.READY)

    def close(self) -> None:
        self.coordinator.close()
        for c in self._groups.values():
            c.close()

    # -- the sender's seam (ProducerState) --------------------------------------------------------------

    @property
    def reset_needed(self) -> bool:
        """Never: a transactional producer does not take a new producer id on its own; a batch of unknown
        outcome makes the transaction abortable instead (the abort bumps the epoch)."""
        return False

    def completed(self, batch: SequencedBatch, unwritten: bool) -> None:
        with self.lock:
            if batch.base_sequence < 0:
                return
            if not unwritten:
                self._epoch_bump_needed = True
            self._forget(batch, refused=unwritten)

    def failed(self, batch: SequencedBatch, error: BaseException) -> None:
        """A batch of the transaction failed for good: the transaction cannot commit (or, fenced, nothing can)."""
        if self.state is TxnState.ABORTING_TRANSACTION:
            return
        self._fail(transaction_error(error, produce=True, context=f"{batch.tp}"))

    def doomed(self) -> BaseException | None:
        """The error to fail unsent batches with (the transaction is in an error state), else None."""
        state = self.state
        if state is TxnState.ABORTABLE_ERROR or state is TxnState.FATAL_ERROR:
            return self.last_error
        return None

    def before_drain(self) -> set[TopicPartition]:
        """V1: add the transaction's new partitions with AddPartitionsToTxn; the partitions still to add
        (their batches wait). V2: none (the leader adds them)."""
        if not self._pending_add:
            return set()
        with self.lock:
            pending = set(self._pending_add)
            pid, epoch, state = self.producer_id, self.producer_epoch, self.state
        if state is not TxnState.IN_TRANSACTION and state is not TxnState.COMMITTING_TRANSACTION:
            return pending
        topics: dict[str, list[int]] = {}
        for tp in sorted(pending):
            topics.setdefault(tp.topic, []).append(tp.partition)
        try:
            resp = self.coordinator.call("AddPartitionsToTxn", tpb.AddPartitionsToTxnRequest(
                transactional_id=self.transactional_id, producer_id=pid, producer_epoch=epoch,
                client_transaction_version=self.transaction_version,
                topics=[tpb.TxnTopic(name=t, partitions=ps) for t, ps in topics.items()]),
                time.monotonic() + 1.0)
        except RetriableTransactionError:
            return pending  # tried again on the next turn; the batches' delivery timeout bounds it
        if resp.error_code:
            self._fail(transaction_error(error_for(resp.error_code, resp.error_message), context="AddPartitionsToTxn"))
            return pending
        retry: set[TopicPartition] = set()
        for t in resp.results:
            for p in t.partitions:
                tp = TopicPartition(t.name, p.partition)
                if p.error_code == 0:
                    continue
                kind = classify(p.error_code)
                if kind is ErrorKind.RETRIABLE:
                    retry.add(tp)
                elif p.error_code != ErrorCode.OPERATION_NOT_ATTEMPTED:
                    self._fail(transaction_error(error_for(p.error_code), context=f"AddPartitionsToTxn {tp}"))
                    retry.add(tp)
        with self.lock:
            self._pending_add -= pending - retry
        return retry

    def held(self, tp: TopicPartition) -> bool:
        """V1: ``tp`` is not yet added to the transaction. The sender asks as it drains ``tp``'s batch:
        a partition first sent to while ``before_drain`` was adding others is not in what it returned,
        and its batch must not reach the leader before AddPartitionsToTxn (the leader's verification
        would answer TRANSACTION_ABORTABLE)."""
        return tp in self._pending_add
