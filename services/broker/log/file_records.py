"""A byte range of a segment file, sent to a Kafka client with ``sendfile(2)`` (Kafka's ``FileRecords``
slice): the record bytes go from the page cache to the socket without being read into the broker.

Reading a 1 MiB fetch into a ``bytes``, joining it to the response header and writing it cost the broker
~1.1 ms of CPU per MiB here (two copies, and fresh pages for each on this VM); ``sendfile`` ~0.3 ms.

The range is decided when the fetch is read (whole batches, below the high watermark), on a duplicate of
the segment's descriptor: the segment may roll, be deleted or be swapped by the cleaner before the response
is written, and the duplicate keeps the file it was read from. The segment's own descriptor is
``O_APPEND`` and every read of it is a ``pread``, so the shared file offset that ``sendfile`` may move is
never used. Only a truncation (a leader becoming a follower) can shorten the range before it is sent;
the sender then closes the connection, as the frame's length can no longer be kept.
"""

from __future__ import annotations

import os

#: Reads at least this large become a ``FileRecords`` on connections that can take them (plaintext Kafka
#: listener); smaller ones are copied, as one ``sendfile`` costs the event loop a few waits.
ZERO_COPY_MIN_BYTES = 64 * 1024


class ShortFileRecords(OSError):
    """The file held fewer bytes than the range when it was sent (truncated meanwhile)."""


class FileRecords:
    """``size`` bytes at ``position`` of a file; owns ``fd`` (closed by ``close()``, else when collected)."""

    __slots__ = ("fd", "position", "size")

    def __init__(self, fd: int, position: int, size: int) -> None:
        self.fd = fd
        self.position = position
        self.size = size

    def __len__(self) -> int:
        return self.size

    def fileno(self) -> int:
        return self.fd

    def read(self) -> bytes:
        """The bytes (a copy): for a transport that cannot ``sendfile`` (TLS)."""
        data = os.pread(self.fd, self.size, self.position)
        if len(data) != self.size:
            raise ShortFileRecords(f"{len(data)} of {self.size} bytes left at position {self.position}")
        return data

    def close(self) -> None:
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)

    def __del__(self) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"FileRecords(fd={self.fd}, position={self.position}, size={self.size})"
