"""A decoded record and the record-level constants shared by the builder and the decoders.

Record layout inside a batch's records section (zig-zag varints)::

    length: varint, attributes: int8, timestampDelta: varlong,
    offsetDelta: varint, keyLength: varint, key, valueLength: varint, value,
    headersCount: varint, [headerKeyLength: varint, headerKey (utf-8),
                           headerValueLength: varint, headerValue]
"""

from __future__ import annotations

import struct

Header = tuple[str, bytes | None]
#: The headers of a record without headers: one shared empty tuple, not a list per record.
NO_HEADERS: tuple[Header, ...] = ()

# Control records: key = version int16 (0) + type int16 (0 abort, 1 commit).
CONTROL_ABORT = 0
CONTROL_COMMIT = 1
CONTROL_KEY = struct.Struct(">hh")


class Record:
    """One decoded record with its absolute offset and timestamp."""

    __slots__ = ("offset", "timestamp", "key", "value", "headers")

    def __init__(
        self,
        offset: int,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: list[Header] | tuple[Header, ...],
    ) -> None:
        self.offset = offset
        self.timestamp = timestamp
        self.key = key
        self.value = value
        self.headers = headers

    def __repr__(self) -> str:
        return (
            f"Record(offset={self.offset}, timestamp={self.timestamp}, "
            f"key={self.key!r}, value={self.value!r}, headers={self.headers!r})"
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Record):
            return NotImplemented
        return (self.offset, self.timestamp, self.key, self.value, list(self.headers)) == (
            other.offset,
            other.timestamp,
            other.key,
            other.value,
            list(other.headers),
        )
