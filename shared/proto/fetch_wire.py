"""``FetchResponse`` read from protobuf wire format by hand, leaving the record batches where they are.

The generated parser copies each partition's ``records`` into the message, and
reading the field copies it again into a new ``bytes``: two copies of every
fetched megabyte, made on gRPC's and the reader's threads, which cost the
consumer more than decoding its records. Here the response bytes gRPC hands
over are parsed for the few small fields only; a partition's records are
``buf[records_start:records_end]``, and the consumer decodes them in place.
Field numbers and types follow ``tidelog.proto`` (a unit test checks every field
against the generated parser); unknown fields are skipped, as protobuf does.
"""

from __future__ import annotations


class WireError(ValueError):
    """The bytes are not a well-formed message."""


def _varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= end:
            raise WireError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise WireError("varint too long")


def _signed(v: int) -> int:
    """int32/int64 fields travel as 64-bit two's complement varints."""
    return v - (1 << 64) if v >= 1 << 63 else v


def _fields(buf: bytes, pos: int, end: int):  # type: ignore[no-untyped-def]
    """Yield ``(field number, value)``: an int for varints, ``(start, end)`` for length-delimited fields."""
    while pos < end:
        key, pos = _varint(buf, pos, end)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos, end)
            yield field, value
        elif wire == 2:
            n, pos = _varint(buf, pos, end)
            if pos + n > end:
                raise WireError("length-delimited field runs past its message")
            yield field, (pos, pos + n)
            pos += n
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise WireError(f"unsupported wire type {wire}")
        if pos > end:
            raise WireError("field runs past its message")


class FetchPartitionView:
    """A partition of a fetch response; its records are ``buf[records_start:records_end]``."""

    __slots__ = ("partition", "error_code", "error_message", "high_watermark", "last_stable_offset",
                 "log_start_offset", "log_end_offset", "leader_epoch", "fetch_offset", "next_offset",
                 "buf", "records_start", "records_end")

    def __init__(self, buf: bytes, pos: int, end: int) -> None:
        self.partition = self.error_code = self.high_watermark = self.last_stable_offset = 0
        self.log_start_offset = self.log_end_offset = self.leader_epoch = 0
        self.fetch_offset = self.next_offset = 0
        self.error_message = ""
        self.buf = buf
        self.records_start = self.records_end = 0
        for field, value in _fields(buf, pos, end):
            if field == 9 and isinstance(value, tuple):
                self.records_start, self.records_end = value
            elif field == 3 and isinstance(value, tuple):
                self.error_message = bytes(buf[value[0]:value[1]]).decode()
            elif isinstance(value, int) and field in _PARTITION_INTS:
                setattr(self, _PARTITION_INTS[field], _signed(value))

    @property
    def records(self) -> bytes:
        """The records as a new ``bytes`` (a copy; the consumer reads them in place instead)."""
        return bytes(self.buf[self.records_start:self.records_end])

    @property
    def records_size(self) -> int:
        return self.records_end - self.records_start


_PARTITION_INTS = {1: "partition", 2: "error_code", 4: "high_watermark", 5: "last_stable_offset",
                   6: "log_start_offset", 7: "log_end_offset", 8: "leader_epoch", 10: "fetch_offset",
                   11: "next_offset"}


class FetchTopicView:
    __slots__ = ("name", "partitions")

    def __init__(self, buf: bytes, pos: int, end: int) -> None:
        self.name = ""
        self.partitions: list[FetchPartitionView] = []
        for field, value in _fields(buf, pos, end):
            if field == 1 and isinstance(value, tuple):
                self.name = bytes(buf[value[0]:value[1]]).decode()
            elif field == 2 and isinstance(value, tuple):
                self.partitions.append(FetchPartitionView(buf, *value))


class FetchResponseView:
    __slots__ = ("throttle_time_ms", "error_code", "topics", "correlation_id")

    def __init__(self, buf: bytes) -> None:
        self.throttle_time_ms = self.error_code = self.correlation_id = 0
        self.topics: list[FetchTopicView] = []
        for field, value in _fields(buf, 0, len(buf)):
            if field == 3 and isinstance(value, tuple):
                self.topics.append(FetchTopicView(buf, *value))
            elif isinstance(value, int):
                if field == 1:
                    self.throttle_time_ms = _signed(value)
                elif field == 2:
                    self.error_code = _signed(value)
                elif field == 4:
                    self.correlation_id = _signed(value)


def parse_fetch_response(buf: bytes) -> FetchResponseView:
    """gRPC response deserializer for FetchStream/Fetch: a view over ``buf`` (no copy of the records)."""
    return FetchResponseView(buf)
