"""RecordBatch v2 codec: golden vectors, round trips, corruption, and interop with kafka-python."""

from __future__ import annotations

import os
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from shared.errors import CorruptRecordError
from shared.records.builder import BatchBuilder, build_control_batch, encode_batch, encode_batch_columns
from shared.records.compression import CompressionType
from shared.records.decoder import control_record_type, decode_batch, iter_records
from shared.records.header import BatchHeader, check_batch, iter_batches, set_base_offset, set_log_append_time
from shared.records.varint import decode_zigzag, encode_zigzag

# Written by kafka-python's DefaultRecordBatchBuilder (an independent codec), frozen here.
GOLDEN_TWO_RECORDS = bytes.fromhex(
    "00000000000000000000004d0000000002c9f11a490000000000010000018bcfe568000000018bcfe56805"
    "ffffffffffffffffffffffffffff0000000224000000066b65790a76616c7565020268027810000a0201047632"
    "00"
)
GOLDEN_IDEMPOTENT = bytes.fromhex(
    "000000000000000000000038000000000280c69c3800000000000000000000000000010000000000000001"
    "0000000000000007000100000005000000010c000000000100"
)

ALL_COMPRESSION = list(CompressionType)


def test_golden_vector_encodes_byte_for_byte() -> None:
    # kafka-python writes partitionLeaderEpoch 0 where Java's producer writes -1; both are valid.
    ours = encode_batch(
        [(1700000000000, b"key", b"value", [("h", b"x")]), (1700000000005, None, b"v2", [])],
        partition_leader_epoch=0,
    )
    assert ours == GOLDEN_TWO_RECORDS


def test_golden_vector_with_producer_fields() -> None:
    ours = encode_batch(
        [(1, b"", None, None)], producer_id=7, producer_epoch=1, base_sequence=5, partition_leader_epoch=0
    )
    assert ours == GOLDEN_IDEMPOTENT
    header, records = decode_batch(ours)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 1, 5)
    assert records[0].key == b"" and records[0].value is None


def test_golden_vector_decodes() -> None:
    header, records = decode_batch(GOLDEN_TWO_RECORDS)
    assert header.magic == 2 and header.records_count == 2 and header.last_offset_delta == 1
    assert header.base_timestamp == 1700000000000 and header.max_timestamp == 1700000000005
    assert [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in records] == [
        (0, 1700000000000, b"key", b"value", [("h", b"x")]),
        (1, 1700000000005, None, b"v2", []),
    ]


@pytest.mark.parametrize("value", [0, 1, -1, 63, -64, 64, 300, -300, 2**31 - 1, -(2**31), 2**63 - 1, -(2**63)])
def test_zigzag_round_trip(value: int) -> None:
    data = encode_zigzag(value)
    assert decode_zigzag(data, 0) == (value, len(data))


def _sample_records(n: int, size: int = 100) -> list[tuple[int, bytes | None, bytes | None, list]]:
    out = []
    for i in range(n):
        key = None if i % 4 == 0 else f"key-{i}".encode()
        # half random, half repetitive: compressible, so every codec really compresses
        value = None if i % 7 == 3 else (os.urandom(size // 2) + b"x" * size)[:size]
        headers = [("trace", f"{i}".encode()), ("empty", None)] if i % 2 else []
        out.append((1_700_000_000_000 + (i * 37) % 1000 - 200, key, value, headers))
    return out


@pytest.mark.parametrize("compression", ALL_COMPRESSION, ids=lambda c: c.name.lower())
@pytest.mark.parametrize("count,size", [(1, 0), (50, 100), (3000, 1024)])
def test_ours_decode_in_kafka_python(compression: CompressionType, count: int, size: int) -> None:
    recs = _sample_records(count, size)
    data = encode_batch(recs, base_offset=1000, compression=compression, partition_leader_epoch=3)
    theirs = DefaultRecordBatch(data)
    assert theirs.validate_crc()
    theirs = DefaultRecordBatch(data)
    assert theirs.compression_type == int(compression)
    got = list(theirs)
    assert len(got) == count
    for i, ((ts, key, value, headers), r) in enumerate(zip(recs, got, strict=True)):
        assert r.offset == 1000 + i
        assert (r.timestamp, r.key, r.value) == (ts, key, value)
        assert list(r.headers) == list(headers)


@pytest.mark.parametrize("compression", ALL_COMPRESSION, ids=lambda c: c.name.lower())
@pytest.mark.parametrize("count,size", [(1, 0), (50, 100), (3000, 1024)])
def test_kafka_python_batches_decode_in_ours(compression: CompressionType, count: int, size: int) -> None:
    recs = _sample_records(count, size)
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=int(compression),
        is_transactional=False,
        producer_id=42,
        producer_epoch=3,
        base_sequence=9,
        batch_size=1 << 30,
    )
    for i, (ts, key, value, headers) in enumerate(recs):
        builder.append(i, ts, key, value, headers)
    data = bytes(builder.build())
    header, got = decode_batch(data)
    if count > 1:  # kafka-python stores a batch uncompressed when compression would not shrink it
        assert header.compression == compression
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (42, 3, 9)
    assert [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in got] == [
        (i, ts, k, v, list(h)) for i, (ts, k, v, h) in enumerate(recs)
    ]


def test_empty_values_and_null_keys_interop() -> None:
    data = encode_batch([(5, None, None, None), (6, b"", b"", None)])
    got = list(DefaultRecordBatch(data))
    assert [(r.key, r.value) for r in got] == [(None, None), (b"", b"")]


def test_offsets_rewrite_keeps_crc_valid() -> None:
    data = bytearray(encode_batch(_sample_records(10)))
    set_base_offset(data, 0, 123456, 9)
    header = check_batch(data)
    assert header.base_offset == 123456 and header.partition_leader_epoch == 9
    assert [r.offset for r in decode_batch(bytes(data))[1]] == list(range(123456, 123466))


def test_log_append_time_rewrites_timestamps_and_crc() -> None:
    data = bytearray(encode_batch(_sample_records(5)))
    set_log_append_time(data, 0, 42_000)
    header, records = decode_batch(bytes(data))
    assert header.timestamp_type == 1
    assert {r.timestamp for r in records} == {42_000}
    assert DefaultRecordBatch(bytes(data)).validate_crc()


def test_builder_and_control_batch() -> None:
    b = BatchBuilder(CompressionType.LZ4, producer_id=1, producer_epoch=0, base_sequence=0)
    for i in range(10):
        b.append(f"v{i}".encode(), key=b"k", timestamp=100 + i)
    assert len(b) == 10 and b.size_estimate > 61
    header, records = decode_batch(b.build(base_offset=5))
    assert header.last_sequence == 9 and records[-1].offset == 14
    ctrl = build_control_batch(1, producer_id=1, producer_epoch=0, timestamp=200)
    h, recs = decode_batch(ctrl)
    assert h.is_control and h.is_transactional and control_record_type(recs[0]) == 1
    both = b.build() + ctrl
    assert [r.value for r in iter_records(both)] == [f"v{i}".encode() for i in range(10)]


def test_iter_batches_stops_at_partial_tail() -> None:
    one = encode_batch(_sample_records(3))
    two = encode_batch(_sample_records(4), base_offset=3)
    buf = one + two
    for cut in range(len(one), len(buf)):
        got = list(iter_batches(buf[:cut]))
        assert [pos for pos, _ in got] == [0]
    assert len(list(iter_batches(buf))) == 2


@pytest.mark.parametrize(
    "mutate,reason",
    [
        (lambda b: b.__setitem__(16, 1), "magic"),
        (lambda b: b.__setitem__(len(b) - 1, b[-1] ^ 0xFF), "CRC"),
        (lambda b: b.__setitem__(30, b[30] ^ 0x01), "CRC"),
        (lambda b: struct.pack_into(">i", b, 8, 10), "smaller than a batch header"),
        (lambda b: struct.pack_into(">i", b, 8, len(b)), "truncated"),
    ],
)
def test_corrupt_batches_raise_specific_errors(mutate, reason: str) -> None:
    data = bytearray(encode_batch(_sample_records(5)))
    mutate(data)
    with pytest.raises(CorruptRecordError, match=reason):
        check_batch(bytes(data))


def test_records_that_disagree_with_their_count_are_corrupt() -> None:
    from crc32c import crc32c

    data = bytearray(encode_batch(_sample_records(5)))
    struct.pack_into(">i", data, 57, 6)  # claim one more record than there is
    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    with pytest.raises(CorruptRecordError):
        decode_batch(bytes(data))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=400))
def test_random_bytes_only_ever_raise_corrupt_record_error(data: bytes) -> None:
    try:
        for pos, _header in iter_batches(data):
            decode_batch(data, pos)
    except CorruptRecordError:
        pass


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(min_size=1, max_size=300), st.integers(0, 10_000))
def test_garbled_valid_batches_fail_cleanly(noise: bytes, where: int) -> None:
    data = bytearray(encode_batch(_sample_records(6, 30)))
    where %= len(data)
    data[where : where + len(noise)] = noise[: len(data) - where]
    try:
        for pos, _ in iter_batches(bytes(data)):
            decode_batch(bytes(data), pos, validate=False)
    except CorruptRecordError:
        pass


header_st = st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=8))), max_size=3)
record_st = st.tuples(
    st.integers(0, 2**41),
    st.one_of(st.none(), st.binary(max_size=40)),
    st.one_of(st.none(), st.binary(max_size=300)),
    header_st,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(record_st, min_size=1, max_size=40),
    st.sampled_from(ALL_COMPRESSION),
    st.integers(0, 2**40),
)
def test_round_trip_property(records, compression, base_offset) -> None:
    data = encode_batch(records, base_offset=base_offset, compression=compression)
    header, got = decode_batch(data)
    assert header.size == len(data)
    assert BatchHeader.parse(data).crc == header.crc
    assert header.max_timestamp == max(r[0] for r in records)
    assert [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in got] == [
        (base_offset + i, ts, k, v, list(h)) for i, (ts, k, v, h) in enumerate(records)
    ]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(0, 2**41),
    st.lists(
        st.tuples(
            st.one_of(st.integers(0, 3), st.integers(-(2**20), 2**20)),  # mostly repeated timestamps
            st.one_of(st.none(), st.binary(max_size=20)),
            st.one_of(st.none(), st.binary(max_size=200), st.just(b"v" * 70_000)),  # length varint past the table
        ),
        min_size=1,
        max_size=120,
    ),
)
def test_records_without_headers_round_trip(base: int, rows) -> None:
    """The producer's path for batches without headers (``_encode_plain_columns``)."""
    timestamps = [base + d for d, _, _ in rows]
    keys = [k for _, k, _ in rows]
    values = [v for _, _, v in rows]
    data = encode_batch_columns(timestamps, keys, values, None, base_offset=7)
    header, got = decode_batch(data)
    assert header.max_timestamp == max(timestamps) and header.size == len(data)
    assert [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in got] == [
        (7 + i, ts, k, v, []) for i, (ts, k, v) in enumerate(zip(timestamps, keys, values))
    ]
    assert data == encode_batch([(ts, k, v, None) for ts, k, v in zip(timestamps, keys, values)], base_offset=7)
