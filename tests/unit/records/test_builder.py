"""The builder writes what the log cleaner needs (as Kafka's cleaner writes it): offset deltas with gaps,
explicit timestamps and producer fields, a delete horizon, and empty batches that keep lastOffsetDelta.
Checked against our decoder and kafka-python's independent one."""

from __future__ import annotations

import pytest
from kafka.record.default_records import DefaultRecordBatch

from shared.records.builder import BatchBuilder, encode_batch
from shared.records.compression import CompressionType
from shared.records.decoder import decode_batch
from shared.records.header import LOG_APPEND_TIME, check_batch


@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.ZSTD], ids=["none", "zstd"])
def test_compacted_batch_keeps_original_offsets_with_gaps(codec: CompressionType) -> None:
    b = BatchBuilder(codec, producer_id=42, producer_epoch=3, base_sequence=100, transactional=True,
                     partition_leader_epoch=7)
    kept = [(0, 1000, b"a", b"1"), (4, 1004, b"b", None), (9, 999, b"c", b"3")]  # a tombstone in the middle
    for delta, ts, key, value in kept:
        assert b.append_with_offset(delta, value, key, ts) == delta
    data = b.build(500, last_offset_delta=11)  # the batch's original last offset survives compaction
    h, records = decode_batch(data)
    assert (h.base_offset, h.last_offset_delta, h.records_count) == (500, 11, 3)
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.is_transactional) == (42, 3, 100, True)
    assert (h.partition_leader_epoch, h.base_timestamp, h.max_timestamp) == (7, 1000, 1004)
    assert [(r.offset, r.timestamp, r.key, r.value) for r in records] == [
        (500 + d, ts, k, v) for d, ts, k, v in kept]
    theirs = DefaultRecordBatch(data)
    assert theirs.validate_crc()
    assert [(r.offset, r.timestamp, r.key, r.value) for r in theirs] == [(500 + d, ts, k, v) for d, ts, k, v in kept]


def test_an_empty_batch_keeps_its_offsets_and_producer_state() -> None:
    b = BatchBuilder(producer_id=9, producer_epoch=1, base_sequence=40)
    data = b.build(1000, last_offset_delta=4, max_timestamp=1234)
    h = check_batch(data)
    assert (h.records_count, h.last_offset, h.next_offset, h.last_sequence) == (0, 1004, 1005, 44)
    assert (h.base_timestamp, h.max_timestamp) == (1234, 1234)
    assert decode_batch(data)[1] == []
    assert DefaultRecordBatch(data).validate_crc() and list(DefaultRecordBatch(data)) == []
    with pytest.raises(ValueError):
        BatchBuilder().build()  # an empty batch must say its last offset


def test_delete_horizon_is_the_base_timestamp_and_attribute_bit_6() -> None:
    b = BatchBuilder(delete_horizon_ms=5000)
    b.append(b"v", b"k", 1200)
    b.append(None, b"t", 1300)
    h, records = decode_batch(b.build())
    assert h.has_delete_horizon and h.base_timestamp == 5000 and h.max_timestamp == 1300
    assert [r.timestamp for r in records] == [1200, 1300]


def test_offset_deltas_must_increase_and_a_closed_batch_takes_no_records() -> None:
    b = BatchBuilder()
    b.append_with_offset(3, b"x")
    with pytest.raises(ValueError, match="not above"):
        b.append_with_offset(3, b"y")
    with pytest.raises(ValueError, match="below the last record"):
        b.build(last_offset_delta=2)
    b.build()
    with pytest.raises(ValueError, match="closed"):
        b.append(b"z")


def test_columns_and_appends_make_the_same_bytes() -> None:
    rows = [(100 + i % 3, b"k%d" % i if i % 4 else None, b"v" * i, None) for i in range(50)]
    one = BatchBuilder(CompressionType.GZIP, timestamp_type=LOG_APPEND_TIME)
    for ts, k, v, _ in rows:
        one.append(v, k, ts)
    assert one.build(7) == encode_batch(rows, base_offset=7, compression=CompressionType.GZIP,
                                        timestamp_type=LOG_APPEND_TIME)
    two = BatchBuilder()
    two.extend_columns([r[0] for r in rows[:20]], [r[1] for r in rows[:20]], [r[2] for r in rows[:20]])
    two.extend_columns([r[0] for r in rows[20:]], [r[1] for r in rows[20:]], [r[2] for r in rows[20:]])
    assert two.build() == encode_batch(rows)


def test_a_record_that_cannot_be_encoded_leaves_the_batch_unchanged() -> None:
    b = BatchBuilder()
    b.append(b"v", None, 100)
    with pytest.raises((TypeError, AttributeError)):
        b.append(b"v", None, 999, headers=[(b"not-a-str", b"x")])  # type: ignore[list-item]
    assert (b.count, b.max_ts) == (1, 100)
    h, records = decode_batch(b.build())
    assert h.max_timestamp == 100 and len(records) == 1
