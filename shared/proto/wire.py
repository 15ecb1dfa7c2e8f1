"""Protobuf wire-format pieces shared by the hand-written message codecs.

``produce_wire`` and ``fetch_wire`` write and read the two messages that carry
record batches by hand, so a batch is never copied into or out of a generated
message. These are the primitives they share: base-128 varints, int32/int64
sign handling, and a field walker. Field numbers and types come from
``tidelog.proto``; unit tests hold each codec to the generated classes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

T = TypeVar("T")


class WireError(ValueError):
    """The bytes are not a well-formed message."""


def varint(n: int) -> bytes:
    """Protobuf base-128 varint; a negative int32/int64 is written as its 64-bit two's complement."""
    if n < 0:
        n &= 0xFFFFFFFFFFFFFFFF
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def pass_bytes(message: Any) -> bytes:
    """A gRPC response serializer for methods whose answers are serialized by hand: bytes pass through,
    a generated message is serialized as usual."""
    return message if type(message) is bytes else message.SerializeToString()


def int_fields(tags_values: Sequence[tuple[int, int]]) -> bytes:
    """Varint fields as proto3 writes them: ``(tag byte, value)`` pairs, zeros left out."""
    return b"".join(bytes((tag,)) + varint(v) for tag, v in tags_values if v)


def text_field(tag: int, value: str) -> bytes:
    """A string field as proto3 writes it (nothing when empty)."""
    data = value.encode()
    return bytes((tag,)) + varint(len(data)) + data if data else b""


def read_varint(buf: bytes | memoryview, pos: int, end: int) -> tuple[int, int]:
    """The varint at ``pos`` and the position after it."""
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


def signed(v: int) -> int:
    """int32/int64 fields travel as 64-bit two's complement varints."""
    return v - (1 << 64) if v >= 1 << 63 else v


def fields(buf: bytes | memoryview, pos: int, end: int) -> Iterator[tuple[int, int | tuple[int, int]]]:
    """Yield ``(field number, value)``: an int for varints, ``(start, end)`` for length-delimited
    fields; fixed-width fields are skipped, as unknown fields are by protobuf."""
    while pos < end:
        key, pos = read_varint(buf, pos, end)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = read_varint(buf, pos, end)
            yield field, value
        elif wire == 2:
            n, pos = read_varint(buf, pos, end)
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


def text(buf: bytes | memoryview, span: tuple[int, int]) -> str:
    """A string field's value."""
    try:
        return bytes(buf[span[0]:span[1]]).decode()
    except UnicodeDecodeError as exc:
        raise WireError(f"string field is not UTF-8: {exc}") from exc


def named_list(buf: bytes | memoryview, pos: int, end: int,
               item: Callable[[int, int], T]) -> tuple[str, list[T]]:
    """A message of ``string name = 1; repeated Item items = 2`` (the topic level of produce requests
    and fetch responses): the name, and ``item(start, end)`` for each item."""
    name = ""
    items: list[T] = []
    for field, value in fields(buf, pos, end):
        if isinstance(value, tuple):
            if field == 1:
                name = text(buf, value)
            elif field == 2:
                items.append(item(*value))
    return name, items
