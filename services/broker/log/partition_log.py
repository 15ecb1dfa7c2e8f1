"""A partition's log: an ordered list of segments with offsets, retention and recovery.

Files only: appends assign offsets by rewriting the 16 bytes outside the CRC
(baseOffset, batchLength unchanged, partitionLeaderEpoch) and write the rest of
each batch as it came, with ``os.writev`` and no copy. Records are decoded
only for timestamp lookups. No networking, no asyncio, no replication logic.

Checkpoint files in the partition directory:
    recovery-point      offset below which every segment was fsynced
    log-start-offset    first offset still readable (after retention)
"""

from __future__ import annotations

import bisect
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from services.broker.log.leader_epoch import LeaderEpochCache
from services.broker.log.segment import LogSegment
from services.broker.log.segment_swap import complete_interrupted_swaps
from services.broker.log.txn_index import collect_aborted
from services.broker.log.validation import validate_batches, validate_produce
from services.broker.txn_state import AbortedTxn
from shared.config import LogConfig
from shared.errors import CorruptRecordError, OffsetOutOfRangeError, StorageError
from shared.records.decoder import decode_batch
from shared.records.header import (
    BatchHeader,
    cut_below,
    offset_fields,
    set_base_offset,
    set_log_append_time,
)

_MAX_RELATIVE_OFFSET = 2**31 - 1
RECOVERY_POINT_FILE = "recovery-point"

log = logging.getLogger(__name__)

#: fsyncs of rolled segments run here, off the broker's event loop, as Kafka flushes a rolled
#: segment asynchronously: fsyncing up to a gigabyte inline stalled every partition for ~0.2-0.6 s.
_FLUSHER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tidelog-log-flush")
LOG_START_FILE = "log-start-offset"

Clock = Callable[[], int]


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class AppendInfo:
    first_offset: int
    last_offset: int
    max_timestamp: int
    log_append_time: int  # -1 unless message.timestamp.type=LogAppendTime
    record_count: int
    size: int
    log_start_offset: int
    batches: tuple[tuple[BatchHeader, int, int], ...] = ()  # (header as received, first offset, last offset)


@dataclass(frozen=True, slots=True)
class FetchResult:
    records: bytes | memoryview  # a view of the read when it ended inside a batch (``cut_below``)
    log_start_offset: int
    log_end_offset: int


def _write_checkpoint(directory: str, name: str, value: int) -> None:
    """Write ``value`` to ``name`` atomically. The temporary file is this thread's own: the background
    flusher and the log's thread may write the same checkpoint at once, and a shared temporary name
    let one writer's replace take the other's file away (FileNotFoundError)."""
    path = os.path.join(directory, name)
    tmp = f"{path}.{os.getpid()}-{threading.get_ident()}.tmp"
    with open(tmp, "w") as f:
        f.write(f"{value}\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _read_checkpoint(directory: str, name: str) -> int | None:
    try:
        with open(os.path.join(directory, name)) as f:
            return int(f.read().strip())
    except (FileNotFoundError, ValueError):
        return None


class PartitionLog:
    """The segments of one partition in ``directory``.

    Not thread-safe: one owner (the broker's partition) serialises calls.
    """

    def __init__(self, directory: str, config: LogConfig | None = None, clock: Clock = wall_clock_ms) -> None:
        self.directory = directory
        self.config = config or LogConfig()
        self.clock = clock
        os.makedirs(directory, exist_ok=True)
        self.segments: list[LogSegment] = []
        self._bases: list[int] = []
        self.log_start_offset = 0
        self.recovery_point = 0
        # Guards recovery_point and its checkpoint file against the background flush of rolled
        # segments; _generation changes whenever the log is truncated or deleted, so a flush that
        # started before cannot move the recovery point over data written since.
        self._recovery_lock = threading.Lock()
        self._generation = 0
        self._rolled_flush: Future[None] | None = None
        self._unflushed_messages = 0
        self._last_flush_ms = clock()
        self.recovered_bytes = 0
        #: called with the new segment's base offset when the log rolls (producer-state snapshots)
        self.on_roll: Callable[[int], None] | None = None
        self.rolls = 0  # segments rolled since this log was opened (the broker's metrics read it)
        #: ``(due ms, paths)`` of ``.deleted`` files, removed after ``file.delete.delay.ms``
        self.pending_deletes: list[tuple[int, list[str]]] = []
        self._load()

    # -- opening ------------------------------------------------------------------

    def _load(self) -> None:
        swapped = complete_interrupted_swaps(self.directory)
        bases = sorted(
            int(name[:-4]) for name in os.listdir(self.directory) if name.endswith(".log") and name[:-4].isdigit()
        )
        recovery_point = _read_checkpoint(self.directory, RECOVERY_POINT_FILE) or 0
        now = self.clock()
        truncated_at: int | None = None
        for i, base in enumerate(bases):
            seg = LogSegment(self.directory, base, self.config.index_interval_bytes, now)
            if truncated_at is not None:
                seg.delete()  # everything after a truncation point is unreachable
                continue
            removed = seg.recover() if base in swapped else seg.load()
            if seg.next_offset > recovery_point or removed:
                removed += seg.recover() if not removed else 0
            self.recovered_bytes += removed
            if removed and i + 1 < len(bases):
                truncated_at = seg.next_offset
            self.segments.append(seg)
        if not self.segments:
            start = _read_checkpoint(self.directory, LOG_START_FILE) or 0
            self.segments.append(LogSegment(self.directory, start, self.config.index_interval_bytes, now))
        self._bases = [s.base_offset for s in self.segments]
        start = _read_checkpoint(self.directory, LOG_START_FILE)
        self.log_start_offset = max(start or 0, self.segments[0].base_offset)
        self.log_start_offset = min(self.log_start_offset, self.log_end_offset)
        self.recovery_point = min(recovery_point, self.log_end_offset)
        self.epochs = LeaderEpochCache(self.directory)
        if not self.epochs.entries and self.log_end_offset > self.log_start_offset:
            for h in self.iter_headers():  # the checkpoint was lost: rebuild it from the batches
                self.epochs.assign(h.partition_leader_epoch, h.base_offset)
        elif self.recovery_point < self.log_end_offset:
            # Past the recovery point the checkpoint may lack entries (``assign`` does not fsync): take
            # them from the batches, as Kafka's segment recovery does (older epochs are no-ops).
            for h in self._headers_from(self.recovery_point):
                self.epochs.assign(h.partition_leader_epoch, h.base_offset)
        self.epochs.truncate_from_end(self.log_end_offset)
        self.epochs.flush()

    # -- properties ----------------------------------------------------------------

    @property
    def active(self) -> LogSegment:
        return self.segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self.segments[-1].next_offset

    @property
    def size(self) -> int:
        return sum(s.size for s in self.segments)

    # -- appending -------------------------------------------------------------------

    def append_as_leader(self, records: bytes | bytearray | memoryview, leader_epoch: int = 0) -> AppendInfo:
        """Validate, assign offsets from the log end and append. All or nothing."""
        view, batches = validate_produce(records, self.config)
        return self.append_validated(view, batches, leader_epoch)

    def append_validated(
        self, view: memoryview, batches: list[tuple[int, BatchHeader]], leader_epoch: int
    ) -> AppendInfo:
        """Append batches already checked by ``validate_batches`` (the caller may have inspected them)."""
        offset = self.log_end_offset
        self.epochs.assign(leader_epoch, offset)
        first = offset
        parts: list[bytes | memoryview] = []
        index_info: list[tuple[int, int, int, int]] = []
        assigned: list[tuple[BatchHeader, int, int]] = []
        rel = 0
        now = self.clock()
        append_time = now if self.config.log_append_time else -1
        max_ts = -1
        count = 0
        for pos, h in batches:
            last = offset + h.last_offset_delta
            assigned.append((h, offset, last))
            if append_time >= 0:
                buf = bytearray(view[pos : pos + h.size])
                set_log_append_time(buf, 0, append_time)
                set_base_offset(buf, 0, offset, leader_epoch)
                parts.append(buf)
                bmax = append_time
            else:
                parts.append(offset_fields(offset, h.batch_length, leader_epoch))
                parts.append(view[pos + 16 : pos + h.size])
                bmax = h.max_timestamp
            index_info.append((rel, offset, last, bmax))
            rel += h.size
            if bmax > max_ts:
                max_ts = bmax
            count += h.records_count
            offset = last + 1
        self._write(parts, index_info, rel, first, offset - 1, now)
        self._unflushed_messages += count
        self._maybe_flush(now)
        return AppendInfo(first, offset - 1, max_ts, append_time, count, rel, self.log_start_offset, tuple(assigned))

    def append_as_follower(self, records: bytes | bytearray | memoryview) -> AppendInfo:
        """Append batches fetched from the leader at the leader's offsets."""
        view = memoryview(records)
        batches = validate_batches(view, max(self.config.max_message_bytes, 2**31 - 1))
        expected = self.log_end_offset
        index_info: list[tuple[int, int, int, int]] = []
        max_ts = -1
        count = 0
        for pos, h in batches:
            if h.base_offset < expected:
                raise CorruptRecordError(
                    f"replicated batch at offset {h.base_offset} is below the log end offset {expected}"
                )
            index_info.append((pos, h.base_offset, h.last_offset, h.max_timestamp))
            self.epochs.assign(h.partition_leader_epoch, h.base_offset)
            max_ts = max(max_ts, h.max_timestamp)
            count += h.records_count
            expected = h.next_offset
        first = batches[0][1].base_offset
        now = self.clock()
        self._write([view], index_info, len(view), first, expected - 1, now)
        self._unflushed_messages += count
        self._maybe_flush(now)
        return AppendInfo(first, expected - 1, max_ts, -1, count, len(view), self.log_start_offset,
                          tuple((h, h.base_offset, h.last_offset) for _, h in batches))

    def _write(
        self,
        parts: list[bytes | memoryview],
        index_info: list[tuple[int, int, int, int]],
        size: int,
        first_offset: int,
        last_offset: int,
        now: int,
    ) -> None:
        seg = self.active
        if seg.size > 0 and (
            seg.size + size > self.config.segment_bytes
            or now - seg.created_ms >= self.config.segment_ms
            or last_offset - seg.base_offset > _MAX_RELATIVE_OFFSET
            or seg.indexes_full(self.config.segment_index_bytes)
        ):
            seg = self.roll(first_offset)
        elif seg.size == 0 and seg.base_offset != first_offset:
            # an empty active segment whose name does not match the first offset
            seg.delete()
            self.segments.pop()
            self._bases.pop()
            seg = self._new_segment(first_offset)
        try:
            seg.append(parts, index_info)
        except OSError as exc:
            # The message reaches clients: the partition's name and the OS reason, never a server path.
            raise StorageError(f"append to {os.path.basename(self.directory)} failed: {exc.strerror}") from exc

    def _new_segment(self, base_offset: int) -> LogSegment:
        seg = LogSegment(self.directory, base_offset, self.config.index_interval_bytes, self.clock())
        self.segments.append(seg)
        self._bases.append(base_offset)
        return seg

    def roll(self, base_offset: int | None = None) -> LogSegment:
        """Start a new active segment. The old one is fsynced in the background, and only then does
        the recovery point move past it (until then a crash recovers it, as any unflushed data)."""
        old = self.active
        base = self.log_end_offset if base_offset is None else base_offset
        if old.size == 0:
            return old
        if self.on_roll is not None:
            self.on_roll(base)
        self.rolls += 1
        old.release()
        self._rolled_flush = _FLUSHER.submit(self._flush_rolled, old.dup_fds(), old.next_offset, self._generation)
        return self._new_segment(base)

    def _flush_rolled(self, fds: list[int], upto: int, generation: int) -> None:
        try:
            for fd in fds:
                os.fsync(fd)
            self.epochs.flush()
        except OSError as exc:
            log.warning("flushing a rolled segment of %s failed: %s", self.directory, exc)
            return
        finally:
            for fd in fds:
                os.close(fd)
        with self._recovery_lock:
            if generation != self._generation or upto <= self.recovery_point:
                return
            self.recovery_point = upto
            try:
                _write_checkpoint(self.directory, RECOVERY_POINT_FILE, upto)
            except OSError as exc:
                log.warning("cannot checkpoint the recovery point of %s: %s", self.directory, exc)

    def wait_for_rolled_flush(self) -> None:
        """Block until the last rolled segment's background fsync has finished (tests, shutdown)."""
        pending = self._rolled_flush
        if pending is not None:
            pending.result()

    # -- flushing ---------------------------------------------------------------------

    def _maybe_flush(self, now: int) -> None:
        if self._unflushed_messages >= self.config.flush_messages or (
            self._unflushed_messages and now - self._last_flush_ms >= self.config.flush_ms
        ):
            self.flush()

    def maybe_flush(self) -> None:
        """Called periodically by the owner so ``flush.ms`` holds without new appends."""
        self._maybe_flush(self.clock())

    def flush(self) -> None:
        """fsync every segment holding data past the recovery point, then advance it."""
        for seg in self.segments:
            if seg.next_offset > self.recovery_point:
                seg.flush()
        self.epochs.flush()
        with self._recovery_lock:
            self.recovery_point = self.log_end_offset
            _write_checkpoint(self.directory, RECOVERY_POINT_FILE, self.recovery_point)
        self._unflushed_messages = 0
        self._last_flush_ms = self.clock()

    # -- reading ------------------------------------------------------------------------

    def _segment_index(self, offset: int) -> int:
        return max(bisect.bisect_right(self._bases, offset) - 1, 0)

    def read(
        self, offset: int, max_bytes: int, max_offset: int | None = None, *, min_one_batch: bool = True
    ) -> FetchResult:
        """Whole batches from the one holding ``offset``, up to ``max_bytes``.

        Batches whose last offset is at or beyond ``max_offset`` (the high
        watermark, for consumers) are not returned. With ``min_one_batch``, the
        first batch is returned even when it is larger than ``max_bytes``.
        """
        leo = self.log_end_offset
        if offset < self.log_start_offset or offset > leo:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside [{self.log_start_offset}, {leo}] in {os.path.basename(self.directory)}"
            )
        limit = leo if max_offset is None else min(max_offset, leo)
        if offset >= limit:
            return FetchResult(b"", self.log_start_offset, leo)
        i = self._segment_index(offset)
        while i < len(self.segments):
            seg = self.segments[i]
            bp = seg.find_batch(offset)
            if bp is None:
                i += 1
                continue
            if bp.header.last_offset >= limit:
                return FetchResult(b"", self.log_start_offset, leo)
            want = max(max_bytes, bp.header.size if min_one_batch else 0)
            data = seg.read_at(bp.position, want)
            return FetchResult(cut_below(data, limit), self.log_start_offset, leo)
        return FetchResult(b"", self.log_start_offset, leo)

    def add_aborted(self, entry: AbortedTxn) -> None:
        """Index an aborted transaction in the segment holding its abort marker."""
        self.segments[self._segment_index(entry.last_offset)].txn_index.append(entry)

    def aborted_transactions(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """The aborted transactions a read_committed read of [fetch_offset, upper_bound) overlaps."""
        i = self._segment_index(fetch_offset)
        return collect_aborted((seg.txn_index for seg in self.segments[i:]), fetch_offset, upper_bound)

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record whose timestamp is >= ``timestamp``."""
        for seg in self.segments:
            if seg.max_timestamp < timestamp:
                continue
            bp = seg.find_timestamp(timestamp)
            if bp is None:
                continue
            data = seg.read_at(bp.position, bp.header.size)
            _, records = decode_batch(data)
            for r in records:
                if r.timestamp >= timestamp and r.offset >= self.log_start_offset:
                    return r.offset, r.timestamp
        return None

    def batch_header_at(self, offset: int) -> BatchHeader | None:
        """The header of the batch holding ``offset``; None below the log start, at or past the log end,
        or where the offset is no longer in the log (compacted away)."""
        if offset < self.log_start_offset or offset >= self.log_end_offset:
            return None
        bp = self.segments[self._segment_index(offset)].find_batch(offset)
        if bp is None or bp.header.base_offset > offset:
            return None
        return bp.header

    def _headers_from(self, offset: int) -> Iterator[BatchHeader]:
        """Batch headers of the segments holding ``offset`` and after, from the batch holding it."""
        for seg in self.segments:
            if seg.next_offset <= offset:
                continue
            for bp in seg.scan_headers(0):
                if bp.header.last_offset >= offset:
                    yield bp.header

    def iter_headers(self) -> Iterator[BatchHeader]:
        """Every batch header from the log start, in order (no CRC check)."""
        for seg in self.segments:
            for bp in seg.scan_headers(0):
                if bp.header.last_offset >= self.log_start_offset:
                    yield bp.header

    # -- retention and truncation ----------------------------------------------------------

    def apply_retention(self, now: int | None = None) -> int:
        """Delete old segments by ``retention.ms`` and ``retention.bytes``; return how many."""
        now = self.clock() if now is None else now
        cfg = self.config
        if "delete" not in cfg.cleanup_policy.split(","):
            return 0  # cleanup.policy=compact: only the cleaner removes records
        doomed = 0
        candidates = self.segments[:-1]  # never the active segment
        if cfg.retention_ms >= 0:
            for seg in candidates:
                if seg.max_timestamp >= 0 and now - seg.max_timestamp > cfg.retention_ms:
                    doomed += 1
                else:
                    break
        if cfg.retention_bytes >= 0:
            excess = self.size - cfg.retention_bytes
            k = 0
            for seg in candidates:
                if excess - seg.size >= 0:
                    excess -= seg.size
                    k += 1
                else:
                    break
            doomed = max(doomed, k)
        if doomed:
            self._delete_first(doomed)
        return doomed

    def _delete_first(self, count: int) -> None:
        new_start = self.segments[count].base_offset
        self.log_start_offset = max(self.log_start_offset, new_start)
        _write_checkpoint(self.directory, LOG_START_FILE, self.log_start_offset)
        self.epochs.truncate_from_start(self.log_start_offset)
        for seg in self.segments[:count]:
            seg.delete()
        del self.segments[:count]
        del self._bases[:count]

    def increment_log_start_offset(self, offset: int) -> bool:
        """Move the log start offset up to ``offset`` (Kafka's DeleteRecords on a leader; a follower taking
        its leader's): records below it are no longer readable, whole segments below it are deleted (never
        the active one), the leader-epoch cache forgets what lies below. The checkpoint is written before
        any segment goes. False if the log starts at or after ``offset`` already."""
        if offset <= self.log_start_offset:
            return False
        if offset > self.log_end_offset:
            raise OffsetOutOfRangeError(f"cannot move the log start offset of {os.path.basename(self.directory)} "
                                        f"to {offset}, past its log end offset {self.log_end_offset}")
        self.log_start_offset = offset
        _write_checkpoint(self.directory, LOG_START_FILE, offset)
        self.epochs.truncate_from_start(offset)
        below = 0
        while below + 1 < len(self.segments) and self.segments[below + 1].base_offset <= offset:
            below += 1
        if below:
            self._delete_first(below)
        return True

    def truncate_to(self, offset: int) -> None:
        """Remove everything at and after ``offset`` (follower divergence, unclean election)."""
        if offset >= self.log_end_offset:
            return
        if offset <= self.segments[0].base_offset:
            self.truncate_fully_and_start_at(offset)
            return
        while len(self.segments) > 1 and self.segments[-1].base_offset >= offset:
            self.segments.pop().delete()
            self._bases.pop()
        self.active.truncate_to(offset)
        with self._recovery_lock:
            self._generation += 1
            self.recovery_point = min(self.recovery_point, self.log_end_offset)
            _write_checkpoint(self.directory, RECOVERY_POINT_FILE, self.recovery_point)
        self.epochs.truncate_from_end(self.log_end_offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        for seg in self.segments:
            seg.delete()
        self.segments = []
        self._bases = []
        self._new_segment(offset)
        self.log_start_offset = offset
        _write_checkpoint(self.directory, LOG_START_FILE, offset)
        with self._recovery_lock:
            self._generation += 1
            self.recovery_point = offset
            _write_checkpoint(self.directory, RECOVERY_POINT_FILE, offset)
        self.epochs.clear()

    # -- lifecycle --------------------------------------------------------------------------

    def close(self) -> None:
        """Flush and close: the next open trusts everything (recovery point = log end)."""
        self.flush()
        _write_checkpoint(self.directory, LOG_START_FILE, self.log_start_offset)
        for seg in self.segments:
            seg.close()

    def delete(self) -> None:
        with self._recovery_lock:
            self._generation += 1  # a pending background flush must not write into the removed directory
        for seg in self.segments:
            seg.delete()
        for name in os.listdir(self.directory):
            os.unlink(os.path.join(self.directory, name))
        os.rmdir(self.directory)
