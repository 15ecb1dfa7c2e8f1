"""Transactions as one partition sees them: each producer's open transaction, the last stable offset,
and what a commit or abort marker completes.

Kafka's rules (``ProducerStateManager`` and ``UnifiedLog``), written for Tidelog:

- a producer's transaction opens at its first transactional batch on this partition and is closed by
  the control batch (marker) the transaction coordinator writes; while open, its first offset holds the
  *first unstable offset*;
- a completed transaction stays unstable until the high watermark passes its marker (a read_committed
  consumer must not see a commit its replicas could still lose);
- the last stable offset (LSO) is the least of the first unstable offset and the high watermark;
- an aborted transaction is remembered as ``AbortedTxn(producer_id, first_offset, last_offset,
  last_stable_offset)`` in the segment's ``.txnindex``: the LSO written there is the first offset of
  another still-open transaction, else the marker's offset + 1;
- a marker carries the coordinator's epoch: one older than the last marker seen from that producer is
  refused (``TRANSACTION_COORDINATOR_FENCED``), and one for an older producer epoch is
  ``INVALID_PRODUCER_EPOCH`` — so a delayed marker of a deposed coordinator cannot end a later
  transaction.

Pure: offsets in, decisions out; the partition applies them. Leaders, followers and recovery feed the
same calls in log order, so all three reach the same state.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from shared.errors import ErrorCode


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    aborted: bool


@dataclass(slots=True)
class _Producer:
    epoch: int = -1
    coordinator_epoch: int = -1
    open_first_offset: int = -1  # -1: no open transaction on this partition


class TxnState:
    def __init__(self) -> None:
        self._verified: dict[int, int] = {}  # producer -> epoch the transaction coordinator confirmed (KIP-890)
        self._producers: dict[int, _Producer] = {}
        self._open: list[tuple[int, int]] = []  # (first_offset, producer_id), sorted
        self._unreplicated: list[CompletedTxn] = []  # completed, marker not yet below the high watermark

    # -- checks (leader, before an append) ------------------------------------------------------------

    def check_data(self, producer_id: int, epoch: int, transactional: bool) -> tuple[ErrorCode, str]:
        """May this producer append a data batch? A plain (idempotent) batch from a producer with an open
        transaction is ``INVALID_TXN_STATE``, as Kafka's ``ProducerAppendInfo.checkProducerEpoch`` and
        ``maybeValidateDataBatch`` rule."""
        p = self._producers.get(producer_id)
        if p is None or producer_id < 0:
            return ErrorCode.NONE, ""
        if epoch < p.epoch:
            return ErrorCode.INVALID_PRODUCER_EPOCH, f"producer {producer_id} epoch {epoch} is older than {p.epoch}"
        if not transactional and p.open_first_offset >= 0 and epoch == p.epoch:
            return ErrorCode.INVALID_TXN_STATE, (f"producer {producer_id} wrote a non-transactional batch while its "
                                                 f"transaction from offset {p.open_first_offset} is open")
        return ErrorCode.NONE, ""

    def check_marker(self, producer_id: int, epoch: int, coordinator_epoch: int) -> tuple[ErrorCode, str]:
        p = self._producers.get(producer_id)
        if p is None:
            return ErrorCode.NONE, ""
        if coordinator_epoch < p.coordinator_epoch:
            return ErrorCode.TRANSACTION_COORDINATOR_FENCED, (
                f"marker for producer {producer_id} from coordinator epoch {coordinator_epoch}, "
                f"older than {p.coordinator_epoch}")
        if epoch < p.epoch:
            return ErrorCode.INVALID_PRODUCER_EPOCH, (
                f"marker for producer {producer_id} epoch {epoch} is older than {p.epoch}")
        return ErrorCode.NONE, ""

    def in_transaction(self, producer_id: int) -> bool:
        p = self._producers.get(producer_id)
        return p is not None and p.open_first_offset >= 0

    def verified(self, producer_id: int, epoch: int) -> None:
        """KIP-890 part 1: the transaction coordinator confirmed this partition is in the producer's
        transaction at ``epoch``. A marker for the producer (its transaction ended) clears it, so a batch
        verified before a concurrent abort is not appended after it (Kafka's verification guard)."""
        self._verified[producer_id] = epoch

    def may_open(self, producer_id: int, epoch: int) -> bool:
        """May a transactional batch of this producer be appended where verification is required? Inside
        its open transaction, or once verified at this epoch."""
        p = self._producers.get(producer_id)
        if p is not None and p.open_first_offset >= 0 and p.epoch == epoch:
            return True  # a batch of the open transaction (a newer epoch is a new transaction: verified anew)
        return self._verified.get(producer_id) == epoch

    # -- state changes (leader after append, follower, recovery: in log order) ------------------------

    def on_data(self, producer_id: int, epoch: int, first_offset: int, transactional: bool) -> None:
        if producer_id < 0:
            return
        p = self._producers.setdefault(producer_id, _Producer())
        p.epoch = max(p.epoch, epoch)
        if transactional and p.open_first_offset < 0:
            p.open_first_offset = first_offset
            bisect.insort(self._open, (first_offset, producer_id))

    def on_marker(self, producer_id: int, epoch: int, offset: int, commit: bool,
                  coordinator_epoch: int) -> tuple[CompletedTxn, AbortedTxn | None]:
        """A marker at ``offset`` ends the producer's transaction; returns what completed, and the entry
        for the aborted-transaction index when it was an abort. A marker without an open transaction on
        this partition (a retried marker, or a transaction that wrote nothing here) completes an empty
        one: nothing to index."""
        p = self._producers.setdefault(producer_id, _Producer())
        p.epoch = max(p.epoch, epoch)
        p.coordinator_epoch = max(p.coordinator_epoch, coordinator_epoch)
        self._verified.pop(producer_id, None)
        first = p.open_first_offset
        if first < 0:
            return CompletedTxn(producer_id, offset, offset, not commit), None
        self._open.remove((first, producer_id))
        p.open_first_offset = -1
        done = CompletedTxn(producer_id, first, offset, not commit)
        bisect.insort(self._unreplicated, done, key=lambda t: t.last_offset)
        if commit:
            return done, None
        lso = self._open[0][0] if self._open else offset + 1
        return done, AbortedTxn(producer_id, first, offset, lso)

    def on_high_watermark(self, hw: int) -> None:
        """Completed transactions whose marker is below ``hw`` are stable."""
        n = 0
        while n < len(self._unreplicated) and self._unreplicated[n].last_offset < hw:
            n += 1
        if n:
            del self._unreplicated[:n]

    def truncate_to(self, offset: int) -> None:
        """The log was cut at ``offset`` (a follower's truncation): transactions that opened at or after it
        are gone; the caller rebuilds from the log if it needs more than that."""
        for first, pid in [e for e in self._open if e[0] >= offset]:
            self._open.remove((first, pid))
            self._producers[pid].open_first_offset = -1
        self._unreplicated = [t for t in self._unreplicated if t.last_offset < offset]

    # -- reads ----------------------------------------------------------------------------------------

    def first_unstable_offset(self) -> int | None:
        candidates = []
        if self._open:
            candidates.append(self._open[0][0])
        if self._unreplicated:
            candidates.append(min(t.first_offset for t in self._unreplicated))
        return min(candidates) if candidates else None

    def last_stable_offset(self, high_watermark: int) -> int:
        first = self.first_unstable_offset()
        return high_watermark if first is None else min(first, high_watermark)

    def rows(self) -> list[list[int]]:
        """``[producer_id, epoch, coordinator_epoch, open_first_offset]`` per producer: what a producer
        snapshot keeps (completed-but-unreplicated transactions are not kept, as in Kafka's snapshot)."""
        return [[pid, p.epoch, p.coordinator_epoch, p.open_first_offset] for pid, p in sorted(self._producers.items())]

    @classmethod
    def from_rows(cls, rows: list[list[int]]) -> TxnState:
        s = cls()
        for pid, epoch, coordinator_epoch, first in rows:
            s._producers[int(pid)] = _Producer(int(epoch), int(coordinator_epoch), int(first))
            if int(first) >= 0:
                bisect.insort(s._open, (int(first), int(pid)))
        return s

    def open_transactions(self) -> list[tuple[int, int]]:
        """(producer_id, first_offset) of each open transaction, oldest first: DescribeProducers and
        find-hanging read this."""
        return [(pid, first) for first, pid in self._open]
