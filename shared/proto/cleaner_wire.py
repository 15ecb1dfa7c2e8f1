"""The cleaner's two bulk messages, written and read by hand as ``fetch_wire`` does for fetch responses.

A job's segments travel to a worker as ``SegmentChunk`` messages and its result comes back as
``CleanedChunk`` messages, 1 MiB of log each. The generated serializer copies such a bytes field at
about 0.7 GB/s: serializing a 250 MB job's chunks cost the broker 0.38 s of CPU on its event loop,
against 0.01 s to write the few header bytes and join them to the data. The bytes are exactly what
the generated serializer writes (proto3: zero and empty fields left out, fields in number order);
unit tests hold both to the generated classes. Field numbers come from ``cleaner.proto``.
"""

from __future__ import annotations

from collections.abc import Sequence

from shared.proto.wire import WireError, fields, int_fields, signed, text_field, varint

__all__ = ["WireError", "encode_cleaned_chunk", "encode_segment_chunk", "read_segment_chunk"]


def _bytes_field(tag: int, data: bytes | memoryview) -> list[bytes | memoryview]:
    return [bytes((tag,)) + varint(len(data)), data] if len(data) else []


def encode_segment_chunk(base_offset: int, data: bytes | memoryview) -> bytes:
    """A serialized ``SegmentChunk``: the data copied once, into the result."""
    return b"".join([int_fields(((0x08, base_offset),)), *_bytes_field(0x12, data)])


def encode_cleaned_chunk(*, base_offset: int, data: bytes | memoryview, replaces: Sequence[int] = (),
                         job_id: str = "", worker_id: str = "", map_end: int = 0) -> bytes:
    """A serialized ``CleanedChunk`` (``replaces`` packed, as proto3 writes a repeated int64)."""
    head = text_field(0x0A, job_id) + text_field(0x12, worker_id) + int_fields(((0x18, map_end), (0x20, base_offset)))
    if replaces:
        packed = b"".join(varint(r) for r in replaces)
        head += b"\x2a" + varint(len(packed)) + packed
    return b"".join([head, *_bytes_field(0x32, data)])


def read_segment_chunk(msg: bytes) -> tuple[int, int, int]:
    """``(base_offset, start, end)`` of a serialized ``SegmentChunk``: its data is ``msg[start:end]``, read
    where it lies. ``WireError`` if the bytes are not a well-formed message."""
    base = start = end = 0
    for field, value in fields(msg, 0, len(msg)):
        if field == 1 and isinstance(value, int):
            base = signed(value)
        elif field == 2 and isinstance(value, tuple):
            start, end = value
    return base, start, end
