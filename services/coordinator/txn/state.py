"""The transaction state machine: states (with the ids stored in ``__transaction_state``), the one
table of allowed transitions, and ``TxnMetadata``, what the coordinator knows of one transactional
id. Pure; imports only the record codec.

Transitions (Kafka's ``TransactionState`` valid previous states, with KIP-890's transactions V2,
where an abort may start from Empty or a completed transaction: the client cannot know whether
a produce added a partition implicitly, so it always asks the coordinator to abort):

    Empty             <- Empty, CompleteCommit, CompleteAbort         (InitProducerId)
    Ongoing           <- Ongoing, Empty, CompleteCommit, CompleteAbort (AddPartitions / AddOffsets)
    PrepareCommit     <- Ongoing                                       (EndTxn commit)
    PrepareAbort      <- Ongoing, PrepareEpochFence,                   (EndTxn abort, fencing, timeout)
                         Empty, CompleteCommit, CompleteAbort          (transactions V2 only)
    CompleteCommit    <- PrepareCommit                                 (markers written)
    CompleteAbort     <- PrepareAbort                                  (markers written)
    Dead              <- Empty, CompleteCommit, CompleteAbort          (transactional id expired)
    PrepareEpochFence <- Ongoing                                       (an abort that fences)

Dead and PrepareEpochFence are never written to the log: Dead is the state of an id whose
tombstone is being written, PrepareEpochFence marks a fencing abort in flight.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import IntEnum

from services.coordinator.txn.records import NO_PRODUCER_ID, TopicPartitions, TxnLogValue
from shared.errors import CorruptRecordError
from shared.types import TopicPartition

NO_PRODUCER_EPOCH = -1
MAX_PRODUCER_EPOCH = 32767  # Short.MaxValue


class TxnState(IntEnum):
    """Kafka's TransactionState ids, as stored in TransactionLogValue.TransactionStatus."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """Kafka's name (DescribeTransactions, ListTransactions): ``PrepareCommit`` etc."""
        return "".join(w.capitalize() for w in self.name.split("_"))


S = TxnState
#: target state -> states it may be entered from. The only definition of the state machine.
VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}
#: Transactions V1 (epoch kept) cannot abort what is not ongoing.
V2_ONLY: frozenset[tuple[TxnState, TxnState]] = frozenset(
    {(S.EMPTY, S.PREPARE_ABORT), (S.COMPLETE_COMMIT, S.PREPARE_ABORT), (S.COMPLETE_ABORT, S.PREPARE_ABORT)})
#: States an id may expire in (transactional.id.expiration.ms after its last update).
EXPIRABLE: frozenset[TxnState] = frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT})
#: States the log holds (Dead and PrepareEpochFence are transient).
PERSISTED: frozenset[TxnState] = frozenset(TxnState) - {S.DEAD, S.PREPARE_EPOCH_FENCE}
PREPARED: frozenset[TxnState] = frozenset({S.PREPARE_COMMIT, S.PREPARE_ABORT})
COMPLETED: frozenset[TxnState] = frozenset({S.COMPLETE_COMMIT, S.COMPLETE_ABORT})


def can_transition(old: TxnState, new: TxnState, client_version: int = 2) -> bool:
    if (old, new) in V2_ONLY and client_version < 2:
        return False
    return old in VALID_PREVIOUS[new]


class IllegalTransition(RuntimeError):
    """The coordinator tried a transition the table refuses: a bug, never a client's error."""


def is_epoch_exhausted(epoch: int) -> bool:
    """Kafka's rule: an epoch of Short.MaxValue - 1 or more leaves no room for another bump."""
    return epoch >= MAX_PRODUCER_EPOCH - 1


@dataclass(frozen=True)
class TxnMetadata:
    """What one TransactionLogValue says of a transactional id; nothing else is kept, so the
    state after loading a (compacted) log is the state live requests built."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition] = frozenset()
    start_ms: int = -1  # the transaction's first AddPartitions; -1 when none is open
    last_update_ms: int = -1
    previous_producer_id: int = NO_PRODUCER_ID  # the id used before the last producer-id rotation
    next_producer_id: int = NO_PRODUCER_ID  # V2: the id the producer moves to when this transaction completes
    client_version: int = 0  # client transaction version of the last AddPartitions / EndTxn (0 after init)

    def transition(self, new_state: TxnState, client_version: int | None = None, **changes: object) -> TxnMetadata:
        """A copy in ``new_state`` with ``changes``, refused unless the table allows it."""
        version = self.client_version if client_version is None else client_version
        if not can_transition(self.state, new_state, version):
            raise IllegalTransition(f"transactional id {self.transactional_id!r}: {self.state.kafka_name} -> "
                                    f"{new_state.kafka_name} is not allowed (client transaction version {version})")
        return replace(self, state=new_state, client_version=version, **changes)  # type: ignore[arg-type]

    # -- records -----------------------------------------------------------------------------

    def to_value(self) -> TxnLogValue:
        if self.state not in PERSISTED:
            raise IllegalTransition(f"{self.state.kafka_name} is never written to the log")
        parts = None if self.state == TxnState.EMPTY else _group(self.partitions)
        return TxnLogValue(self.producer_id, self.producer_epoch, self.timeout_ms, int(self.state), parts,
                           self.last_update_ms, self.start_ms, self.previous_producer_id, self.next_producer_id,
                           self.client_version)

    @staticmethod
    def from_value(transactional_id: str, v: TxnLogValue) -> TxnMetadata:
        try:
            state = TxnState(v.status)
        except ValueError as exc:
            raise CorruptRecordError(f"transactional id {transactional_id!r}: unknown TransactionStatus {v.status}") from exc
        if state not in PERSISTED:
            raise CorruptRecordError(f"transactional id {transactional_id!r}: {state.kafka_name} found in the log")
        parts = frozenset() if state == TxnState.EMPTY or v.partitions is None else frozenset(
            TopicPartition(t, p) for t, ps in v.partitions for p in ps)
        return TxnMetadata(transactional_id, v.producer_id, v.producer_epoch, v.timeout_ms, state, parts,
                           v.start_ms, v.last_update_ms, v.previous_producer_id, v.next_producer_id, v.client_version)


def _group(partitions: frozenset[TopicPartition]) -> TopicPartitions:
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return tuple((t, tuple(sorted(ps))) for t, ps in sorted(by_topic.items()))
