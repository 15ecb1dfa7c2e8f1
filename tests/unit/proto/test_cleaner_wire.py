"""The hand-written cleaner messages are byte for byte what the generated classes write and read."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.proto import cleaner_pb2 as cpb
from shared.proto.cleaner_wire import WireError, encode_cleaned_chunk, encode_segment_chunk, read_segment_chunk

INT64 = st.integers(-(2**63), 2**63 - 1)


@settings(max_examples=200, deadline=None)
@given(INT64, st.binary(max_size=300))
def test_segment_chunk_as_generated(base: int, data: bytes) -> None:
    raw = encode_segment_chunk(base, memoryview(data))
    assert raw == cpb.SegmentChunk(base_offset=base, data=data).SerializeToString()
    got_base, start, end = read_segment_chunk(raw)
    assert (got_base, raw[start:end]) == (base, data)


@settings(max_examples=200, deadline=None)
@given(INT64, st.binary(max_size=300), st.lists(INT64, max_size=4), st.text(max_size=8), st.text(max_size=8), INT64)
def test_cleaned_chunk_as_generated(base: int, data: bytes, replaces: list[int], job: str, worker: str,
                                    map_end: int) -> None:
    raw = encode_cleaned_chunk(base_offset=base, data=data, replaces=replaces, job_id=job, worker_id=worker,
                               map_end=map_end)
    assert raw == cpb.CleanedChunk(base_offset=base, data=data, replaces=replaces, job_id=job, worker_id=worker,
                                   map_end=map_end).SerializeToString()


def test_a_segment_chunk_with_fields_of_a_newer_broker_is_read() -> None:
    raw = b"\x18\x96\x01" + encode_segment_chunk(7, b"abc") + b"\x22\x03xyz" + b"\x2d\x01\x02\x03\x04"
    base, start, end = read_segment_chunk(raw)
    assert (base, raw[start:end]) == (7, b"abc")


@pytest.mark.parametrize("raw", [b"\x12\x05abc", b"\x08", b"\x08" + b"\xff" * 10 + b"\x01", b"\x0b", b"\x12"])
def test_a_malformed_segment_chunk_is_a_wire_error(raw: bytes) -> None:
    with pytest.raises(WireError):
        read_segment_chunk(raw)
