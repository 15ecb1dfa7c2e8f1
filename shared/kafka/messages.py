"""Kafka protocol messages, from Kafka's own JSON message definitions: a thin layer over ``kio``.

``kio`` (Aiven, Apache-2.0) is generated from the JSON files under Kafka's
``clients/src/main/resources/common/message/``: one frozen dataclass per request,
response and nested structure of every version, a native (compiled) reader and a
schema-driven writer. Nothing here hand-writes a protocol structure; this module
only
- finds the request and response classes of an ``(api_key, version)``,
  with their cached readers and writers (``Api``),
- reads a request frame's header and body (``read_request``),
- writes a response frame as a list of chunks (``encode_response``), so the
  record batches of a fetch response are never copied into a larger buffer by
  the codec (the chunks are joined once, by the transport),
- builds response dataclasses from plain values (``build``), filling what the
  caller leaves out with the field's default, as Kafka's generated
  ``*Data`` classes do.

Measured before choosing (``python -m shared.kafka.bench_codec``): kio decodes a
Produce request of one 16 KiB batch in ~1.1 µs (kafka-python 3.0: ~4.4 µs) and
encodes a Fetch response of 4 × 1 MiB partitions in ~27 µs without copying the
batches (kafka-python 3.0: ~430 µs, copying them).

Must not import services/.
"""

from __future__ import annotations

import dataclasses
import datetime
import struct
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode as KioErrorCode
from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_reader, entity_writer
from kio.serial._introspect import EntityField, EntityTupleField, PrimitiveField, classify_field, is_optional
from kio.static.primitive import TZAware, i32Timedelta, i64Timedelta

from shared.kafka.frame_check import FrameError, check_request

_API_KEY_AND_VERSION = struct.Struct(">hh")
_SIZE = struct.Struct(">i")
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


class MalformedRequest(Exception):
    """The peer broke the protocol: a frame that does not decode as the request it claims to be."""


class UnknownApi(MalformedRequest):
    """An API key or version this listener does not serve."""


@dataclass(frozen=True, slots=True)
class Api:
    """One ``(api_key, version)``: its classes, reader and writers."""

    key: int
    version: int
    name: str
    request: type
    response: type
    read_header: Any
    read_body: Any
    write_response_header: Any
    write_body: Any


@cache
def api(api_key: int, version: int) -> Api:
    """The classes of one API version (raises ``UnknownApi`` for a key or version kio does not know)."""
    name = api_key_map.get(api_key)
    if name is None or version not in schema_name_map.get(name, {}):
        raise UnknownApi(f"api key {api_key} version {version} is not a Kafka request this listener knows")
    request = load_request_schema(api_key, version)
    response = load_response_schema(api_key, version)
    return Api(api_key, version, name, request, response,
               entity_reader(request.__header_schema__), entity_reader(request),
               entity_writer(response.__header_schema__), entity_writer(response))


def defined(api_key: int, version: int) -> bool:
    """Whether kio has a definition of this version (without loading its classes, which ``api`` does on
    first use: about 10 ms per version, 1.5-2.5 s for every version the broker serves)."""
    name = api_key_map.get(api_key)
    return name is not None and version in schema_name_map.get(name, {})


def known_versions(api_key: int) -> tuple[int, int] | None:
    """The (min, max) versions kio has definitions for."""
    name = api_key_map.get(api_key)
    versions = schema_name_map.get(name or "", {})
    return (min(versions), max(versions)) if versions else None


@dataclass(frozen=True, slots=True)
class RequestFrame:
    api: Api
    correlation_id: int
    client_id: str
    body: Any


def peek_header(frame: bytes | memoryview) -> tuple[int, int, int]:
    """``(api_key, api_version, correlation_id)`` of a frame, read before anything else (8 bytes)."""
    if len(frame) < 8:
        raise MalformedRequest(f"a request frame of {len(frame)} bytes is shorter than a request header")
    key, version = _API_KEY_AND_VERSION.unpack_from(frame, 0)
    return key, version, _SIZE.unpack_from(frame, 4)[0]


def read_request(frame: bytes, a: Api) -> RequestFrame:
    """Decode a whole request frame (without its size prefix) of a known API version.

    The frame's structure is walked first (``frame_check``): kio would trust a length or count it reads.
    Bytes after the body are ignored, as Kafka's parser ignores them (librdkafka 2.16 leaves 3 after a
    Metadata v12 request for every topic)."""
    try:
        frame = check_request(frame, a.request.__header_schema__, a.request)
    except FrameError as exc:
        raise MalformedRequest(f"{a.name} v{a.version}: {exc}") from None
    try:
        header, header_size = a.read_header(frame, 0)  # kio's readers return (value, bytes read)
        body, _ = a.read_body(frame, header_size)
    except Exception as exc:  # kio raises ValueError, struct errors, UnicodeDecodeError, ...
        raise MalformedRequest(f"{a.name} v{a.version}: {type(exc).__name__}: {exc}") from exc
    return RequestFrame(a, header.correlation_id, header.client_id or "", body)


class _Chunks(list):  # type: ignore[type-arg]
    """A write-only buffer that keeps each written bytes object as it is (no copy)."""

    write = list.append


def encode_response(a: Api, correlation_id: int, body: Any) -> list[bytes]:
    """The response frame as chunks: size prefix, header, body. ``b"".join`` them to send."""
    chunks = _Chunks()
    chunks.append(b"")  # the size prefix, filled in below
    header = a.response.__header_schema__(correlation_id=correlation_id)
    a.write_response_header(chunks, header)
    a.write_body(chunks, body)
    chunks[0] = _SIZE.pack(sum(len(c) for c in chunks))
    return chunks


# -- building responses from plain values ---------------------------------------------------------------


def error(code: int) -> KioErrorCode:
    return KioErrorCode(int(code))


def build(cls: type, values: Mapping[str, Any] | None = None, **kw: Any) -> Any:
    """An instance of a kio dataclass from plain values: ints for error codes and timedeltas, dicts
    and lists for nested structures; fields not given take their default (Kafka's ``default`` in the
    JSON definition, else zero, empty or null)."""
    given = {**(values or {}), **kw}
    args: dict[str, Any] = {}
    for f in _fields(cls):
        if f.name in given:
            args[f.name] = _convert(f, given[f.name])
        elif f.default is not dataclasses.MISSING:
            continue
        elif f.default_factory is not dataclasses.MISSING:
            continue
        else:
            args[f.name] = _zero(f)
    return cls(**args)


@cache
def _fields(cls: type) -> tuple[dataclasses.Field[Any], ...]:
    return tuple(f for f in dataclasses.fields(cls) if not f.name.startswith("__"))


@cache
def _nullable(f: dataclasses.Field[Any]) -> bool:
    return is_optional(f)


@cache
def _kind(f: dataclasses.Field[Any]) -> Any:
    return classify_field(f)


def _convert(f: dataclasses.Field[Any], value: Any) -> Any:
    if value is None:  # null where this version allows it, else the field's zero ("" for a string before v7...)
        return None if _nullable(f) else _zero(f)
    kind = _kind(f)
    if isinstance(kind, EntityTupleField):
        return tuple(v if dataclasses.is_dataclass(v) else build(kind.type_, v) for v in value)
    if isinstance(kind, EntityField):
        return value if dataclasses.is_dataclass(value) else build(kind.type_, value)
    if isinstance(kind, PrimitiveField):
        t = kind.type_
        if t is KioErrorCode:
            return error(value)
        if t is i32Timedelta or t is i64Timedelta:
            return value if isinstance(value, datetime.timedelta) else t.parse(datetime.timedelta(milliseconds=value))
        if t is TZAware and isinstance(value, int):
            if value < 0:
                return None
            return _EPOCH + datetime.timedelta(milliseconds=value)
        if t is uuid.UUID and isinstance(value, str):
            return uuid.UUID(value) if value else uuid.UUID(int=0)
        return value
    return tuple(value)  # an array of primitives


def _zero(f: dataclasses.Field[Any]) -> Any:
    kind = _kind(f)
    if _nullable(f):
        return None
    if kind.is_array:
        return ()
    if isinstance(kind, EntityField):
        return build(kind.type_)
    pt = kind.type_
    if pt is KioErrorCode:
        return KioErrorCode.none
    if pt is i32Timedelta or pt is i64Timedelta:
        return pt.parse(datetime.timedelta(0))
    if pt is uuid.UUID:
        return uuid.UUID(int=0)
    if pt is bool:
        return False
    if pt is str or issubclass(pt, str):
        return ""
    if pt is bytes or issubclass(pt, bytes):
        return b""
    return pt(0) if isinstance(pt, type) and issubclass(pt, int | float) else 0
