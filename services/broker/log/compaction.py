"""The broker's side of compaction for one ``PartitionLog``: describe, offer, check, swap.

* ``log_state``: the log as the pure selection rules see it (``shared.compaction.selection``);
* ``make_job``: the segments of a cleanable range as a ``CleanJob`` (read from the files);
* ``apply_result``: refuse a result when the log changed under the job or when
  ``verify_result`` finds anything wrong; otherwise swap the cleaned segments in with
  ``replace_segments`` and write ``cleaner-offset-checkpoint`` (the next first dirty offset);
  ``apply_files`` the same for a result already written as ``.cleaned`` files and checked;
* ``clean_in_process``: the three in a row with the cleaning core run in this process
  (tests and a single-process fallback; the workers do the cleaning step remotely).

The broker decides and applies; the cleaning itself is the pure core. No gRPC, no asyncio.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Collection, Iterator
from dataclasses import dataclass

from services.broker.log.partition_log import PartitionLog, _read_checkpoint, _write_checkpoint
from services.broker.log.replace import replace_segments
from services.broker.log.segment import LogSegment
from services.broker.log.segment_swap import CleanedFiles, StepHook, env_fault_hook
from shared.compaction.cleaning import CleanedSegment, CleanJob, CleanResult, SegmentData, clean
from shared.compaction.offset_map import DEFAULT_BUFFER_BYTES
from shared.compaction.selection import LONG_MAX, Cleanability, LogState, SegmentInfo, assess
from shared.compaction.txn import AbortedRange
from shared.compaction.verify import CleanVerificationError, verify_result

CHECKPOINT_FILE = "cleaner-offset-checkpoint"


class LogChangedError(CleanVerificationError):
    """The log was truncated, deleted or shrunk by retention while the job ran."""


@dataclass(frozen=True, slots=True)
class OfferedJob:
    """A job as the broker offered it: the segments it covers (as they were) and its decisions.
    The segment bytes are read only when needed (streamed to a worker, or checked at the end)."""

    segments: tuple[LogSegment, ...]
    sizes: tuple[int, ...]
    first_dirty: int
    end: int
    now_ms: int
    delete_retention_ms: int
    segment_bytes: int
    dedupe_buffer_bytes: int
    producer_last_offsets: frozenset[int]
    hash_seed: int = 0  # the offset map's key-hash seed, drawn per job and never shown to producers
    aborted_txns: tuple[AbortedRange, ...] = ()  # abort index entries overlapping the job's range

    @property
    def total_bytes(self) -> int:
        return sum(self.sizes)

    def chunks(self, chunk_bytes: int) -> Iterator[tuple[int, bytes]]:
        """``(base offset, bytes)`` pieces of every segment in order (an empty one for an empty segment)."""
        for seg, size in zip(self.segments, self.sizes, strict=True):
            if size == 0:
                yield seg.base_offset, b""
            for pos in range(0, size, chunk_bytes):
                try:
                    data = seg.read_at(pos, min(chunk_bytes, size - pos))
                except (OSError, ValueError) as exc:  # closed by retention or truncation meanwhile
                    raise LogChangedError(f"segment {seg.base_offset} of {seg.directory}: {exc}") from exc
                if len(data) != min(chunk_bytes, size - pos):
                    raise LogChangedError(f"segment {seg.base_offset} of {seg.directory} shrank during the job")
                yield seg.base_offset, data

    def read(self) -> CleanJob:
        """The job with its segments' bytes (for cleaning in process, or to check a result)."""
        try:
            data = tuple(SegmentData(s.base_offset, s.read_at(0, n)) for s, n in zip(self.segments, self.sizes,
                                                                                      strict=True))
        except (OSError, ValueError) as exc:
            raise LogChangedError(f"cannot read the job's segments again: {exc}") from exc
        if any(d.size != n for d, n in zip(data, self.sizes, strict=True)):
            raise LogChangedError("a segment of the job shrank")
        return self.with_segments(data)

    def with_segments(self, data: tuple[SegmentData, ...]) -> CleanJob:
        """The job as a worker sees it, with ``data`` as its segments' bytes."""
        return CleanJob(data, self.first_dirty, self.end, self.now_ms, self.delete_retention_ms, self.segment_bytes,
                        self.dedupe_buffer_bytes, self.producer_last_offsets, self.hash_seed, self.aborted_txns)


def read_cleaner_checkpoint(plog: PartitionLog) -> int | None:
    return _read_checkpoint(plog.directory, CHECKPOINT_FILE)


_FIRST_TIMESTAMPS: weakref.WeakKeyDictionary[LogSegment, int] = weakref.WeakKeyDictionary()


def _first_timestamp(seg: LogSegment) -> int:
    """The first batch's max timestamp (-1 for an empty segment); remembered, as it never changes."""
    ts = _FIRST_TIMESTAMPS.get(seg)
    if ts is None:
        ts = next((bp.header.max_timestamp for bp in seg.scan_headers(0)), -1)
        if ts >= 0:
            _FIRST_TIMESTAMPS[seg] = ts
    return ts


def log_state(plog: PartitionLog, name: str, high_watermark: int, last_stable_offset: int | None = None
              ) -> LogState:
    extra = plog.config.extra
    infos = tuple(
        SegmentInfo(s.base_offset, s.next_offset, s.size, _first_timestamp(s), s.max_timestamp) for s in plog.segments
    )
    return LogState(
        name, infos, plog.log_start_offset, high_watermark, read_cleaner_checkpoint(plog),
        cleanup_policy=plog.config.cleanup_policy,
        min_cleanable_dirty_ratio=float(extra.get("min.cleanable.dirty.ratio", 0.5)),
        min_compaction_lag_ms=int(extra.get("min.compaction.lag.ms", 0)),
        max_compaction_lag_ms=int(extra.get("max.compaction.lag.ms", LONG_MAX)),
        last_stable_offset=last_stable_offset,
    )


def make_job(plog: PartitionLog, c: Cleanability, now_ms: int, producer_last_offsets: Collection[int] = (),
             dedupe_buffer_bytes: int = DEFAULT_BUFFER_BYTES, hash_seed: int = 0) -> OfferedJob:
    segs = tuple(s for s in plog.segments[:-1] if s.base_offset < c.first_uncleanable)
    aborted = (tuple(AbortedRange(e.first_offset, e.last_offset, e.producer_id)
                     for e in plog.aborted_transactions(segs[0].base_offset, c.first_uncleanable)) if segs else ())
    return OfferedJob(
        segs, tuple(s.size for s in segs), c.first_dirty, c.first_uncleanable, now_ms,
        delete_retention_ms=int(plog.config.extra.get("delete.retention.ms", 86_400_000)),
        segment_bytes=plog.config.segment_bytes,
        dedupe_buffer_bytes=dedupe_buffer_bytes,
        producer_last_offsets=frozenset(producer_last_offsets),
        hash_seed=hash_seed,
        aborted_txns=aborted,
    )


def check_unchanged(plog: PartitionLog, offered: OfferedJob) -> None:
    live = plog.segments[: len(offered.segments)]
    if tuple(live) != offered.segments or any(s.size != n for s, n in zip(live, offered.sizes, strict=True)):
        raise LogChangedError(f"{plog.directory} changed while it was being cleaned")
    if len(plog.segments) <= len(offered.segments):
        raise LogChangedError(f"{plog.directory} lost its active segment while it was being cleaned")


def apply_result(plog: PartitionLog, offered: OfferedJob, cleaned: list[CleanedSegment], map_end: int,
                 on_step: StepHook = env_fault_hook, *, verify: bool = True) -> None:
    """Check the result against the log and the job, then swap it in (or raise, changing nothing).
    ``verify=False`` when the caller has already run ``verify_result`` on this result."""
    check_unchanged(plog, offered)
    if verify:
        verify_result(offered.read(), cleaned, map_end)
    _swap(plog, offered, [(c.base_offset, c.replaces, c.data) for c in cleaned], map_end, on_step)


def apply_files(plog: PartitionLog, offered: OfferedJob, files: CleanedFiles, map_end: int,
                on_step: StepHook = env_fault_hook) -> None:
    """Swap in a result the caller received as ``.cleaned`` files, checked and fsynced (or raise, changing
    nothing in the log: the files stay for the caller to discard)."""
    check_unchanged(plog, offered)
    files.claim()
    _swap(plog, offered, [(base, replaces, None) for base, replaces, _ in files.segments], map_end, on_step)


def _swap(plog: PartitionLog, offered: OfferedJob, cleaned: list[tuple[int, tuple[int, ...], bytes | None]],
          map_end: int, on_step: StepHook) -> None:
    by_base = {s.base_offset: s for s in offered.segments}
    old = [by_base[b] for _, replaces, _ in cleaned for b in replaces]
    if old:
        replace_segments(plog, [(base, data) for base, _, data in cleaned], old, on_step)
    _write_checkpoint(plog.directory, CHECKPOINT_FILE, map_end)


def clean_in_process(plog: PartitionLog, name: str, high_watermark: int, now_ms: int,
                     producer_last_offsets: Collection[int] = (), dedupe_buffer_bytes: int = DEFAULT_BUFFER_BYTES,
                     force: bool = False) -> CleanResult | None:
    """Clean ``plog`` once if it is cleanable (``force``: whenever it has dirty bytes)."""
    c = assess(log_state(plog, name, high_watermark), now_ms)
    if not (c.cleanable or (force and c.dirty_bytes > 0 and "compact" in plog.config.cleanup_policy)):
        return None
    offered = make_job(plog, c, now_ms, producer_last_offsets, dedupe_buffer_bytes)
    result = clean(offered.read())
    apply_result(plog, offered, result.segments, result.map_end)
    return result


def remove_cleaner_checkpoint(plog: PartitionLog) -> None:
    try:
        os.unlink(os.path.join(plog.directory, CHECKPOINT_FILE))
    except FileNotFoundError:
        pass
