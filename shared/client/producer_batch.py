"""One partition's batch of records on its way to the broker (Kafka's ``ProducerBatch``).

The records are encoded as they are appended (``BatchBuilder``); the batch keeps what its delivery
needs: creation time, attempts, sequence number, the future its records resolve through, and whether
an attempt may have been written. No locks, threads or network here: the accumulator and the sender
own those. Must not import the sender, the connection or the producer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from shared.client.futures import ProduceRequestResult
from shared.errors import RecordTooLargeError, TidelogError
from shared.records.builder import BatchBuilder
from shared.records.compression import CompressionType
from shared.records.header import HEADER_SIZE
from shared.types import TopicPartition


@dataclass(eq=False, slots=True)  # identity: batches are looked up in lists
class ProducerBatch:
    tp: TopicPartition
    created: float
    # The records section, encoded by the builder as records are appended (as Kafka's MemoryRecordsBuilder
    # does): the pieces of each record, joined once when the batch closes. Encoding in send() keeps every
    # record's work on the thread that has its objects in cache, and leaves no per-record object for the
    # cyclic GC to track while the batch waits for its acknowledgement.
    records: BatchBuilder = field(default_factory=BatchBuilder)
    size: int = HEADER_SIZE
    attempts: int = 0
    base_sequence: int = -1
    result: ProduceRequestResult = field(init=False)
    encoded: tuple[bytes, bytes] | None = None  # the batch as (header, records section), set when sent
    sealed: bool = False  # drained once: it takes no more records, even when back in the queue for a retry
    maybe_written: bool = False  # an attempt reached the broker and got no definite refusal
    last_error: TidelogError | None = None  # why the last attempt failed, named if the batch then expires

    def __post_init__(self) -> None:
        self.result = ProduceRequestResult(self.tp)

    @property
    def count(self) -> int:
        return self.records.count

    def close(self) -> None:
        """Take no more records and join the records section. Called by ``send()`` with the
        accumulator's lock held, or by the sender on a batch it drained (sealed: send() leaves it).

        ``send()`` closes a batch when the next record does not fit, so the join, and freeing the
        parts, happen on the application's thread, which just touched every part. Done by the
        sender thread on another CPU, the same work cost several times more (cache misses and
        reference counts bouncing between CPUs)."""
        self.sealed = True
        self.records.close()

    def encode(self, compression: CompressionType, *, producer_id: int = -1, producer_epoch: int = -1,
               base_sequence: int = -1, transactional: bool = False) -> tuple[bytes, bytes]:
        """The batch as header and records section; the records are joined only once, and a
        re-sequenced batch gets only a new header."""
        b = self.records
        b.compression = compression
        b.producer_id, b.producer_epoch, b.base_sequence = producer_id, producer_epoch, base_sequence
        b.transactional = transactional
        return b.build_pieces()


def record_too_large(size: int, max_request_size: int) -> RecordTooLargeError:
    """The error of a record whose size estimate exceeds ``max.request.size`` (Kafka's message), raised by
    ``send()`` and ``send_batch()`` before anything is queued."""
    return RecordTooLargeError(f"The message is {size} bytes when serialized which is larger than "
                               f"{max_request_size}, which is the value of the max.request.size configuration.")
