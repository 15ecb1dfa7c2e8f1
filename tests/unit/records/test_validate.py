"""Produce-side validation (as Kafka's LogValidator): hand-made poison batches, one per rule, each refused
with Kafka's error code (or the deviation ``shared.records.validate`` documents), and the broker's
recompression to the topic's compression.type. The shapes real clients write: test_kafka_client_shapes."""

from __future__ import annotations

import os

import pytest

from services.broker.log import PartitionLog
from services.broker.log.validation import validate_produce
from shared.config import LogConfig
from shared.errors import (
    CorruptRecordError,
    ErrorCode,
    InvalidRecordError,
    InvalidTimestampError,
    RecordTooLargeError,
    TidelogError,
)
from shared.records.builder import BatchBuilder, encode_batch
from shared.records.compression import CompressionType
from shared.records.decoder import decode_batch, iter_records
from shared.records.header import ATTR_CONTROL, ATTR_TRANSACTIONAL, BatchHeader, pack_header
from shared.records.validate import ProducedSection, produced_batches, validate_produced

TS = 1_700_000_000_000


def rows(n: int, headers: bool = False) -> list[tuple[int, bytes | None, bytes | None, list | None]]:
    return [(TS + i % 5, b"k%d" % i, os.urandom(30), [("h", b"x")] if headers and i % 2 else None) for i in range(n)]


def forge(body: bytes, count: int, *, last_delta: int | None = None, attributes: int = 0, base_ts: int = TS,
          max_ts: int = TS, producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
          base_offset: int = 0) -> bytes:
    """A batch with a correct CRC around any records section and header fields."""
    header = pack_header(body, base_offset=base_offset, records_count=count,
                         last_offset_delta=count - 1 if last_delta is None else last_delta, base_timestamp=base_ts,
                         max_timestamp=max_ts, attributes=attributes, producer_id=producer_id,
                         producer_epoch=producer_epoch, base_sequence=base_sequence, partition_leader_epoch=-1)
    return header + body


def body_of(batch: bytes) -> bytes:
    return batch[61:]


def check(batch: bytes, max_message_bytes: int = 1 << 20) -> ProducedSection:
    """The produce path's checks on one batch, in the broker's order (framing and CRC, then the rest)."""
    [(pos, h)] = produced_batches(batch, max_message_bytes)
    return validate_produced(batch, pos, h)


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
    with pytest.raises(InvalidRecordError, match="record 0"):  # Kafka: INVALID_RECORD under a good CRC
        check(forge(b"\xff" * 200, n))


def test_undecompressible_records() -> None:
    for codec in (1, 2, 3, 4):
        with pytest.raises(InvalidRecordError, match="decompress"):  # Kafka: UNKNOWN_SERVER_ERROR (deviation)
            check(forge(b"not compressed at all" * 5, 3, attributes=codec))


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codec(codec: int) -> None:
    with pytest.raises(InvalidRecordError, match=f"unknown compression type {codec}"):  # Kafka: UNKNOWN_SERVER_ERROR
        check(forge(body_of(encode_batch(rows(3))), 3, attributes=codec))


@pytest.mark.parametrize("n", [3, 40])
def test_count_lies_name_the_first_missing_record(n: int) -> None:
    good = encode_batch(rows(n))
    h = BatchHeader.parse(good)
    with pytest.raises(InvalidRecordError, match=f"record {n}:"):  # Kafka: "premature EOF" INVALID_RECORD
        check(forge(body_of(good), 1001, max_ts=h.max_timestamp))
    with pytest.raises(InvalidRecordError, match="lastOffsetDelta 1000 and record count 3"):
        check(forge(body_of(good), 3, last_delta=1000, max_ts=h.max_timestamp))


def test_fewer_claimed_records_leave_trailing_bytes() -> None:
    good = encode_batch(rows(3))
    h = BatchHeader.parse(good)
    with pytest.raises(InvalidRecordError, match="bytes after the last record"):  # Kafka: "records still remaining"
        check(forge(body_of(good), 2, max_ts=h.max_timestamp))
    with pytest.raises(InvalidRecordError, match="bytes after the last record"):
        check(forge(body_of(good) + b"\x00", 3, max_ts=h.max_timestamp))


def test_control_bit_and_flags_only_the_broker_sets() -> None:
    good = encode_batch(rows(3))
    h = BatchHeader.parse(good)
    with pytest.raises(InvalidRecordError, match="control records"):
        check(forge(body_of(good), 3, attributes=ATTR_CONTROL | ATTR_TRANSACTIONAL, max_ts=h.max_timestamp,
                    producer_id=1, producer_epoch=0, base_sequence=0))
    with pytest.raises(InvalidRecordError, match="delete horizon"):
        check(forge(body_of(good), 3, attributes=0x40, max_ts=h.max_timestamp))
    with pytest.raises(InvalidTimestampError, match="LogAppendTime"):
        check(forge(body_of(good), 3, attributes=0x08, max_ts=h.max_timestamp))
    for unused in (0x80, 0x100, -0x8000):  # bits 7-15 (15 is the int16 sign): Kafka ignores them, so do we
        check(forge(body_of(good), 3, attributes=unused, max_ts=h.max_timestamp))


def test_producer_fields_are_read_only_with_a_producer_id() -> None:
    """Kafka checks the sequence only when the batch has a producer id (>= 0): kafkajs without idempotence
    writes producerId -1, epoch 0, baseSequence 0 and must be accepted."""
    good = encode_batch(rows(3))
    mt = BatchHeader.parse(good).max_timestamp
    for fields in ({"producer_id": -1, "producer_epoch": 0, "base_sequence": 0},
                   {"producer_id": -1, "producer_epoch": -1, "base_sequence": 4}, {"producer_id": -7}):
        check(forge(body_of(good), 3, max_ts=mt, **fields))
    with pytest.raises(InvalidRecordError, match="invalid sequence number -1 in a batch with producer id 5"):
        check(forge(body_of(good), 3, max_ts=mt, producer_id=5, producer_epoch=0, base_sequence=-1))
    with pytest.raises(InvalidRecordError, match="invalid producer epoch -1"):  # a documented deviation
        check(forge(body_of(good), 3, max_ts=mt, producer_id=5, producer_epoch=-1, base_sequence=0))
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
@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.LZ4], ids=lambda c: c.name.lower())
def test_a_wrong_max_timestamp_is_set_to_the_records_max(n: int, codec: CompressionType) -> None:
    """Kafka's LogValidator sets a client batch's maxTimestamp to its records' max (new CRC) rather than
    refuse it; so does the broker, and the stored batch reads back with it."""
    good = encode_batch(rows(n), compression=codec)
    h = BatchHeader.parse(good)
    for wrong in (TS + 999, TS - 5, -1):
        lying = forge(body_of(good), n, max_ts=wrong, attributes=codec)
        assert check(lying).max_timestamp == h.max_timestamp
        view, [(pos, fixed)] = validate_produce(lying, LogConfig())
        assert fixed.max_timestamp == h.max_timestamp and bytes(view) == good
    view, _ = validate_produce(good, LogConfig())
    assert view.obj is good  # a right one is appended as sent, not copied


def test_bad_lengths_and_headers_name_the_record() -> None:
    b = BatchBuilder()
    b.append(b"ok", None, TS)
    b.append(b"bad", None, TS, headers=[("\u00e9", b"x")])
    body = bytearray(b.close())
    body[body.index("\u00e9".encode())] = 0xFF  # the second record's header key is no longer UTF-8
    with pytest.raises(InvalidRecordError, match="record 1: a header key is not valid UTF-8"):
        check(forge(bytes(body), 2))
    one = bytearray(body_of(encode_batch([(TS, b"k", b"value", None)])))
    one[4] = 0x7F  # key length -64 (Kafka reads it as null: a documented deviation)
    with pytest.raises(InvalidRecordError, match="record 0: key length -64"):
        check(forge(bytes(one), 1))


def test_a_null_header_key_is_refused() -> None:
    """Kafka: "Invalid negative header key size" (INVALID_RECORD); no client can write one."""
    b = BatchBuilder()
    b.append(b"v", b"k", TS, headers=[("h", b"x")])
    body = bytearray(b.close())
    at = bytes(body).rindex(b"\x02h\x02x")  # header key length 1 ("h"), value length 1
    body[at] = 0x01  # key length -1: null
    with pytest.raises(InvalidRecordError, match="record 0: header key length -1: a header key may not be null"):
        check(forge(bytes(body), 1))


def test_an_over_long_varint_is_refused_as_kafka_does() -> None:
    """Kafka reads a 32-bit varint (lengths, offset delta) from at most 5 bytes: a key length 3 written in
    6 bytes is INVALID_RECORD, whichever check path the batch takes."""
    for n in (1, 40):
        b = BatchBuilder()
        for _ in range(n):
            b.append(b"value", b"key", TS)
        body = b.close()
        long_body = bytearray()
        pos = 0
        for i in range(n):  # each record: length, attributes, ts delta, offset delta, key length 3 ...
            length = body[pos] >> 1
            rec = bytearray(body[pos + 1:pos + 1 + length])
            key_at = 2 + (1 if i < 64 else 2)
            rec[key_at:key_at + 1] = b"\x86\x80\x80\x80\x80\x00"  # 3, over-long
            long_body += bytes([2 * len(rec)]) + rec
            pos += 1 + length
        with pytest.raises(InvalidRecordError, match="record 0: a varint of 6 bytes"):
            check(forge(bytes(long_body), n))


def test_the_payload_framing_in_kafkas_order() -> None:
    """baseOffset other than 0 and magic 0/1 are INVALID_RECORD (Kafka's produce v3+); a length or CRC
    fault is CORRUPT_MESSAGE; a batch above max.message.bytes is MESSAGE_TOO_LARGE, even with a bad CRC
    (Kafka checks the size first)."""
    good = encode_batch(rows(3))
    mt = BatchHeader.parse(good).max_timestamp
    with pytest.raises(InvalidRecordError, match="baseOffset of a produced batch should be 0, but it is 7"):
        check(forge(body_of(good), 3, max_ts=mt, base_offset=7))
    for magic, error in ((0, InvalidRecordError), (1, InvalidRecordError), (3, CorruptRecordError)):
        old = bytearray(good)
        old[16] = magic
        with pytest.raises(error, match="magic"):
            check(bytes(old))
    bad_crc = bytearray(good)
    bad_crc[-1] ^= 1
    with pytest.raises(CorruptRecordError, match="CRC"):
        check(bytes(bad_crc))
    with pytest.raises(RecordTooLargeError):
        check(bytes(bad_crc), max_message_bytes=len(good) - 1)
    for payload in (b"", good[:40], good + good[:10], b"\x00" * 100):
        with pytest.raises(CorruptRecordError):
            produced_batches(payload, 1 << 20)


def test_a_payload_larger_than_a_segment_is_record_list_too_large() -> None:
    """Kafka: RecordBatchTooLargeException (RECORD_LIST_TOO_LARGE) when the appended bytes exceed segment.bytes."""
    batch = encode_batch(rows(30))
    validate_produce(batch, LogConfig(segment_bytes=len(batch)))
    with pytest.raises(RecordTooLargeError) as info:
        validate_produce(batch, LogConfig(segment_bytes=len(batch) - 1))
    assert info.value.code == ErrorCode.RECORD_LIST_TOO_LARGE


@pytest.mark.parametrize("n,codec", [(3, CompressionType.NONE), (40, CompressionType.NONE), (40, CompressionType.GZIP)])
def test_timestamp_bounds_of_a_create_time_topic(n: int, codec: CompressionType) -> None:
    """KIP-937: with the broker's time, timestamps beyond message.timestamp.before.max.ms in the past or
    after.max.ms in the future are INVALID_TIMESTAMP; -1 (no timestamp) is never checked; LogAppendTime
    topics and the default (Long.MAX_VALUE) check nothing."""
    now = TS + 10_000
    stamps = [TS + i for i in range(n)]
    stamps[n // 2] = -1
    batch = encode_batch([(ts, b"k", b"v", None) for ts in stamps], compression=codec)
    bounded = {"message.timestamp.before.max.ms": 10_000, "message.timestamp.after.max.ms": 1000}
    validate_produce(batch, LogConfig(extra=bounded), now_ms=now)
    validate_produce(batch, LogConfig(), now_ms=now + 10**12)  # no bound by default
    too_old = {**bounded, "message.timestamp.before.max.ms": 9_999}
    with pytest.raises(InvalidTimestampError, match="record 0: timestamp"):
        validate_produce(batch, LogConfig(extra=too_old), now_ms=now)
    validate_produce(batch, LogConfig(extra=too_old))  # without the broker's time: not checked
    validate_produce(batch, LogConfig(extra=too_old, log_append_time=True), now_ms=now)
    future = {"message.timestamp.after.max.ms": 1000}
    with pytest.raises(InvalidTimestampError, match=f"record {n - 1}: timestamp {TS + n - 1}"):
        validate_produce(batch, LogConfig(extra=future), now_ms=TS + n - 1002)
    validate_produce(batch, LogConfig(extra=future), now_ms=TS + n - 1001)


def test_a_refused_payload_appends_nothing(tmp_path) -> None:
    log = PartitionLog(str(tmp_path / "t-0"))
    log.append_as_leader(encode_batch(rows(5)))
    poison = forge(b"\x01" * 50, 3)
    with pytest.raises(TidelogError) as info:
        log.append_as_leader(encode_batch(rows(2)) + poison)  # a good batch first: still all or nothing
    assert info.value.code == ErrorCode.INVALID_RECORD and "record 0" in str(info.value)
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

from shared.records import _speedups as speedups  # noqa: E402
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


plain_values = st.one_of(st.none(), st.binary(max_size=300))


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.lists(st.tuples(st.integers(-(2**40), 2**41), plain_values, plain_values), min_size=1, max_size=40),
       st.booleans(), st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=3),
       st.integers(-1, 1))
def test_the_compiled_walk_accepts_only_what_the_record_walk_accepts(recs, with_headers, flips, miscount) -> None:
    """``check_plain`` (the broker's compiled walk of records without headers), whatever bytes it is given:
    it never accepts a section the record-by-record walk refuses, agrees with it on the max timestamp, and
    takes every well-formed section without headers."""
    hs = [("h", b"x")] if with_headers else None
    section = bytearray(body_of(encode_batch([(TS + td, k, v, hs) for td, k, v in recs])))
    for at, byte in flips:
        section[at % len(section)] = byte
    data, n = bytes(section), len(recs) + miscount
    fast = speedups.check_plain(data, 0, len(data), n)
    try:
        slow = walk_records(data, 0, len(data), n, TS) - TS
    except (CorruptRecordError, InvalidRecordError, IndexError):
        assert fast is None, "the compiled walk accepted a section the record walk refuses"
        return
    assert fast is None or fast == slow
    if not flips and not miscount:
        assert (fast is None) == with_headers, "a well-formed section without headers takes the compiled walk"


def test_the_compiled_walk_takes_what_kafka_clients_may_write_and_declines_the_rest() -> None:
    one = body_of(encode_batch([(TS, b"k", b"v", None), (TS + 5, None, b"w", None)]))
    assert speedups.check_plain(one, 0, len(one), 2) == 5
    # a null key written as -1 in two bytes (0x81 0x00): the record walk takes it, so the compiled one does
    rec = bytes([0, 0, 0, 0x81, 0x00, 2]) + b"v" + bytes([0])
    two_byte_null = bytes([len(rec) * 2]) + rec
    assert walk_records(two_byte_null, 0, len(two_byte_null), 1, TS) == TS
    assert speedups.check_plain(two_byte_null, 0, len(two_byte_null), 1) == 0
    for data, count in ((one, 1), (one, 3), (one, 0), (one + b"\x00", 2), (one[:-1], 2), (b"", 1)):
        assert speedups.check_plain(data, 0, len(data), count) is None
    assert speedups.check_plain(one, 0, len(one) + 1, 2) is None  # bounds outside the buffer: declined
    assert speedups.check_plain(one, 3, 2, 2) is None
    assert speedups.check_plain(memoryview(one), 0, len(one), 2) == 5


@pytest.mark.parametrize("codec", [CompressionType.GZIP, CompressionType.LZ4, CompressionType.ZSTD],
                         ids=lambda c: c.name.lower())
def test_a_decompression_bomb_is_refused_while_decompressing(codec: CompressionType, monkeypatch) -> None:
    from shared.records import compression
    monkeypatch.setattr(compression, "MAX_DECOMPRESSED_BYTES", 20_000)
    bomb = encode_batch([(TS, None, b"\x00" * 1000, None)] * 1000, compression=codec)  # 1 MB of zeros
    assert 32 * len(bomb) < 1_000_000
    with pytest.raises(InvalidRecordError, match="decompress to more than"):
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
