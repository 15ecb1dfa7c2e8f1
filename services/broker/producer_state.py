"""Idempotent-producer state of one partition: the last batches of each producer id.

The leader checks each idempotent batch against it: a batch equal to one of
the last five from that producer is a duplicate (acknowledged again with its
original offsets, not written); a sequence gap is ``OUT_OF_ORDER_SEQUENCE_NUMBER``;
an older producer epoch is ``INVALID_PRODUCER_EPOCH``. Followers and recovery
replay batch headers into the same state, so it survives restarts and failover.
Pure: no files, no asyncio.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from services.broker.txn_state import AbortedTxn, TxnState
from shared.errors import InvalidProducerEpochError, OutOfOrderSequenceError
from shared.records.header import BatchHeader
from shared.records.record import CONTROL_COMMIT

MAX_CACHED_BATCHES = 5
INT_MAX = 2**31 - 1


@dataclass(frozen=True)
class BatchMeta:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int


@dataclass
class ProducerEntry:
    epoch: int
    batches: deque[BatchMeta] = field(default_factory=lambda: deque(maxlen=MAX_CACHED_BATCHES))

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1


def _next_seq(seq: int) -> int:
    return 0 if seq == INT_MAX else seq + 1


class ProducerStateManager:
    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}
        #: each producer's open transaction on this partition, and the last stable offset
        self.txn = TxnState()

    def check(self, h: BatchHeader) -> BatchMeta | None:
        """Validate an incoming leader batch; return the original ``BatchMeta`` if it is a duplicate."""
        pid = h.producer_id
        if pid < 0:
            return None
        entry = self.producers.get(pid)
        first, last = h.base_sequence, h.last_sequence
        if first < 0:
            raise OutOfOrderSequenceError(f"producer {pid} sent a batch without a sequence number")
        if entry is None:
            if first != 0:
                raise OutOfOrderSequenceError(f"unknown producer {pid}: first sequence must be 0, got {first}")
            return None
        if h.producer_epoch < entry.epoch:
            raise InvalidProducerEpochError(f"producer {pid} epoch {h.producer_epoch} is older than {entry.epoch}")
        if h.producer_epoch > entry.epoch:
            if first != 0:
                raise OutOfOrderSequenceError(f"producer {pid} new epoch {h.producer_epoch} must start at sequence 0")
            return None
        for b in entry.batches:
            if b.first_seq == first and b.last_seq == last:
                return b
        expected = _next_seq(entry.last_seq)
        if first != expected:
            raise OutOfOrderSequenceError(
                f"producer {pid}: expected sequence {expected}, got {first} (last {entry.last_seq})"
            )
        return None

    def update(self, h: BatchHeader, first_offset: int, last_offset: int,
               marker: tuple[int, int] | None = None) -> AbortedTxn | None:
        """Record an appended batch (leader, follower or recovery). A control batch passes its marker
        ``(control type, coordinator epoch)``; an abort returns the entry for the segment's ``.txnindex``."""
        pid = h.producer_id
        if h.is_control:
            if pid < 0 or marker is None:
                return None
            kind, coordinator_epoch = marker
            _, aborted = self.txn.on_marker(pid, h.producer_epoch, first_offset, kind == CONTROL_COMMIT,
                                            coordinator_epoch)
            return aborted
        if pid >= 0 and h.is_transactional:
            self.txn.on_data(pid, h.producer_epoch, first_offset, True)
        if pid < 0 or h.base_sequence < 0:
            return None
        entry = self.producers.get(pid)
        if entry is None or h.producer_epoch > entry.epoch:
            entry = self.producers[pid] = ProducerEntry(h.producer_epoch)
        elif h.producer_epoch < entry.epoch:
            return None
        entry.batches.append(BatchMeta(h.base_sequence, h.last_sequence, first_offset, last_offset))
        return None

    def rebuild(self, headers: Iterable[BatchHeader]) -> None:
        self.producers.clear()
        self.txn = TxnState()
        for h in headers:
            self.update(h, h.base_offset, h.last_offset)
