"""Produce-side validation (as Kafka's LogValidator): hand-made poison batches, one per rule, and the
broker's recompression to the topic's compression.type."""

from __future__ import annotations

import os

import pytest

from services.broker.log import PartitionLog
from services.broker.log.validation import validate_produce
from shared.config import LogConfig
from shared.errors import CorruptRecordError, InvalidRecordError, InvalidTimestampError, TidelogError
from shared.records.builder import BatchBuilder, encode_batch
from shared.records.compression import CompressionType
from shared.records.decoder import decode_batch, iter_records
from shared.records.header import ATTR_CONTROL, ATTR_TRANSACTIONAL, BatchHeader, check_batch, pack_header
from shared.records.validate import validate_produced

TS = 1_700_000_000_000


def rows(n: int, headers: bool = False) -> list[tuple[int, bytes | None, bytes | None, list | None]]:
    return [(TS + i % 5, b"k%d" % i, os.urandom(30), [("h", b"x")] if headers and i % 2 else None) for i in range(n)]


def forge(body: bytes, count: int, *, last_delta: int | None = None, attributes: int = 0, base_ts: int = TS,
          max_ts: int = TS, producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1) -> bytes:
    """A batch with a correct CRC around any records section and header fields."""
    header = pack_header(body, base_offset=0, records_count=count,
                         last_offset_delta=count - 1 if last_delta is None else last_delta, base_timestamp=base_ts,
                         max_timestamp=max_ts, attributes=attributes, producer_id=producer_id,
                         producer_epoch=producer_epoch, base_sequence=base_sequence, partition_leader_epoch=-1)
    return header + body


def body_of(batch: bytes) -> bytes:
    return batch[61:]


def check(batch: bytes) -> None:
    validate_produced(batch, 0, check_batch(batch))


@pytest.mark.parametrize("n,headers", [(1, False), (3, True), (40, False), (40, True), (1000, False)])
@pytest.mark.parametrize("codec", list(CompressionType), ids=lambda c: c.name.lower())
def test_valid_batches_pass(n: int, headers: bool, codec: CompressionType) -> None:
    check(encode_batch(rows(n, headers), compression=codec))


def test_batches_of_the_independent_kafka_python_codec_pass() -> None:
    from tests.unit.records.test_batch import GOLDEN_IDEMPOTENT, GOLDEN_TWO_RECORDS
    check(GOLDEN_TWO_RECORDS)
    check(GOLDEN_IDEMPOTENT)


@pytest.mark.parametrize("n", [3, 40])
def test_garbage_records_under_a_correct_crc(n: int) -> None:
    with pytest.raises(CorruptRecordError, match="record 0"):
        check(forge(b"\xff" * 200, n))


def test_undecompressible_records() -> None:
    for codec in (1, 2, 3, 4):
        with pytest.raises(CorruptRecordError, match="decompress"):
            check(forge(b"not compressed at all" * 5, 3, attributes=codec))


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codec(codec: int) -> None:
    with pytest.raises(CorruptRecordError, match=f"unknown compression type {codec}"):
        check(forge(body_of(encode_batch(rows(3))), 3, attributes=codec))


@pytest.mark.parametrize("n", [3, 40])
def test_count_lies_name_the_first_missing_record(n: int) -> None:
    good = encode_batch(rows(n))
    h = BatchHeader.parse(good)
    with pytest.raises(CorruptRecordError, match=f"record {n}:"):
        check(forge(body_of(good), 1001, max_ts=h.max_timestamp))
    with pytest.raises(InvalidRecordError, match="lastOffsetDelta 1000 and record count 3"):
        check(forge(body_of(good), 3, last_delta=1000, max_ts=h.max_timestamp))


def test_fewer_claimed_records_leave_trailing_bytes() -> None:
    good = encode_batch(rows(3))
    h = BatchHeader.parse(good)
    with pytest.raises(CorruptRecordError, match="bytes after the last record"):
        check(forge(body_of(good), 2, max_ts=h.max_timestamp))
    with pytest.raises(CorruptRecordError, match="bytes after the last record"):
        check(forge(body_of(good) + b"\x00", 3, max_ts=h.max_timestamp))


def test_control_bit_and_flags_only_the_broker_sets() -> None:
    good = encode_batch(rows(3))
    h = BatchHeader.parse(good)
    with pytest.raises(InvalidRecordError, match="control records"):
        check(forge(body_of(good), 3, attributes=ATTR_CONTROL | ATTR_TRANSACTIONAL, max_ts=h.max_timestamp,
                    producer_id=1, producer_epoch=0, base_sequence=0))
    with pytest.raises(InvalidRecordError, match="delete horizon"):
        check(forge(body_of(good), 3, attributes=0x40, max_ts=h.max_timestamp))
    with pytest.raises(InvalidRecordError, match="unused attribute bits"):
        check(forge(body_of(good), 3, attributes=0x100, max_ts=h.max_timestamp))
    with pytest.raises(InvalidTimestampError, match="LogAppendTime"):
        check(forge(body_of(good), 3, attributes=0x08, max_ts=h.max_timestamp))


def test_producer_fields_must_be_consistent() -> None:
    good = encode_batch(rows(3))
    mt = BatchHeader.parse(good).max_timestamp
    for fields in ({"producer_id": 5, "producer_epoch": 0, "base_sequence": -1},
                   {"producer_id": -1, "base_sequence": 4}, {"producer_id": -7}):
        with pytest.raises(InvalidRecordError):
            check(forge(body_of(good), 3, max_ts=mt, **fields))
    with pytest.raises(InvalidRecordError, match="transactional"):
        check(forge(body_of(good), 3, max_ts=mt, attributes=ATTR_TRANSACTIONAL))


@pytest.mark.parametrize("n", [3, 40])
def test_offset_deltas_must_be_zero_to_n_minus_one(n: int) -> None:
    b = BatchBuilder()
    for i in range(n):
        b.append_with_offset(i if i < n - 1 else n, b"v" * 10, b"k", TS)  # the last one skips a delta
    with pytest.raises(InvalidRecordError, match=f"record {n - 1}: offset delta {n}, expected {n - 1}"):
        check(forge(b.close(), n, max_ts=TS))


@pytest.mark.parametrize("n", [3, 40])
def test_max_timestamp_must_match_the_records(n: int) -> None:
    good = encode_batch(rows(n))
    with pytest.raises(InvalidRecordError, match="maxTimestamp"):
        check(forge(body_of(good), n, max_ts=TS + 999))


def test_bad_lengths_and_headers_name_the_record() -> None:
    b = BatchBuilder()
    b.append(b"ok", None, TS)
    b.append(b"bad", None, TS, headers=[("\u00e9", b"x")])
    body = bytearray(b.close())
    body[body.index("\u00e9".encode())] = 0xFF  # the second record's header key is no longer UTF-8
    with pytest.raises(CorruptRecordError, match="record 1: a header key is not valid UTF-8"):
        check(forge(bytes(body), 2))
    one = bytearray(body_of(encode_batch([(TS, b"k", b"value", None)])))
    one[4] = 0x7F  # key length -64
    with pytest.raises(CorruptRecordError, match="record 0: key length -64"):
        check(forge(bytes(one), 1))


def test_a_refused_payload_appends_nothing(tmp_path) -> None:
    log = PartitionLog(str(tmp_path / "t-0"))
    log.append_as_leader(encode_batch(rows(5)))
    poison = forge(b"\x01" * 50, 3)
    with pytest.raises(TidelogError) as info:
        log.append_as_leader(encode_batch(rows(2)) + poison)  # a good batch first: still all or nothing
    assert info.value.code == 2 and "record 0" in str(info.value)
    assert log.log_end_offset == 5


@pytest.mark.parametrize("topic_codec,expected", [("lz4", CompressionType.LZ4), ("uncompressed", CompressionType.NONE),
                                                  ("none", CompressionType.NONE), ("producer", CompressionType.GZIP)])
def test_the_topic_codec_is_applied_on_append(tmp_path, topic_codec: str, expected: CompressionType) -> None:
    config = LogConfig(extra={"compression.type": topic_codec})
    log = PartitionLog(str(tmp_path / "t-0"), config)
    sent = rows(30, headers=True)
    batch = encode_batch(sent, compression=CompressionType.GZIP, producer_id=3, producer_epoch=1, base_sequence=9)
    view, batches = validate_produce(batch, config)
    assert [h.compression for _, h in batches] == [expected]
    log.append_as_leader(batch)
    data = log.read(0, 1 << 20).records
    header, records = decode_batch(data)
    assert header.compression == expected
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (3, 1, 9)
    assert [(r.timestamp, r.key, r.value, list(r.headers)) for r in iter_records(data)] == [
        (ts, k, v, list(h or [])) for ts, k, v, h in sent]


from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from shared.records.validate import _vector_check, walk_records  # noqa: E402

header_sets = st.one_of(st.none(), st.just([("trace", b"t")]), st.just([("a", None), ("\u00e9", b"x" * 200)]))


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.integers(16, 60), header_sets, st.integers(0, 200), st.lists(st.tuples(st.integers(0, 10**6),
       st.integers(0, 255)), max_size=3), st.booleans())
def test_the_vector_walk_accepts_only_what_the_record_walk_accepts(n, hs, size, flips, vary) -> None:
    """Whatever bytes it is given, the vectorised check never accepts a section the record-by-record walk
    refuses, and agrees with it on the max timestamp."""
    recs = [(TS + (i * 7919) % 3000, b"k" * (i % 3), b"v" * (size + (i % 5 if vary else 0)), hs) for i in range(n)]
    section = bytearray(body_of(encode_batch(recs)))
    for at, byte in flips:
        section[at % len(section)] = byte
    data = bytes(section)
    fast = _vector_check(data, 0, len(data), n)
    try:
        slow = walk_records(data, 0, len(data), n, TS) - TS
    except (CorruptRecordError, InvalidRecordError):
        assert fast is None, "the vector check accepted a section the record walk refuses"
        return
    assert fast is None or fast == slow
    if not flips and all(k.isascii() for k, _ in hs or []):
        assert fast is not None, "a well-formed batch with ASCII header keys takes the vector path"


@pytest.mark.parametrize("codec", [CompressionType.GZIP, CompressionType.LZ4, CompressionType.ZSTD],
                         ids=lambda c: c.name.lower())
def test_a_decompression_bomb_is_refused_while_decompressing(codec: CompressionType, monkeypatch) -> None:
    from shared.records import compression
    monkeypatch.setattr(compression, "MAX_DECOMPRESSED_BYTES", 20_000)
    bomb = encode_batch([(TS, None, b"\x00" * 1000, None)] * 1000, compression=codec)  # 1 MB of zeros
    assert 32 * len(bomb) < 1_000_000
    with pytest.raises(CorruptRecordError, match="decompress to more than"):
        check(bomb)
    check(encode_batch([(TS, None, b"\x00" * 1000, None)] * 10, compression=codec))  # 10 KB: fine


@pytest.mark.parametrize("policy,refused", [("compact", True), ("compact,delete", True), ("delete", False)])
@pytest.mark.parametrize("n,headers,codec", [(30, False, CompressionType.NONE), (3, True, CompressionType.NONE),
                                              (40, False, CompressionType.LZ4)])
def test_a_compacted_topic_refuses_keyless_records(tmp_path, policy: str, refused: bool, n: int, headers: bool,
                                                    codec: CompressionType) -> None:
    """Kafka: "Compacted topic cannot accept message without key" (INVALID_RECORD), and nothing is written."""
    log = PartitionLog(str(tmp_path / "t-0"), LogConfig(cleanup_policy=policy))
    keyed = rows(n, headers)
    log.append_as_leader(encode_batch(keyed, compression=codec))
    keyless = [(ts, None if i == n - 1 else k, v, h) for i, (ts, k, v, h) in enumerate(keyed)]
    if refused:
        with pytest.raises(InvalidRecordError, match="without key") as info:
            log.append_as_leader(encode_batch(keyless, compression=codec))
        assert info.value.code == 87 and f"record {n - 1}" in str(info.value)
        assert log.log_end_offset == n
    else:
        log.append_as_leader(encode_batch(keyless, compression=codec))
        assert log.log_end_offset == 2 * n
