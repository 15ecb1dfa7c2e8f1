"""Which logs are cleanable, and which one to clean first (Kafka's LogCleanerManager rules).

Pure: a log is described by its segments' sizes, offsets and timestamps, its cleaner
checkpoint and its configs; time comes in as ``now_ms``.

* The dirty section starts at the cleaner checkpoint (the log start when the checkpoint is
  missing or out of range) and ends at the first uncleanable offset, the smallest of: the
  active segment's base; the base of the first segment holding records at or above the high
  watermark or the last stable offset (Kafka's first unstable offset: an open transaction's data
  is never cleaned, its fate is not known yet); the base of the first segment with a record newer than ``min.compaction.lag.ms``.
  Only whole segments are ever cleaned.
* dirty ratio = dirty bytes / (clean bytes + dirty bytes).
* compaction delay: how long past ``max.compaction.lag.ms`` the oldest dirty record is.
* A log is cleanable when it has dirty bytes and its ratio exceeds
  ``min.cleanable.dirty.ratio`` or its compaction delay is positive; the dirtiest goes first.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

LONG_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    base_offset: int
    next_offset: int
    size: int
    first_timestamp: int  # first batch's max timestamp (-1 if unknown or empty)
    max_timestamp: int  # -1 if empty


@dataclass(frozen=True, slots=True)
class LogState:
    name: str  # e.g. "topic-0"
    segments: tuple[SegmentInfo, ...]  # in order; the last one is the active segment
    log_start_offset: int
    high_watermark: int
    checkpoint: int | None  # cleaner-offset-checkpoint (first dirty offset), None if never cleaned
    cleanup_policy: str = "compact"
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    last_stable_offset: int | None = None  # the LSO (first unstable offset); None: the high watermark

    @property
    def stable_end(self) -> int:
        """Offsets below this are decided: the high watermark, bounded by the first open transaction."""
        lso = self.last_stable_offset
        return self.high_watermark if lso is None else min(lso, self.high_watermark)


@dataclass(frozen=True, slots=True)
class Cleanability:
    name: str
    first_dirty: int
    first_uncleanable: int
    clean_bytes: int
    dirty_bytes: int
    dirty_ratio: float
    compaction_delay_ms: int
    cleanable: bool


def first_dirty_offset(log: LogState) -> int:
    end = log.segments[-1].next_offset if log.segments else log.log_start_offset
    cp = log.checkpoint
    if cp is None or cp < log.log_start_offset or cp > end:
        return log.log_start_offset
    return cp


def first_uncleanable_offset(log: LogState, first_dirty: int, now_ms: int) -> int:
    segs = log.segments
    if not segs:
        return first_dirty
    limit = segs[-1].base_offset  # never the active segment
    for s in segs[:-1]:
        if s.next_offset <= first_dirty:
            continue
        if s.next_offset > log.stable_end:
            limit = min(limit, s.base_offset)
            break
        if log.min_compaction_lag_ms > 0 and s.max_timestamp > now_ms - log.min_compaction_lag_ms:
            limit = min(limit, s.base_offset)
            break
    return max(limit, first_dirty)


def _dirty_segments(segs: Sequence[SegmentInfo], first_dirty: int, end: int) -> list[SegmentInfo]:
    return [s for s in segs[:-1] if s.base_offset >= first_dirty and s.next_offset <= end and s.base_offset < end]


def assess(log: LogState, now_ms: int) -> Cleanability:
    first_dirty = first_dirty_offset(log)
    end = first_uncleanable_offset(log, first_dirty, now_ms)
    clean_bytes = sum(s.size for s in log.segments if s.base_offset < first_dirty)
    dirty = _dirty_segments(log.segments, first_dirty, end)
    dirty_bytes = sum(s.size for s in dirty)
    total = clean_bytes + dirty_bytes
    ratio = dirty_bytes / total if total else 0.0
    delay = 0
    if log.max_compaction_lag_ms < LONG_MAX:
        stamps = [s.first_timestamp for s in dirty if s.first_timestamp >= 0]
        if stamps:
            delay = max(0, now_ms - min(stamps) - log.max_compaction_lag_ms)
    compacted = "compact" in log.cleanup_policy.split(",")
    cleanable = compacted and dirty_bytes > 0 and (ratio > log.min_cleanable_dirty_ratio or delay > 0)
    return Cleanability(log.name, first_dirty, end, clean_bytes, dirty_bytes, ratio, delay, cleanable)


def choose_filthiest(logs: Iterable[LogState], now_ms: int, busy: Collection[str] = ()) -> Cleanability | None:
    """The cleanable log with the highest dirty ratio, skipping ``busy`` (in progress, quarantined)."""
    best: Cleanability | None = None
    for log in logs:
        if log.name in busy:
            continue
        c = assess(log, now_ms)
        if c.cleanable and (best is None or c.dirty_ratio > best.dirty_ratio):
            best = c
    return best
