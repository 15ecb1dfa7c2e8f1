"""A structural walk of a request frame before kio decodes it: lengths, nulls and tagged fields.

kio's native reader trusts the lengths it reads: a compact-array count of 2**32-2 in a 19-byte request
makes it reserve tens of gigabytes and the process aborts. This walk follows the request's schema (the
same kio dataclasses, their ``kafka_type`` and ``tag`` metadata) reading only lengths and counts, and
refuses, as Kafka's own parser does, before anything is allocated:
- an array count, string or bytes length larger than the bytes left, or a negative one other than -1;
- null (count/length -1) in a field Kafka's schema does not allow to be null;
- a varint longer than 5 bytes.
Tagged fields a client sends that this schema does not know are skipped by Kafka; kio refuses them, so
the walk returns the frame without them (a copy, made only when there are some).
"""

from __future__ import annotations

import dataclasses
import struct
from functools import cache
from typing import Any

from kio.serial._introspect import EntityField, EntityTupleField, PrimitiveField, classify_field, is_optional

from shared.records.varint import encode_unsigned_varint

_FIXED = {"int8": 1, "bool": 1, "int16": 2, "uint16": 2, "error_code": 2, "int32": 4, "timedelta_i32": 4,
          "uint32": 4, "int64": 8, "timedelta_i64": 8, "datetime_i64": 8, "float64": 8, "uint64": 8, "uuid": 16}
_VARIABLE = {"string", "bytes", "records"}
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class FrameError(ValueError):
    pass


@dataclasses.dataclass(frozen=True, slots=True)
class _Plan:
    name: str  # "Class.field", for messages
    kafka_type: str | None  # None: a nested entity
    array: bool
    nullable: bool
    tag: int | None
    entity: Any  # the nested entity class, or None


@cache
def _plan(cls: type) -> tuple[tuple[_Plan, ...], dict[int, _Plan]]:
    """The fields of ``cls`` in wire order, and its tagged fields by tag."""
    ordered, tagged = [], {}
    for f in dataclasses.fields(cls):
        if f.name.startswith("__"):
            continue
        kind = classify_field(f)
        entity = kind.type_ if isinstance(kind, EntityField | EntityTupleField) else None
        p = _Plan(f"{cls.__name__}.{f.name}", f.metadata.get("kafka_type"), kind.is_array, is_optional(f),
                  f.metadata.get("tag"), entity)
        if p.tag is None:
            ordered.append(p)
        else:
            tagged[p.tag] = p
        if entity is None and p.kafka_type is None and isinstance(kind, PrimitiveField):
            raise FrameError(f"no kafka_type for {cls.__name__}.{f.name}")
    return tuple(ordered), tagged


class _Walk:
    def __init__(self, buf: bytes, pos: int) -> None:
        self.buf = buf
        self.pos = pos
        self.end = len(buf)
        self.strip: list[tuple[int, int, int, list[tuple[int, int]]]] = []  # sections with unknown tags

    def need(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > self.end:
            raise FrameError(f"{what}: {n} bytes claimed, {self.end - self.pos} left")

    def uvarint(self, what: str) -> int:
        if self.pos < self.end and self.buf[self.pos] < 0x80:  # one byte: the common case
            self.pos += 1
            return self.buf[self.pos - 1]
        value = shift = 0
        for _ in range(5):
            if self.pos >= self.end:
                raise FrameError(f"{what}: truncated varint")
            b = self.buf[self.pos]
            self.pos += 1
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
        raise FrameError(f"{what}: varint longer than 5 bytes")

    def length(self, flexible: bool, wide: bool, what: str) -> int:
        """A length or count: compact (uvarint N+1) or legacy (int16 for strings, int32 otherwise)."""
        if flexible:
            return self.uvarint(what) - 1
        size = 4 if wide else 2
        self.need(size, what)
        n = (_I32 if wide else _I16).unpack_from(self.buf, self.pos)[0]
        self.pos += size
        return int(n)

    def entity(self, cls: type, flexible: bool) -> None:
        ordered, tagged = _plan(cls)
        for p in ordered:
            if p.kafka_type in _FIXED and not p.array:  # the common case, inline
                self.pos += _FIXED[p.kafka_type]
                if self.pos > self.end:
                    raise FrameError(f"{p.name}: truncated")
                continue
            self.field(p, flexible)
        if flexible:
            self.tags(tagged, cls)

    def field(self, p: _Plan, flexible: bool) -> None:
        what = p.name
        if p.array:
            count = self.length(flexible, True, what)
            if count < 0:
                if count != -1 or not p.nullable:
                    raise FrameError(f"{what}: null (or negative) array where the schema forbids it")
                return
            self.need(count, what)  # every element takes at least one byte
            for _ in range(count):
                self.value(p, flexible, what)
            return
        if p.entity is not None and p.nullable:  # a nullable struct: an int8 marker, -1 for null
            self.need(1, what)
            marker = self.buf[self.pos]
            self.pos += 1
            if marker == 0xFF:
                return
        self.value(p, flexible, what)

    def value(self, p: _Plan, flexible: bool, what: str) -> None:
        if p.entity is not None:
            self.entity(p.entity, flexible)
            return
        t = p.kafka_type or ""
        size = _FIXED.get(t)
        if size is not None:
            self.need(size, what)
            self.pos += size
            return
        if t not in _VARIABLE:
            raise FrameError(f"{what}: unknown type {t}")
        n = self.length(flexible, t != "string", what)
        if n < 0:
            if n != -1 or not p.nullable or p.array:
                raise FrameError(f"{what}: null where the schema forbids it")
            return
        self.need(n, what)
        self.pos += n

    def tags(self, tagged: dict[int, _Plan], cls: type) -> None:
        section = self.pos
        if section < self.end and self.buf[section] == 0:  # no tagged field: the common case
            self.pos += 1
            return
        count = self.uvarint(f"{cls.__name__} tagged fields")
        self.need(count, f"{cls.__name__} tagged fields")
        after_count = self.pos
        unknown: list[tuple[int, int]] = []
        for _ in range(count):
            start = self.pos
            tag = self.uvarint("tag")
            size = self.uvarint("tagged field size")
            self.need(size, f"{cls.__name__} tag {tag}")
            p = tagged.get(tag)
            if p is None:
                self.pos += size
                unknown.append((start, self.pos))
                continue
            outer, self.end = self.end, self.pos + size
            try:
                self.field(p, True)
            finally:
                self.pos, self.end = self.end, outer
        if unknown:
            self.strip.append((section, after_count, count, unknown))


def check_request(frame: bytes, header_cls: type, body_cls: type) -> bytes:
    """``frame`` if it is sound, or a copy without the tagged fields the schema does not know; raises
    ``FrameError`` for what Kafka's parser would refuse. Bytes after the body are left to the caller."""
    w = _Walk(frame, 8)  # api key, version and correlation id were read already
    client = w.length(False, False, "client_id")  # a legacy nullable string in every header version
    if client >= 0:
        w.need(client, "client_id")
        w.pos += client
    elif client != -1:
        raise FrameError("client_id: negative length")
    header_flexible = bool(getattr(header_cls, "__flexible__", False))
    if header_flexible:
        w.tags({}, header_cls)
    w.entity(body_cls, bool(getattr(body_cls, "__flexible__", False)))
    if not w.strip:
        return frame
    return _without(frame, w.strip)


def _without(frame: bytes, sections: list[tuple[int, int, int, list[tuple[int, int]]]]) -> bytes:
    parts: list[bytes] = []
    pos = 0
    for section, after_count, count, unknown in sorted(sections):
        parts.append(frame[pos:section])
        parts.append(encode_unsigned_varint(count - len(unknown)))
        pos = after_count
        for start, end in unknown:
            parts.append(frame[pos:start])
            pos = end
    parts.append(frame[pos:])
    return b"".join(parts)
