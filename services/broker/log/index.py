"""Sparse offset and time indexes of one segment.

Entries live in memory (two parallel arrays, searched with bisect) and are
appended to the index file as they are added. An index file is only trusted
when it loads cleanly; otherwise the segment rebuilds it from the log.

Offset index entry (8 bytes): relativeOffset int32, position int32.
Time index entry (12 bytes): timestamp int64, relativeOffset int32.
"""

from __future__ import annotations

import bisect
import os
import struct
from array import array

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


class _IndexFile:
    entry: struct.Struct

    def __init__(self, path: str, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        # Opened on the first write: an empty partition holds no index descriptors, so a broker
        # hosting thousands of idle partitions stays within its open-file limit.
        self._fd = -1

    def fd(self) -> int:
        """The descriptor, opening (creating) the file if needed."""
        if self._fd < 0:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        return self._fd

    def _write(self, data: bytes) -> None:
        os.write(self.fd(), data)

    def _read_all(self) -> bytes:
        if self._fd >= 0:
            size = os.fstat(self._fd).st_size
            return os.pread(self._fd, size, 0) if size else b""
        try:
            with open(self.path, "rb") as f:
                return f.read()
        except FileNotFoundError:
            return b""

    def _reset_file(self) -> None:
        if self._fd >= 0:
            os.ftruncate(self._fd, 0)
        elif os.path.exists(self.path):
            os.truncate(self.path, 0)

    def flush(self) -> None:
        if self._fd >= 0:
            os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def delete(self) -> None:
        self.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


class OffsetIndex(_IndexFile):
    """Maps offsets to file positions, one entry every ``index.interval.bytes``."""

    entry = _OFFSET_ENTRY

    def __init__(self, path: str, base_offset: int) -> None:
        super().__init__(path, base_offset)
        self.offsets = array("q")
        self.positions = array("q")

    def __len__(self) -> int:
        return len(self.offsets)

    def load(self, log_size: int) -> bool:
        """Load entries from disk; False if the file is missing, torn or inconsistent."""
        data = self._read_all()
        if len(data) % 8:
            return False
        offsets = array("q")
        positions = array("q")
        last_off, last_pos = -1, -1
        for rel, pos in _OFFSET_ENTRY.iter_unpack(data):
            off = self.base_offset + rel
            if rel < 0 or off <= last_off or pos <= last_pos or pos >= log_size:
                return False
            offsets.append(off)
            positions.append(pos)
            last_off, last_pos = off, pos
        self.offsets, self.positions = offsets, positions
        return True

    def append(self, offset: int, position: int) -> None:
        if self.offsets and offset <= self.offsets[-1]:
            return
        self.offsets.append(offset)
        self.positions.append(position)
        self._write(_OFFSET_ENTRY.pack(offset - self.base_offset, position))

    def lookup(self, offset: int) -> tuple[int, int]:
        """The largest indexed ``(offset, position)`` at or below ``offset`` (or the segment start)."""
        i = bisect.bisect_right(self.offsets, offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self.offsets[i], self.positions[i]

    def truncate_to_position(self, position: int) -> None:
        """Drop entries at or beyond ``position`` and rewrite the file."""
        i = bisect.bisect_left(self.positions, position)
        if i == len(self.positions):
            return
        del self.offsets[i:]
        del self.positions[i:]
        self.rewrite()

    def rewrite(self) -> None:
        self._reset_file()
        self._write(
            b"".join(_OFFSET_ENTRY.pack(o - self.base_offset, p) for o, p in zip(self.offsets, self.positions))
        )

    def reset(self) -> None:
        self.offsets = array("q")
        self.positions = array("q")
        self._reset_file()


class TimeIndex(_IndexFile):
    """Maps timestamps to offsets: entries carry the running maximum timestamp."""

    entry = _TIME_ENTRY

    def __init__(self, path: str, base_offset: int) -> None:
        super().__init__(path, base_offset)
        self.timestamps = array("q")
        self.offsets = array("q")

    def __len__(self) -> int:
        return len(self.timestamps)

    def load(self, next_offset: int) -> bool:
        data = self._read_all()
        if len(data) % 12:
            return False
        ts_arr = array("q")
        off_arr = array("q")
        last_ts, last_off = -(2**63), -1
        for ts, rel in _TIME_ENTRY.iter_unpack(data):
            off = self.base_offset + rel
            if rel < 0 or ts <= last_ts or off < last_off or off >= next_offset:
                return False
            ts_arr.append(ts)
            off_arr.append(off)
            last_ts, last_off = ts, off
        self.timestamps, self.offsets = ts_arr, off_arr
        return True

    @property
    def last_timestamp(self) -> int:
        return self.timestamps[-1] if self.timestamps else -1

    def append(self, timestamp: int, offset: int) -> None:
        if self.timestamps and timestamp <= self.timestamps[-1]:
            return
        self.timestamps.append(timestamp)
        self.offsets.append(offset)
        self._write(_TIME_ENTRY.pack(timestamp, offset - self.base_offset))

    def lookup_before(self, timestamp: int) -> int:
        """Offset of the last entry whose timestamp is strictly below ``timestamp``.

        Every record before that offset has a smaller timestamp, so a search for
        the first record at or after ``timestamp`` may start there.
        """
        i = bisect.bisect_left(self.timestamps, timestamp) - 1
        if i < 0:
            return self.base_offset
        return self.offsets[i]

    def truncate_to_offset(self, offset: int) -> None:
        i = bisect.bisect_left(self.offsets, offset)
        if i == len(self.offsets):
            return
        del self.timestamps[i:]
        del self.offsets[i:]
        self._reset_file()
        self._write(
            b"".join(_TIME_ENTRY.pack(t, o - self.base_offset) for t, o in zip(self.timestamps, self.offsets))
        )

    def reset(self) -> None:
        self.timestamps = array("q")
        self.offsets = array("q")
        self._reset_file()
