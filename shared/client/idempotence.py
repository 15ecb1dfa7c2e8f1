"""The producer's per-partition delivery state, in ONE object behind ONE lock (Kafka's ``TransactionManager``,
and the future home of transactions): the producer id and epoch, each partition's next sequence number,
the highest acknowledged one, the batches holding sequence numbers, the count of batches in flight, and
whether the producer id must be replaced.

The sender thread (drain, encode, send) and the reader threads (one per broker connection: acknowledge,
refuse, fail) all change this state; every read-modify-write happens here with ``lock`` held, so an
update can never be lost (a lost decrement of the in-flight count would mute a partition for good).

No gRPC, no sockets, no clock: the producer decides what happened, this object keeps the books.

The seam for transactions: the sender (``shared.client.sender``) and the retry policy know this object
only through ``ProducerState``. The transaction manager (``shared.client.transactions.TransactionManager``)
keeps these books too (it subclasses ``IdempotenceState``) and adds the transaction's state; the producer
hands it to the sender in place of ``IdempotenceState`` (hooks: ``failed``, ``doomed``, ``before_drain``).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Protocol, TypeVar

from shared.errors import ErrorCode
from shared.types import TopicPartition

SEQUENCE_MASK = 0x7FFFFFFF
_NOTHING: set[TopicPartition] = set()  # never changed

#: Retriable answers a broker gives only BEFORE appending a batch: the batch was certainly not written,
#: so it keeps its sequence number for a retry and, if it expires, gives its numbers back (no new producer
#: id). NOT_LEADER_OR_FOLLOWER and REQUEST_TIMED_OUT are not here: they also come after the append, from
#: the acks=all wait; NOT_ENOUGH_REPLICAS_AFTER_APPEND says the batch was written.
DEFINITE_REFUSALS = frozenset({
    ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.CORRUPT_MESSAGE,
    ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.UNKNOWN_LEADER_EPOCH,
})


def refusal_proves_unwritten(code: ErrorCode, retriable: bool) -> bool:
    """Does the broker's answer ``code`` to a batch prove the batch was not written?"""
    if code in DEFINITE_REFUSALS:
        return True
    return not retriable and code != ErrorCode.UNKNOWN_SERVER_ERROR


class SequencedBatch(Protocol):
    """What this object needs of a producer batch."""

    tp: TopicPartition
    count: int
    base_sequence: int
    encoded: tuple[bytes, bytes] | None


B = TypeVar("B", bound=SequencedBatch)


class ProducerState(Protocol):
    """What the sender and the retry policy ask of the producer's delivery state: the producer id and
    epoch, each partition's sequence numbers and in-flight count. ``IdempotenceState`` is it today."""

    producer_id: int
    producer_epoch: int

    @property
    def reset_needed(self) -> bool: ...

    def has_producer_id(self) -> bool: ...

    def set_producer_id(self, producer_id: int, producer_epoch: int) -> None: ...

    def reset_producer_id(self) -> bool: ...

    def muted(self, max_in_flight: int) -> set[TopicPartition]: ...

    def sending(self, tp: TopicPartition) -> None: ...

    def released(self, tp: TopicPartition) -> None: ...

    def encode(self, batch: B, encode: Callable[[int, int, int], tuple[bytes, bytes]]) -> tuple[bytes, bytes]: ...

    def is_next_expected(self, batch: SequencedBatch) -> bool: ...

    def out_of_turn(self, batch: SequencedBatch) -> bool: ...

    def acknowledged(self, batch: SequencedBatch) -> None: ...

    def completed(self, batch: SequencedBatch, unwritten: bool) -> None: ...

    def first_refusal(self, tp: TopicPartition, code: ErrorCode) -> bool: ...

    # The transaction manager's hooks (no-ops for an idempotent producer):

    def failed(self, batch: SequencedBatch, error: BaseException) -> None:
        """``batch`` failed for good with ``error`` (after ``completed``)."""

    def doomed(self) -> BaseException | None:
        """The error to fail every unsent batch with (a transaction that cannot commit), else None."""

    def before_drain(self) -> set[TopicPartition]:
        """Called by the sender thread before each drain: the partitions whose batches must wait."""

    def held(self, tp: TopicPartition) -> bool:
        """Asked as ``tp``'s batch is drained: must it wait (V1: not yet added to the transaction)? Asked
        then, not before the drain, so a partition the application first sends to meanwhile waits too."""


class IdempotenceState:
    """Producer id, sequence numbers and in-flight counts of every partition, guarded by ``lock``."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.producer_id = -1
        self.producer_epoch = -1
        self._next_sequence: dict[TopicPartition, int] = {}
        self._acked_next_sequence: dict[TopicPartition, int] = {}
        self._in_flight: dict[TopicPartition, int] = {}
        # Batches holding a sequence number and not yet completed, per partition.
        self._sequenced: dict[TopicPartition, list[SequencedBatch]] = {}
        self._reset_needed = False  # a batch with a sequence number failed without knowing if it was written
        self._refusals_seen: set[tuple[TopicPartition, ErrorCode]] = set()

    # -- producer id ---------------------------------------------------------------------------------

    def has_producer_id(self) -> bool:
        with self.lock:
            return self.producer_id >= 0

    def set_producer_id(self, producer_id: int, producer_epoch: int) -> None:
        with self.lock:
            self.producer_id, self.producer_epoch = producer_id, producer_epoch

    def mark_unknown_outcome(self) -> None:
        """A sequenced batch failed and may or may not be written: the producer id must be replaced."""
        with self.lock:
            self._reset_needed = True

    @property
    def reset_needed(self) -> bool:
        return self._reset_needed

    def reset_producer_id(self) -> bool:
        """If a reset is due and nothing is in flight, forget the producer id and every sequence (batches
        waiting for a retry are numbered again on their next send); True if it did. A retried batch whose
        earlier attempt was written may then appear twice: the new id has no record of the old one's."""
        with self.lock:
            if not self._reset_needed or any(self._in_flight.values()):
                return False
            for batches in self._sequenced.values():
                for b in batches:
                    b.base_sequence = -1
                    b.encoded = None
            self._sequenced.clear()
            self._next_sequence.clear()
            self._acked_next_sequence.clear()
            self.producer_id = self.producer_epoch = -1
            self._reset_needed = False
            return True

    # -- in-flight accounting --------------------------------------------------------------------------

    def muted(self, max_in_flight: int) -> set[TopicPartition]:
        """Partitions with ``max_in_flight`` batches in flight (Kafka's limit of 5 per partition)."""
        with self.lock:
            return {tp for tp, n in self._in_flight.items() if n >= max_in_flight}

    def in_flight(self, tp: TopicPartition) -> int:
        with self.lock:
            return self._in_flight.get(tp, 0)

    def any_in_flight(self) -> bool:
        with self.lock:
            return any(self._in_flight.values())

    def sending(self, tp: TopicPartition) -> None:
        """A batch of ``tp`` is about to go out."""
        with self.lock:
            self._in_flight[tp] = self._in_flight.get(tp, 0) + 1

    def released(self, tp: TopicPartition) -> None:
        """A batch of ``tp`` came back (acknowledged, refused or failed)."""
        with self.lock:
            n = self._in_flight.get(tp, 0) - 1
            if n > 0:
                self._in_flight[tp] = n
            else:
                self._in_flight.pop(tp, None)

    # -- sequence numbers ----------------------------------------------------------------------------

    def encode(self, batch: B, encode: Callable[[int, int, int], tuple[bytes, bytes]]) -> tuple[bytes, bytes]:
        """The batch's wire form; on a first send it takes the partition's next sequence numbers.
        ``encode(producer_id, producer_epoch, base_sequence)`` builds it. Held under the lock because a
        reader thread may re-sequence the batch (``encoded = None``) at any time."""
        with self.lock:
            if batch.encoded is None:
                if batch.base_sequence < 0:  # a first send (a re-sequenced batch keeps its new number)
                    seq = self._next_sequence.get(batch.tp, 0)
                    self._next_sequence[batch.tp] = (seq + batch.count) & SEQUENCE_MASK
                    batch.base_sequence = seq
                    self._sequenced.setdefault(batch.tp, []).append(batch)
                batch.encoded = encode(self.producer_id, self.producer_epoch, batch.base_sequence)
            return batch.encoded

    def is_next_expected(self, batch: SequencedBatch) -> bool:
        """Is ``batch`` the first one the broker has not acknowledged on its partition?"""
        with self.lock:
            return batch.base_sequence == self._acked_next_sequence.get(batch.tp, 0)

    def out_of_turn(self, batch: SequencedBatch) -> bool:
        """Must ``batch``, holding a sequence number already (a retry), wait because an older batch of its
        partition has not finished? A retry goes out only as its partition's oldest unfinished batch, so
        retries go one at a time, in order (Kafka's shouldStopDrainBatchesForPartition). Otherwise newer
        batches pipelined behind a retry that keeps being refused (NOT_LEADER_OR_FOLLOWER from a stale
        leader) are written past it; once more than the broker's 5 cached batches are, the retry (which may
        itself be written) is refused as OUT_OF_ORDER_SEQUENCE_NUMBER every time until it expires."""
        if batch.base_sequence < 0:
            return False
        with self.lock:
            pending = self._sequenced.get(batch.tp)
            return bool(pending) and pending[0] is not batch

    def acknowledged(self, batch: SequencedBatch) -> None:
        """The broker wrote ``batch``: release it and forget its sequence."""
        with self.lock:
            tp = batch.tp
            if self._refusals_seen:
                self._refusals_seen = {k for k in self._refusals_seen if k[0] != tp}
            if batch.base_sequence >= 0:
                nxt = (batch.base_sequence + batch.count) & SEQUENCE_MASK
                if nxt > self._acked_next_sequence.get(tp, 0):
                    self._acked_next_sequence[tp] = nxt
            self._forget(batch, refused=False)

    def completed(self, batch: SequencedBatch, unwritten: bool) -> None:
        """``batch`` failed for good. If it was certainly not written, give its numbers back: the partition's
        later batches move down by its record count and are encoded again before their next send, as
        Kafka's producer does (adjustSequencesDueToFailedBatch); otherwise they would all be refused as out
        of order. If it may have been written, the producer id must be replaced."""
        with self.lock:
            if batch.base_sequence < 0:
                return
            if not unwritten:
                self._reset_needed = True
            self._forget(batch, refused=unwritten)

    def first_refusal(self, tp: TopicPartition, code: ErrorCode) -> bool:
        """True the first time ``tp`` is refused with ``code`` since its last acknowledgement."""
        with self.lock:
            if (tp, code) in self._refusals_seen:
                return False
            self._refusals_seen.add((tp, code))
            return True

    # -- the transaction manager's hooks: nothing to do without transactions ---------------------------

    transactional = False

    def failed(self, batch: SequencedBatch, error: BaseException) -> None:
        return None

    def doomed(self) -> BaseException | None:
        return None

    def before_drain(self) -> set[TopicPartition]:
        return _NOTHING

    def held(self, tp: TopicPartition) -> bool:
        return False

    def next_sequence(self, tp: TopicPartition) -> int:
        with self.lock:
            return self._next_sequence.get(tp, 0)

    def _forget(self, batch: SequencedBatch, refused: bool) -> None:
        pending = self._sequenced.get(batch.tp, [])
        with contextlib.suppress(ValueError):
            pending.remove(batch)
        if not refused:
            return
        n = batch.count
        for b in pending:
            if b.base_sequence > batch.base_sequence:
                b.base_sequence = (b.base_sequence - n) & SEQUENCE_MASK
                b.encoded = None
        self._next_sequence[batch.tp] = (self._next_sequence.get(batch.tp, 0) - n) & SEQUENCE_MASK
