"""Kafka's cleaning algorithm as pure code: segment bytes in, cleaned segment bytes out.

A job covers a log from its start to the first uncleanable offset (a segment boundary);
``first_dirty`` is where the last cleaning stopped. Steps (Kafka's ``Cleaner.doClean``):

1. ``build_offset_map``: key → last offset over the dirty section ``[first_dirty, end)``,
   in the bounded ``OffsetMap``. When the map would overflow, it stops before that batch:
   ``map_end`` is then where the next job's dirty section starts.
2. ``group_segments``: the segments below ``map_end`` are grouped, consecutively, so that a
   group's total size stays within ``segment.bytes`` (small segments are merged).
3. ``clean_group``: each group is recopied into one segment keeping a record when
   ``RetainRule.keep_mask`` says so. Offsets never change; a batch keeps its base offset,
   lastOffsetDelta, producer fields and codec (``codec.encode_kept``, through the one
   encoder); a batch whose records all stay and that needs no new delete horizon is copied
   byte for byte; the last batch of a producer is kept empty when all its records went
   (``codec.encode_empty``).

Each segment is scanned once (``scan``: records as numpy columns, keys hashed once); the map
and the retain decisions work on whole segments at a time, so no Python step is made per
record except for the records a partly kept batch is rebuilt from.

Transactions (``txn.plan_transactions``, walked over the job's batch headers first, with the
broker's abort index entries in ``aborted_txns``): records of aborted transactions go, are never
put in the offset map, and their batch stays empty only as its producer's last; markers stay
while data of their transaction is left, then get a delete horizon, then go after it.

No gRPC, no files, no clocks: the job carries ``now_ms``.
"""

from __future__ import annotations

import mmap
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from shared.compaction.codec import BatchHeader, encode_empty, encode_kept, read_headers_unchecked
from shared.compaction.offset_map import DEFAULT_BUFFER_BYTES, OffsetMap, buffer_bytes_for
from shared.compaction.scan import SegmentScan, scan_segment
from shared.compaction.txn import EMPTY_PLAN, AbortedRange, MarkerAction, TxnPlan, plan_transactions

MAX_RELATIVE_OFFSET = 2**31 - 1


class OffsetMapTooSmallError(Exception):
    """Not even one batch of the dirty section fits the offset map."""


@dataclass(frozen=True, slots=True)
class SegmentData:
    """One segment of a job: its base offset and its whole batches (bytes, a view of a worker's receive
    buffer, or a segment file mapped by the broker's check)."""

    base_offset: int
    data: bytes | memoryview | mmap.mmap

    @property
    def size(self) -> int:
        return len(self.data)


@dataclass(frozen=True, slots=True)
class CleanJob:
    """What a worker needs to clean one log (every field decided by the broker)."""

    segments: tuple[SegmentData, ...]  # from the log start, consecutive, below ``end``
    first_dirty: int  # cleaner checkpoint: everything below has been cleaned before
    end: int  # first uncleanable offset (a segment base; never above the high watermark)
    now_ms: int
    delete_retention_ms: int = 86_400_000  # delete.retention.ms
    segment_bytes: int = 1_073_741_824  # segment.bytes
    dedupe_buffer_bytes: int = DEFAULT_BUFFER_BYTES  # log.cleaner.dedupe.buffer.size
    producer_last_offsets: frozenset[int] = frozenset()  # last offset of each producer's last batch
    hash_seed: int = 0  # the offset map's key-hash seed (the broker draws one per job)
    aborted_txns: tuple[AbortedRange, ...] = ()  # abort index entries overlapping [log start, end)

    def txn_plan(self) -> TxnPlan:
        """What becomes of this job's transactional batches and markers (``txn.plan_transactions``)."""
        return plan_transactions(self.segments, self.aborted_txns, self.end, self.now_ms, self.delete_retention_ms,
                                 self.producer_last_offsets)


@dataclass(frozen=True, slots=True)
class CleanedSegment:
    base_offset: int
    replaces: tuple[int, ...]  # base offsets of the old segments this one replaces
    data: bytes


@dataclass(slots=True)
class CleanStats:
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_kept: int = 0
    map_entries: int = 0
    map_memory_bytes: int = 0


@dataclass(slots=True)
class CleanResult:
    segments: list[CleanedSegment]
    map_end: int  # the next job's first dirty offset
    stats: CleanStats = field(default_factory=CleanStats)


#: Scans kept between the map pass and the recopy (their joined records sections); past it, a
#: segment is scanned again in the recopy (time for memory: a worker already holds the job's bytes).
SCAN_CACHE_BYTES = 512 << 20


class Scans:
    """Each segment of a job scanned once (``scan.scan_segment``) and kept for the recopy: the map
    pass and the recopy pass share one decoding and one hashing of every record, within
    ``budget_bytes`` of kept scans."""

    def __init__(self, seed: int = 0, budget_bytes: int = SCAN_CACHE_BYTES) -> None:
        self.seed = seed
        self._done: dict[int, SegmentScan] = {}
        self._budget = budget_bytes
        self._held = 0

    def of(self, seg: SegmentData) -> SegmentScan:
        got = self._done.get(seg.base_offset)
        if got is not None and got.data is seg.data:
            return got
        got = scan_segment(seg.data, seed=self.seed)
        if self._held + len(got.buf) <= self._budget:
            self._done[seg.base_offset] = got
            self._held += len(got.buf)
        return got

    def release(self, seg: SegmentData) -> None:
        """Forget a segment's scan (its recopy is done)."""
        got = self._done.pop(seg.base_offset, None)
        if got is not None:
            self._held -= len(got.buf)


@dataclass(frozen=True, slots=True)
class RetainRule:
    """Which records survive (Kafka's ``shouldRetainRecord``), for a whole segment at once."""

    offsets: OffsetMap
    map_end: int
    now_ms: int
    txn: TxnPlan = field(default_factory=TxnPlan)

    def keep_mask(self, sc: SegmentScan) -> np.ndarray:
        """One flag per record of ``sc``: kept or not. Above ``map_end`` nothing is known to
        supersede a record; below it a record goes when it has no key (a compacted log cannot place
        it), when a later record has its key, or when it is a tombstone past its delete horizon.
        Records of aborted transactions go wherever they are; control batches are kept whole unless
        the transaction plan drops them."""
        keep = sc.offsets >= self.map_end
        below = ~keep & ~sc.key_null
        rows = np.flatnonzero(below)
        latest = self.offsets.get_many(sc.hash_lo[rows], sc.hash_hi[rows])
        live = np.zeros(len(sc), bool)
        live[rows] = latest <= sc.offsets[rows]
        heads = sc.headers
        expired = np.array([h.has_delete_horizon and self.now_ms >= h.base_timestamp for h in heads], bool)
        control = np.array([h.is_control for h in heads], bool)
        counts = np.diff(sc.first)
        live &= ~(sc.value_null & np.repeat(expired, counts))
        kept = keep | live | np.repeat(control, counts)
        if not self.txn.empty:
            gone = np.array([h.base_offset in self.txn.aborted_batches
                             or (h.is_control and self.txn.marker(h.base_offset) is MarkerAction.DROP)
                             for h in heads], bool)
            kept &= ~np.repeat(gone, counts)
        return kept


def _dirty_rows(sc: SegmentScan, first_dirty: int, end: int, aborted: set[int]) -> tuple[list[int], np.ndarray]:
    """The batches (indexes) the map pass reads from this segment, and the mask of their keyed records
    (none of control batches nor of ``aborted`` ones)."""
    heads = sc.headers
    picked = [b for b, h in enumerate(heads) if h.base_offset < end and h.last_offset >= first_dirty]
    counts = np.diff(sc.first)
    use = np.zeros(len(heads), bool)
    use[[b for b in picked if not heads[b].is_control and heads[b].base_offset not in aborted]] = True
    return picked, np.repeat(use, counts) & ~sc.key_null


def build_offset_map(segments: Sequence[SegmentData], first_dirty: int, end: int, offsets: OffsetMap,
                     scans: Scans | None = None, aborted: set[int] | None = None) -> int:
    """Fill ``offsets`` from the dirty section; return ``map_end`` (first offset not covered). Batches
    whose base offset is in ``aborted`` (aborted transactions' data) are not mapped.

    A segment whose records all fit goes into the map in one step; otherwise batch by batch,
    stopping before the first batch that might not fit (Kafka's check, by record count)."""
    scans = scans or Scans()
    aborted = aborted or set()
    map_end = first_dirty
    for seg in segments:
        if seg.base_offset >= end:
            break
        sc = scans.of(seg)
        picked, rows = _dirty_rows(sc, first_dirty, end, aborted)
        if not picked:
            continue
        heads = sc.headers
        data_batches = [b for b in picked if not heads[b].is_control and heads[b].base_offset not in aborted]
        needed = sum(heads[b].records_count for b in data_batches)
        if offsets.room_for(needed):
            idx = np.flatnonzero(rows)
            offsets.put_many(sc.hash_lo[idx], sc.hash_hi[idx], sc.offsets[idx])
            map_end = heads[picked[-1]].next_offset
            continue
        for b in picked:
            h = heads[b]
            if not h.is_control and h.base_offset not in aborted:
                if not offsets.room_for(h.records_count):
                    if offsets.size == 0:
                        raise OffsetMapTooSmallError(
                            f"a batch of {h.records_count} records at offset {h.base_offset} exceeds the offset map")
                    return map_end
                lo, hi = int(sc.first[b]), int(sc.first[b + 1])
                idx = lo + np.flatnonzero(rows[lo:hi])
                offsets.put_many(sc.hash_lo[idx], sc.hash_hi[idx], sc.offsets[idx])
            map_end = h.next_offset
    return end


def group_segments(segments: Sequence[SegmentData], next_offsets: Sequence[int], segment_bytes: int
                   ) -> list[list[int]]:
    """Indexes of consecutive segments merged into one (Kafka's ``groupSegmentsBySize``): a group
    grows while its total size stays within ``segment_bytes`` and its offsets fit a segment."""
    groups: list[list[int]] = []
    i = 0
    while i < len(segments):
        group = [i]
        size = segments[i].size
        i += 1
        while (i < len(segments) and size + segments[i].size <= segment_bytes
               and next_offsets[i] - 1 - segments[group[0]].base_offset <= MAX_RELATIVE_OFFSET):
            size += segments[i].size
            group.append(i)
            i += 1
        groups.append(group)
    return groups


def _horizon(h: BatchHeader, tombstones_kept: int, now_ms: int, delete_retention_ms: int) -> int | None:
    if h.has_delete_horizon:
        return h.base_timestamp
    if tombstones_kept:
        return now_ms + delete_retention_ms  # first cleaning of these tombstones
    return None


def clean_scan(sc: SegmentScan, keep: np.ndarray, job: CleanJob, out: bytearray, txn: TxnPlan = EMPTY_PLAN) -> int:
    """Append the kept part of every batch of ``sc`` to ``out``; return the records kept.

    A batch that keeps all its records and needs no new delete horizon is copied byte for byte; a
    batch that keeps some is rebuilt from the kept records' byte spans (``codec.encode_kept``); a
    producer's last batch that keeps none stays empty (``codec.encode_empty``); control batches
    stay as they are, or are given their delete horizon, or go, as ``txn`` says."""
    ck = np.concatenate(([0], np.cumsum(keep)))
    ct = np.concatenate(([0], np.cumsum(keep & sc.value_null)))
    first = sc.first
    kept_per = (ck[first[1:]] - ck[first[:-1]]).tolist()
    tomb_per = (ct[first[1:]] - ct[first[:-1]]).tolist()
    total = 0
    for b, h in enumerate(sc.headers):
        k = kept_per[b]
        if h.is_control:
            action = txn.marker(h.base_offset)
            if action is MarkerAction.KEEP:
                out += sc.raw(b)
            elif action is MarkerAction.SET_HORIZON:
                rows = np.arange(int(first[b]), int(first[b + 1]))
                timestamps, keys, values, hdrs = sc.columns(rows)
                out += encode_kept(h, sc.offsets[rows].tolist(), timestamps, keys, values, hdrs, txn.delete_horizon_ms)
            total += k
            continue
        if not k:
            if h.producer_id >= 0 and h.last_offset in job.producer_last_offsets:
                out += encode_empty(h)
            continue
        total += k
        horizon = _horizon(h, tomb_per[b], job.now_ms, job.delete_retention_ms)
        if k == h.records_count and horizon == (h.base_timestamp if h.has_delete_horizon else None):
            out += sc.raw(b)
            continue
        lo = int(first[b])
        rows = lo + np.flatnonzero(keep[lo:int(first[b + 1])])
        timestamps, keys, values, hdrs = sc.columns(rows)
        out += encode_kept(h, sc.offsets[rows].tolist(), timestamps, keys, values, hdrs, horizon)
    return total


def clean_group(group: Sequence[SegmentData], rule: RetainRule, job: CleanJob, stats: CleanStats,
                scans: Scans | None = None) -> bytes:
    scans = scans or Scans()
    out = bytearray()
    for seg in group:
        stats.bytes_read += seg.size
        sc = scans.of(seg)
        stats.records_read += len(sc)
        stats.records_kept += clean_scan(sc, rule.keep_mask(sc), job, out, rule.txn)
        scans.release(seg)
    stats.bytes_written += len(out)
    return bytes(out)


def next_offsets_of(segments: Sequence[SegmentData], end: int) -> list[int]:
    """Each segment's next offset: the next segment's base (the last one ends at ``end``)."""
    return [segments[i + 1].base_offset for i in range(len(segments) - 1)] + ([end] if segments else [])


def cleaned_range(job: CleanJob, map_end: int) -> list[SegmentData]:
    """The segments a cleaning with this ``map_end`` rewrites (Kafka: base offset below it)."""
    return [s for s in job.segments if s.base_offset < map_end]


def dirty_record_count(segments: Sequence[SegmentData], first_dirty: int, end: int) -> int:
    """Records in ``[first_dirty, end)`` by batch headers: a bound on the distinct keys to map. CRCs are
    checked when the segments are scanned, so a count is only trusted up to its batch's size."""
    return sum(min(max(h.records_count, 0), h.size) for s in segments if s.base_offset < end
               for _, h in read_headers_unchecked(s.data)
               if h.last_offset >= first_dirty and h.base_offset < end)


def map_for(job: CleanJob, end: int) -> OffsetMap:
    """An offset map no larger than the job's buffer nor than its dirty section needs."""
    return OffsetMap(buffer_bytes_for(dirty_record_count(job.segments, job.first_dirty, end), job.dedupe_buffer_bytes))


def clean(job: CleanJob) -> CleanResult:
    """Run a whole job: map, group, recopy (each segment decoded and its keys hashed once)."""
    scans = Scans(job.hash_seed)
    txn = job.txn_plan()
    offsets = map_for(job, job.end)
    map_end = build_offset_map(job.segments, job.first_dirty, job.end, offsets, scans, txn.aborted_batches)
    rule = RetainRule(offsets, map_end, job.now_ms, txn)
    stats = CleanStats(map_entries=offsets.size, map_memory_bytes=offsets.memory_bytes)
    todo = cleaned_range(job, map_end)
    out = []
    for group in group_segments(todo, next_offsets_of(todo, map_end), job.segment_bytes):
        segs = [todo[i] for i in group]
        data = clean_group(segs, rule, job, stats, scans)
        out.append(CleanedSegment(segs[0].base_offset, tuple(s.base_offset for s in segs), data))
    return CleanResult(out, map_end, stats)
