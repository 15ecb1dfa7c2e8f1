"""Kafka's cleaning algorithm as pure code: segment bytes in, cleaned segment bytes out.

A job covers a log from its start to the first uncleanable offset (a segment boundary);
``first_dirty`` is where the last cleaning stopped. Steps (Kafka's ``Cleaner.doClean``):

1. ``build_offset_map``: key → last offset over the dirty section ``[first_dirty, end)``,
   in the bounded ``OffsetMap``. When the map would overflow, it stops before that batch:
   ``map_end`` is then where the next job's dirty section starts.
2. ``group_segments``: the segments below ``map_end`` are grouped, consecutively, so that a
   group's total size stays within ``segment.bytes`` (small segments are merged).
3. ``clean_group``: each group is recopied into one segment keeping a record when
   ``RetainRule.keep`` says so. Offsets never change; a batch keeps its base offset,
   lastOffsetDelta, producer fields and codec (``codec.encode_retained``); a batch whose
   records all stay and that needs no new delete horizon is copied byte for byte; the last
   batch of a producer is kept empty when all its records went (``codec.encode_empty``).

No gRPC, no files, no clocks: the job carries ``now_ms``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field

from shared.compaction.codec import BatchHeader, Record, encode_empty, encode_retained, read_batches, read_headers
from shared.compaction.offset_map import DEFAULT_BUFFER_BYTES, OffsetMap, buffer_bytes_for

MAX_RELATIVE_OFFSET = 2**31 - 1


class OffsetMapTooSmallError(Exception):
    """Not even one batch of the dirty section fits the offset map."""


@dataclass(frozen=True, slots=True)
class SegmentData:
    """One segment of a job: its base offset and its whole batches."""

    base_offset: int
    data: bytes

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


@dataclass(frozen=True, slots=True)
class RetainRule:
    """Whether a record survives (Kafka's ``shouldRetainRecord``)."""

    offsets: OffsetMap
    map_end: int
    now_ms: int

    def keep(self, header: BatchHeader, record: Record) -> bool:
        if record.offset >= self.map_end:
            return True  # past what the map covers: nothing known supersedes it
        if record.key is None:
            return False  # a compacted log cannot place a record without a key (Kafka drops it)
        if self.offsets.get(record.key) > record.offset:
            return False  # a later record has the same key
        if record.value is None and header.has_delete_horizon:
            return self.now_ms < header.base_timestamp  # tombstone past delete.retention.ms
        return True


def iter_job_batches(segments: Iterable[SegmentData]) -> Iterable[tuple[BatchHeader, list[Record]]]:
    for seg in segments:
        for _, header, records in read_batches(seg.data):
            yield header, records


def build_offset_map(segments: Sequence[SegmentData], first_dirty: int, end: int, offsets: OffsetMap) -> int:
    """Fill ``offsets`` from the dirty section; return ``map_end`` (first offset not covered)."""
    map_end = first_dirty
    for header, records in iter_job_batches(s for s in segments if s.base_offset < end):
        if header.base_offset >= end:
            break
        if header.last_offset < first_dirty:
            continue
        if not header.is_control:
            if not offsets.room_for(len(records)):
                if offsets.size == 0:
                    raise OffsetMapTooSmallError(
                        f"a batch of {len(records)} records at offset {header.base_offset} exceeds the offset map")
                return map_end
            for r in records:
                if r.key is not None:
                    offsets.put(r.key, r.offset)
        map_end = header.next_offset
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


def clean_batch(header: BatchHeader, records: list[Record], raw: bytes | memoryview, rule: RetainRule,
                delete_retention_ms: int, producer_last_offsets: Collection[int]) -> bytes | None:
    """The batch as it is kept (bytes), or None when it goes entirely."""
    if header.is_control:
        return bytes(raw)  # transaction markers: no transactions yet, kept as they are
    keep = rule.keep
    kept = [r for r in records if keep(header, r)]
    if not kept:
        if header.producer_id >= 0 and header.last_offset in producer_last_offsets:
            return encode_empty(header)
        return None
    tombstones = any(r.value is None for r in kept)
    if header.has_delete_horizon:
        horizon: int | None = header.base_timestamp
    elif tombstones:
        horizon = rule.now_ms + delete_retention_ms  # first cleaning of these tombstones
    else:
        horizon = None
    if len(kept) == len(records) and horizon == (header.base_timestamp if header.has_delete_horizon else None):
        return bytes(raw)
    return encode_retained(header, kept, horizon)


def clean_group(group: Sequence[SegmentData], rule: RetainRule, job: CleanJob, stats: CleanStats) -> bytes:
    out = bytearray()
    for seg in group:
        stats.bytes_read += seg.size
        view = memoryview(seg.data)
        for pos, header, records in read_batches(seg.data):
            stats.records_read += len(records)
            kept = clean_batch(header, records, view[pos : pos + header.size], rule, job.delete_retention_ms,
                               job.producer_last_offsets)
            if kept is not None:
                out += kept
                stats.records_kept += BatchHeader.parse(kept).records_count
    stats.bytes_written += len(out)
    return bytes(out)


def next_offsets_of(segments: Sequence[SegmentData], end: int) -> list[int]:
    """Each segment's next offset: the next segment's base (the last one ends at ``end``)."""
    return [segments[i + 1].base_offset for i in range(len(segments) - 1)] + ([end] if segments else [])


def cleaned_range(job: CleanJob, map_end: int) -> list[SegmentData]:
    """The segments a cleaning with this ``map_end`` rewrites (Kafka: base offset below it)."""
    return [s for s in job.segments if s.base_offset < map_end]


def dirty_record_count(segments: Sequence[SegmentData], first_dirty: int, end: int) -> int:
    """Records in ``[first_dirty, end)`` by batch headers (a bound on the distinct keys to map)."""
    return sum(h.records_count for s in segments if s.base_offset < end for _, h in read_headers(s.data)
               if h.last_offset >= first_dirty and h.base_offset < end)


def map_for(job: CleanJob, end: int) -> OffsetMap:
    """An offset map no larger than the job's buffer nor than its dirty section needs."""
    return OffsetMap(buffer_bytes_for(dirty_record_count(job.segments, job.first_dirty, end), job.dedupe_buffer_bytes))


def clean(job: CleanJob) -> CleanResult:
    """Run a whole job: map, group, recopy."""
    offsets = map_for(job, job.end)
    map_end = build_offset_map(job.segments, job.first_dirty, job.end, offsets)
    rule = RetainRule(offsets, map_end, job.now_ms)
    stats = CleanStats(map_entries=offsets.size, map_memory_bytes=offsets.memory_bytes)
    todo = cleaned_range(job, map_end)
    out = []
    for group in group_segments(todo, next_offsets_of(todo, map_end), job.segment_bytes):
        segs = [todo[i] for i in group]
        data = clean_group(segs, rule, job, stats)
        out.append(CleanedSegment(segs[0].base_offset, tuple(s.base_offset for s in segs), data))
    return CleanResult(out, map_end, stats)
