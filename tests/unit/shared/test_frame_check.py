"""The structural walk before kio decodes a request: lengths against the bytes left, nulls where Kafka's
schema forbids them, unknown tagged fields dropped (Kafka skips them; kio refuses them)."""

from __future__ import annotations

import struct

import pytest

from shared.kafka.bench_codec import _produce_request_frame
from shared.kafka.frame_check import FrameError, check_request
from shared.kafka.messages import MalformedRequest, api, read_request

PRODUCE_V9 = api(0, 9)
METADATA_V12 = api(3, 12)


def _check(frame: bytes, a=PRODUCE_V9) -> bytes:  # type: ignore[no-untyped-def]
    return check_request(frame, a.request.__header_schema__, a.request)


def _metadata_v12(body: bytes, header_tags: bytes = b"\x00") -> bytes:
    """A Metadata v12 frame: header v2 (key, version, correlation id, client id, tags), then ``body``."""
    return struct.pack(">hhih", 3, 12, 7, 1) + b"c" + header_tags + body


def test_a_sound_request_passes_unchanged_and_decodes() -> None:
    frame = _produce_request_frame(b"z" * 100, 3)
    assert _check(frame) is frame
    assert len(read_request(frame, PRODUCE_V9).body.topic_data[0].partition_data) == 3


def test_a_count_of_billions_is_refused_before_anything_is_allocated() -> None:
    # topics: compact array count 2**32 - 2 (uvarint 0xFE 0xFF 0xFF 0xFF 0x0F), in a 19-byte request
    frame = _metadata_v12(b"\xfe\xff\xff\xff\x0f" + b"\x00\x00\x00")
    with pytest.raises(FrameError, match="bytes claimed"):
        _check(frame, METADATA_V12)
    with pytest.raises(MalformedRequest):
        read_request(frame, METADATA_V12)


def test_null_where_the_schema_forbids_it_is_refused() -> None:
    frame = _produce_request_frame(b"z", 1)
    # the topic name's compact length byte follows transactional_id (null: 0), acks (2) and timeout (4),
    # and the topic array count: make the name null (compact length 0)
    header_size = PRODUCE_V9.read_header(frame, 0)[1]
    name_at = header_size + 1 + 2 + 4 + 1
    broken = frame[:name_at] + b"\x00" + frame[name_at + 2:]  # the name was 1 byte ("t"): length byte 2
    with pytest.raises(FrameError, match="null"):
        _check(broken)


def test_a_varint_longer_than_five_bytes_is_refused() -> None:
    with pytest.raises(FrameError, match="longer than 5 bytes"):
        _check(_metadata_v12(b"\xff\xff\xff\xff\xff\x01"), METADATA_V12)


def test_unknown_tagged_fields_are_dropped_as_kafka_skips_them() -> None:
    # Metadata v12 body: topics null (0), allow_auto_topic_creation, include_topic_authorized_operations,
    # then tagged fields: one unknown tag 7 of 3 bytes
    body = b"\x00" + b"\x01" + b"\x00" + b"\x01" + b"\x07\x03abc"
    frame = _metadata_v12(body, header_tags=b"\x01\x09\x01z")  # and an unknown tag 9 in the header
    cleaned = _check(frame, METADATA_V12)
    assert cleaned == _metadata_v12(b"\x00\x01\x00\x00")
    assert read_request(frame, METADATA_V12).body.topics is None
