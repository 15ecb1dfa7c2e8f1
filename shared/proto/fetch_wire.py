"""``FetchResponse`` written and read in protobuf wire format by hand, leaving the record batches where they are.

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

from collections.abc import Sequence
from typing import NamedTuple

from shared.proto.wire import WireError, fields, int_fields, named_list, signed, text, text_field, varint

__all__ = ["WireError", "FetchResponseView", "parse_fetch_response", "encode_fetch_response"]


class FetchPartitionView:
    """A partition of a fetch response; its records are ``buf[records_start:records_end]``."""

    __slots__ = ("partition", "error_code", "error_message", "high_watermark", "last_stable_offset",
                 "log_start_offset", "log_end_offset", "leader_epoch", "fetch_offset", "next_offset",
                 "aborted_transactions", "buf", "records_start", "records_end")

    def __init__(self, buf: bytes, pos: int, end: int) -> None:
        self.partition = self.error_code = self.high_watermark = self.last_stable_offset = 0
        self.log_start_offset = self.log_end_offset = self.leader_epoch = 0
        self.fetch_offset = self.next_offset = 0
        self.error_message = ""
        #: read_committed: (producer_id, first_offset) of each aborted transaction the range overlaps
        self.aborted_transactions: list[tuple[int, int]] = []
        self.buf = buf
        self.records_start = self.records_end = 0
        for field, value in fields(buf, pos, end):
            if field == 9 and isinstance(value, tuple):
                self.records_start, self.records_end = value
            elif field == 3 and isinstance(value, tuple):
                self.error_message = text(buf, value)
            elif field == 12 and isinstance(value, tuple):
                self.aborted_transactions.append(_aborted(buf, *value))
            elif isinstance(value, int) and field in _PARTITION_INTS:
                setattr(self, _PARTITION_INTS[field], signed(value))

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


def _aborted(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    pid = first = 0
    for field, value in fields(buf, pos, end):
        if isinstance(value, int):
            if field == 1:
                pid = signed(value)
            elif field == 2:
                first = signed(value)
    return pid, first


class FetchTopicView:
    __slots__ = ("name", "partitions")

    def __init__(self, buf: bytes, pos: int, end: int) -> None:
        self.name, self.partitions = named_list(buf, pos, end, lambda a, b: FetchPartitionView(buf, a, b))


class FetchResponseView:
    __slots__ = ("throttle_time_ms", "error_code", "topics", "correlation_id", "session_id")

    def __init__(self, buf: bytes) -> None:
        self.throttle_time_ms = self.error_code = self.correlation_id = self.session_id = 0
        self.topics: list[FetchTopicView] = []
        for field, value in fields(buf, 0, len(buf)):
            if field == 3 and isinstance(value, tuple):
                self.topics.append(FetchTopicView(buf, *value))
            elif isinstance(value, int):
                if field == 1:
                    self.throttle_time_ms = signed(value)
                elif field == 2:
                    self.error_code = signed(value)
                elif field == 4:
                    self.correlation_id = signed(value)
                elif field == 5:
                    self.session_id = signed(value)


def parse_fetch_response(buf: bytes) -> FetchResponseView:
    """gRPC response deserializer for FetchStream/Fetch: a view over ``buf`` (no copy of the records)."""
    return FetchResponseView(buf)


class FetchPartitionData(NamedTuple):
    """One partition of a fetch response as the broker writes it (``FetchPartitionResponse``)."""

    partition: int
    error_code: int = 0
    error_message: str = ""
    high_watermark: int = 0
    last_stable_offset: int = 0
    log_start_offset: int = 0
    log_end_offset: int = 0
    leader_epoch: int = 0
    records: bytes | memoryview = b""
    fetch_offset: int = 0
    next_offset: int = 0
    aborted_transactions: Sequence[tuple[int, int]] = ()


def encode_fetch_response(
    *,
    correlation_id: int,
    topics: Sequence[tuple[str, Sequence[FetchPartitionData]]],
    throttle_time_ms: int = 0,
    error_code: int = 0,
    session_id: int = 0,
) -> bytes:
    """The serialised ``FetchResponse``, exactly as the generated serialiser writes it (proto3: zero
    and empty fields left out, fields in number order), with each partition's records copied once,
    into the result. The broker answers Fetch and FetchStream with these bytes: building the
    generated message copied every record batch into it and again when serialising it."""
    out: list[bytes | memoryview] = [int_fields(((0x08, throttle_time_ms), (0x10, error_code)))]
    for name, partitions in topics:
        topic: list[bytes | memoryview] = [text_field(0x0A, name)]
        for p in partitions:
            head = int_fields(((0x08, p.partition), (0x10, p.error_code))) + text_field(0x1A, p.error_message)
            head += int_fields(((0x20, p.high_watermark), (0x28, p.last_stable_offset), (0x30, p.log_start_offset),
                                 (0x38, p.log_end_offset), (0x40, p.leader_epoch)))
            n = len(p.records)
            if n:
                head += b"\x4a" + varint(n)
            tail = int_fields(((0x50, p.fetch_offset), (0x58, p.next_offset)))
            for pid, first in p.aborted_transactions:
                entry = int_fields(((0x08, pid), (0x10, first)))
                tail += b"\x62" + varint(len(entry)) + entry
            topic += (b"\x12" + varint(len(head) + n + len(tail)), head)
            if n:
                topic.append(p.records)
            topic.append(tail)
        out += (b"\x1a" + varint(sum(len(x) for x in topic)), *topic)
    out.append(int_fields(((0x20, correlation_id), (0x28, session_id))))
    return b"".join(out)
