"""Transactions in a compacted log: which batches the cleaner drops, and what becomes of markers.

Kafka's rules (``LogCleaner``'s ``CleanedTransactionMetadata``), made a plan before any record is
copied. The job's batches are walked in offset order, from the log start to the job's end, with the
aborted transactions the broker's abort indexes (``.txnindex``) know over that range:

* an aborted transaction is "ongoing" from its first offset until its ABORT marker; a data batch of
  its producer in that span (transactional) is aborted data: all its records go, from the offset
  map too (an aborted value never supersedes a committed one), and the batch stays empty only when
  it is its producer's last batch;
* other transactional data batches belong to committed (or, past the job's end, not yet decided)
  transactions and are compacted by key like any other batch;
* a marker (control batch) can go only once no batch of its transaction is left, not even one kept
  empty as its producer's last batch (recovery would otherwise take that batch for an open
  transaction): an ABORT marker when the walk met no batch of its transaction (they went in an
  earlier cleaning), a COMMIT marker when the walk met no batch of its transaction since the
  producer's previous marker. Such a
  marker is first given a delete horizon (now + ``delete.retention.ms``, KIP-534's attribute bit),
  kept until a cleaning after that horizon, then removed (unless it is its producer's last batch,
  which stays for producer state). An empty control batch is one a cleaning already emptied.

An abort index entry may outlive its marker; an entry stops applying to its producer at the first
of its batches past the entry's last offset, so a later transaction is never taken for aborted.

Pure: segment bytes and index entries in, a plan out.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from shared.records.decoder import decode_batch
from shared.records.header import BatchHeader, iter_batches
from shared.records.record import CONTROL_ABORT, CONTROL_COMMIT, CONTROL_KEY


@dataclass(frozen=True, slots=True, order=True)
class AbortedRange:
    """One abort index entry: a producer's aborted transaction, from its first offset to its marker's."""

    first_offset: int
    last_offset: int
    producer_id: int


class MarkerAction(enum.Enum):
    KEEP = "keep"  # copied as it is
    SET_HORIZON = "horizon"  # its transaction's data is gone: rewritten with a delete horizon
    DROP = "drop"  # past its delete horizon with no data left: removed


class _Segment(Protocol):
    base_offset: int

    @property
    def data(self) -> bytes | memoryview: ...


@dataclass(slots=True)
class TxnPlan:
    aborted_batches: set[int] = field(default_factory=set)  # base offsets of aborted data batches
    markers: dict[int, MarkerAction] = field(default_factory=dict)  # control batch base offset -> action
    delete_horizon_ms: int = 0  # the horizon a SET_HORIZON marker gets

    def marker(self, base_offset: int) -> MarkerAction:
        return self.markers.get(base_offset, MarkerAction.KEEP)

    @property
    def empty(self) -> bool:
        return not self.aborted_batches and not self.markers


EMPTY_PLAN = TxnPlan()


def control_type(data: bytes | memoryview, pos: int) -> int | None:
    """The marker type of the control batch at ``pos`` (None when it has no record or an unknown key)."""
    _, recs = decode_batch(data, pos, validate=True)
    if not recs or recs[0].key is None or len(recs[0].key) < CONTROL_KEY.size:
        return None
    return CONTROL_KEY.unpack_from(recs[0].key)[1]


@dataclass(slots=True)
class _Ongoing:
    entry: AbortedRange
    observed: bool = False  # a batch of this aborted transaction was met (even an emptied one)


class _Walk:
    def __init__(self, aborted: Iterable[AbortedRange]) -> None:
        self.pending = sorted(aborted)
        self.next = 0
        self.aborted: dict[int, _Ongoing] = {}
        self.committed: set[int] = set()

    def consume_up_to(self, offset: int) -> None:
        while self.next < len(self.pending) and self.pending[self.next].first_offset <= offset:
            e = self.pending[self.next]
            self.aborted[e.producer_id] = _Ongoing(e)
            self.next += 1

    def data_batch(self, h: BatchHeader) -> bool:
        """Whether data batch ``h`` is aborted data."""
        self.consume_up_to(h.last_offset)
        if not h.is_transactional or h.producer_id < 0:
            return False
        ongoing = self.aborted.get(h.producer_id)
        if ongoing is not None and ongoing.entry.last_offset < h.base_offset:
            del self.aborted[h.producer_id]  # its marker is gone: this is a later transaction
            ongoing = None
        if ongoing is not None:
            ongoing.observed = True
            return True
        self.committed.add(h.producer_id)
        return False

    def control_batch(self, h: BatchHeader, kind: int | None) -> bool:
        """Whether marker ``h`` may go (subject to its delete horizon): no data of its transaction is left."""
        self.consume_up_to(h.last_offset)
        if h.records_count == 0:
            return True
        if kind == CONTROL_ABORT:
            ongoing = self.aborted.pop(h.producer_id, None)
            self.committed.discard(h.producer_id)
            return ongoing is None or not ongoing.observed
        if kind == CONTROL_COMMIT:
            had_data = h.producer_id in self.committed
            self.committed.discard(h.producer_id)
            return not had_data
        return False


def plan_transactions(segments: Sequence[_Segment], aborted: Iterable[AbortedRange], end: int, now_ms: int,
                      delete_retention_ms: int, producer_last_offsets: frozenset[int] = frozenset()) -> TxnPlan:
    """The plan for the batches of ``segments`` below ``end`` (see the module's rules)."""
    walk = _Walk(aborted)
    plan = TxnPlan(delete_horizon_ms=now_ms + delete_retention_ms)
    for seg in segments:
        if seg.base_offset >= end:
            break
        for pos, h in iter_batches(seg.data, validate=False):
            if h.base_offset >= end:
                break
            if not h.is_control:
                if walk.data_batch(h):
                    plan.aborted_batches.add(h.base_offset)
                continue
            kind = control_type(seg.data, pos) if h.records_count else None
            if not walk.control_batch(h, kind) or (h.producer_id >= 0 and h.last_offset in producer_last_offsets):
                continue  # kept as it is (the default)
            if h.records_count and not h.has_delete_horizon:
                plan.markers[h.base_offset] = MarkerAction.SET_HORIZON
            elif not h.records_count or now_ms >= h.base_timestamp:
                plan.markers[h.base_offset] = MarkerAction.DROP
    return plan
