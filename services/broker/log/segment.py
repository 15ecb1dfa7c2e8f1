"""One log segment: a ``.log`` file of whole record batches plus its indexes.

A segment knows nothing of partitions, replication or configs beyond the
index interval: it appends already-validated batches, reads byte ranges,
translates offsets to positions and recovers itself after a crash.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from services.broker.log.file_writes import write_fully
from services.broker.log.index import OffsetIndex, TimeIndex
from services.broker.log.txn_index import TxnIndex, index_path
from shared.errors import CorruptRecordError
from shared.records.header import HEADER_SIZE, LOG_OVERHEAD, BatchHeader, check_batch, peek_size

#: Writes at least this large reserve room ahead of the end of the ``.log`` file (``fallocate`` with
#: FALLOC_FL_KEEP_SIZE: the file's size is unchanged, readers see nothing), up to this many times the
#: write and at most ``PREALLOCATE_MAX`` bytes. ext4 then maps the pages of each write into blocks already
#: allocated: measured ~0.15 instead of ~0.2 ms of kernel CPU per MiB appended (1 MiB writes), ~0.05 µs
#: per 1 KiB record. The room left when the segment rolls or closes is given back (``release``).
PREALLOCATE_MIN_WRITE = 64 * 1024
PREALLOCATE_WRITES = 4
PREALLOCATE_MAX = 4 * 1024 * 1024
_FALLOC_FL_KEEP_SIZE = 1


def _load_fallocate() -> Any:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        f = libc.fallocate
    except (OSError, AttributeError):
        return None
    f.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
    f.restype = ctypes.c_int
    return f


_fallocate = _load_fallocate() if hasattr(os, "posix_fallocate") else None  # Linux (and glibc) only


def segment_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


@dataclass(frozen=True, slots=True)
class BatchPosition:
    position: int
    header: BatchHeader


class LogSegment:
    """Files ``<base>.log``, ``<base>.index`` and ``<base>.timeindex`` in ``directory``, and
    ``<base>.txnindex`` once a transaction aborted in it."""

    def __init__(self, directory: str, base_offset: int, index_interval_bytes: int, created_ms: int) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.created_ms = created_ms
        self.log_path = os.path.join(directory, segment_name(base_offset, ".log"))
        self._fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        self.size = os.fstat(self._fd).st_size
        self.offset_index = OffsetIndex(os.path.join(directory, segment_name(base_offset, ".index")), base_offset)
        self.time_index = TimeIndex(os.path.join(directory, segment_name(base_offset, ".timeindex")), base_offset)
        self.next_offset = base_offset
        self.max_timestamp = -1
        self._bytes_since_index = 0
        self._txn_index: TxnIndex | None = None
        self._reserved = self.size  # the file's blocks are allocated up to here (PREALLOCATE_*)

    @property
    def txn_index(self) -> TxnIndex:
        """The aborted-transaction index (read on first use; its file is written on the first entry)."""
        if self._txn_index is None:
            self._txn_index = TxnIndex(index_path(self.directory, self.base_offset))
        return self._txn_index

    def indexes_full(self, max_index_bytes: int) -> bool:
        """True once either index holds ``segment.index.bytes`` worth of entries (Kafka rolls then:
        8-byte offset entries, 12-byte time entries)."""
        return len(self.offset_index) >= max_index_bytes // 8 or len(self.time_index) >= max_index_bytes // 12

    # -- writing -----------------------------------------------------------

    def append(
        self,
        parts: Sequence[bytes | memoryview],
        batches: Sequence[tuple[int, int, int, int]],
    ) -> None:
        """Write pre-validated batches.

        ``parts`` are the bytes to write in order (``os.writev``, in pieces: ``file_writes``); ``batches``
        describes each batch as ``(relative position, base offset, last offset,
        max timestamp)`` so the indexes can be maintained without re-reading.
        """
        start = self.size
        total = sum(len(p) for p in parts)
        if total >= PREALLOCATE_MIN_WRITE and start + total > self._reserved:
            self._preallocate(start, total)
        write_fully(self._fd, parts, total)
        for rel_pos, base, last, max_ts in batches:
            pos = start + rel_pos
            if self._bytes_since_index >= self.index_interval_bytes or pos == 0:
                self.offset_index.append(base, pos)
                self._bytes_since_index = 0
            if max_ts > self.max_timestamp:
                self.max_timestamp = max_ts
                if max_ts > self.time_index.last_timestamp:
                    self.time_index.append(max_ts, last)
            self.next_offset = last + 1
        self._bytes_since_index += total
        self.size = start + total

    def _preallocate(self, start: int, total: int) -> None:
        room = min(max(total * PREALLOCATE_WRITES, total), max(PREALLOCATE_MAX, total))
        if _fallocate is None or _fallocate(self._fd, _FALLOC_FL_KEEP_SIZE, start, room) != 0:
            self._reserved = 1 << 62  # not supported here (or no space to reserve): write as is
        else:
            self._reserved = start + room

    def release(self) -> None:
        """Give back the blocks reserved past the end of the file (a segment that stops being appended
        to: rolled or closed). Truncating to the file's own size frees them."""
        if self._reserved > self.size and self._reserved < 1 << 62 and self._fd >= 0:
            try:
                os.ftruncate(self._fd, self.size)
            except OSError:
                pass
        self._reserved = self.size

    def flush(self) -> None:
        os.fsync(self._fd)
        self.offset_index.flush()
        self.time_index.flush()
        if self._txn_index is not None:
            self._txn_index.flush()

    def dup_fds(self) -> list[int]:
        """Duplicates of the log and index descriptors, for an fsync from another thread that must
        not race with this segment being closed or deleted (the duplicates keep the files open)."""
        return [os.dup(self._fd), os.dup(self.offset_index.fd()), os.dup(self.time_index.fd())]

    # -- reading -----------------------------------------------------------

    def read_at(self, position: int, size: int) -> bytes:
        size = min(size, self.size - position)
        if size <= 0:
            return b""
        return os.pread(self._fd, size, position)

    def find_batch(self, offset: int) -> BatchPosition | None:
        """The first batch whose last offset is at or after ``offset``."""
        _, pos = self.offset_index.lookup(offset)
        for bp in self.scan_headers(pos):
            if bp.header.last_offset >= offset:
                return bp
        return None

    def scan_headers(self, position: int = 0) -> Iterator[BatchPosition]:
        """Batch headers from ``position`` to the end (no CRC check)."""
        while position + HEADER_SIZE <= self.size:
            head = os.pread(self._fd, HEADER_SIZE, position)
            header = BatchHeader.parse(head)
            yield BatchPosition(position, header)
            position += header.size

    def find_timestamp(self, timestamp: int) -> BatchPosition | None:
        """The first batch whose max timestamp is at or after ``timestamp``."""
        start_offset = self.time_index.lookup_before(timestamp)
        _, pos = self.offset_index.lookup(start_offset)
        for bp in self.scan_headers(pos):
            if bp.header.max_timestamp >= timestamp:
                return bp
        return None

    # -- recovery and truncation ----------------------------------------------

    def load(self) -> int:
        """Open a segment trusted up to its end (before the recovery point).

        Walks batch headers from the last offset-index entry to the file end;
        if the indexes are unreadable or the walk does not end exactly at the
        end of the file, falls back to a full ``recover()``. Returns the number
        of bytes truncated (0 when nothing was wrong).
        """
        if self.size == 0:
            self.offset_index.reset()
            self.time_index.reset()
            return 0
        index_ok = self.offset_index.load(self.size)
        start = self.offset_index.lookup(2**62)[1] if index_ok else 0
        last: BatchHeader | None = None
        position = start
        while position < self.size:
            if position + HEADER_SIZE > self.size:
                return self.recover()
            header = BatchHeader.parse(os.pread(self._fd, HEADER_SIZE, position))
            if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or position + header.size > self.size:
                return self.recover()
            last = header
            position += header.size
        if not index_ok or last is None:
            return self.recover()
        self.next_offset = last.next_offset
        if not self.time_index.load(self.next_offset):
            return self.recover()
        self.max_timestamp = self.time_index.last_timestamp
        self._bytes_since_index = self.index_interval_bytes
        return 0

    def recover(self) -> int:
        """Validate every batch, rebuild both indexes, truncate at the first bad batch.

        A batch is bad when its header is cut off, its length is impossible or
        runs past the file, its magic or CRC is wrong, or its offsets go
        backwards. Returns the number of bytes truncated.
        """
        self.offset_index.reset()
        self.time_index.reset()
        self.next_offset = self.base_offset
        self.max_timestamp = -1
        self._bytes_since_index = 0
        position = 0
        while position + LOG_OVERHEAD <= self.size:
            _, size = peek_size(os.pread(self._fd, LOG_OVERHEAD, position))
            if size < HEADER_SIZE or position + size > self.size:
                break
            try:
                header = check_batch(os.pread(self._fd, size, position))
            except CorruptRecordError:
                break
            if header.base_offset < self.next_offset:
                break  # offsets must increase
            if self._bytes_since_index >= self.index_interval_bytes or position == 0:
                self.offset_index.append(header.base_offset, position)
                self._bytes_since_index = 0
            self._bytes_since_index += size
            if header.max_timestamp > self.max_timestamp:
                self.max_timestamp = header.max_timestamp
                self.time_index.append(header.max_timestamp, header.last_offset)
            self.next_offset = header.next_offset
            position += size
        truncated = self.size - position
        if truncated:
            os.ftruncate(self._fd, position)
            self.size = position
        self._reserved = self.size
        return truncated

    def truncate_to(self, offset: int) -> int:
        """Remove every batch whose last offset is at or after ``offset``; return bytes removed."""
        bp = self.find_batch(offset)
        if bp is None:
            return 0
        removed = self.size - bp.position
        os.ftruncate(self._fd, bp.position)
        self.size = self._reserved = bp.position
        self.offset_index.truncate_to_position(bp.position)
        self.time_index.truncate_to_offset(bp.header.base_offset)
        self.txn_index.truncate_to(bp.header.base_offset)
        self.next_offset = bp.header.base_offset
        self.max_timestamp = max((b.header.max_timestamp for b in self.scan_headers(0)), default=-1)
        self._bytes_since_index = self.index_interval_bytes
        return removed

    # -- lifecycle --------------------------------------------------------------

    def close(self) -> None:
        if self._fd >= 0:
            self.release()
            os.close(self._fd)
            self._fd = -1
        self.offset_index.close()
        self.time_index.close()

    def delete(self) -> None:
        self.close()
        for path in (self.log_path,):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        self.offset_index.delete()
        self.time_index.delete()
        self.txn_index.delete()

    def __repr__(self) -> str:
        return f"LogSegment(base={self.base_offset}, size={self.size}, next={self.next_offset})"
