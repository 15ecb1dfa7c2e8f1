"""The run-at-a-time record check (``shared.records.validate_runs``): it takes the producer's usual batches,
never accepts what the record-by-record walk refuses, and leaves every fault to that walk to name."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.errors import CorruptRecordError, InvalidRecordError
from shared.records.builder import BatchBuilder, encode_batch
from shared.records.header import check_batch, pack_header
from shared.records.validate import validate_produced, walk_records
from shared.records.validate_runs import check_runs

TS = 1_700_000_000_000


def section(records: list) -> bytes:
    return encode_batch(records)[61:]


def forge(body: bytes, count: int, max_ts: int) -> bytes:
    """A batch with a correct CRC around any records section."""
    return pack_header(body, base_offset=0, records_count=count, last_offset_delta=count - 1, base_timestamp=TS,
                       max_timestamp=max_ts, attributes=0, producer_id=-1, producer_epoch=-1, base_sequence=-1,
                       partition_leader_epoch=-1) + body


def fast_and_slow(data: bytes, n: int) -> tuple[int | None, int]:
    return check_runs(data, 0, len(data), n), walk_records(data, 0, len(data), n, TS) - TS


@pytest.mark.parametrize("n,ts_step,value,headers", [
    (900, 0, 1024, None),                                # the producer bench: two runs (offset delta 64 grows)
    (100, 1, 100, [("trace-id", b"0123456789abcdef"), ("source", b"x")]),
    (300, 1, 10, [("k", None)]),                         # the timestamp delta's varint grows at 64
    (9000, 0, 3, None),                                  # three-byte offset deltas from 8192
    (40, -3, 50, None),                                  # negative timestamp deltas
    (20, 10**9, 50, None),                               # five- and six-byte timestamp deltas
    (30, 0, None, None),                                 # null values
])
def test_the_usual_batches_take_the_run_check(n: int, ts_step: int, value: int | None, headers: list | None) -> None:
    payload = None if value is None else os.urandom(value)
    recs = [(TS + i * ts_step, os.urandom(16), payload, headers) for i in range(n)]
    fast, slow = fast_and_slow(section(recs), n)
    assert fast == slow == max(ts - TS for ts, *_ in recs)


def test_varying_lengths_are_left_to_the_other_checks() -> None:
    recs = [(TS, b"k", b"v" * (i % 7), None) for i in range(50)]
    data = section(recs)
    assert check_runs(data, 0, len(data), 50) is None
    check_batch(encode_batch(recs))
    validate_produced(encode_batch(recs), 0, check_batch(encode_batch(recs)))


def test_non_ascii_header_keys_take_the_run_check() -> None:
    recs = [(TS, b"k", b"value", [("\u00e9t\u00e9", b"x")]) for _ in range(40)]
    data = section(recs)
    assert check_runs(data, 0, len(data), 40) == 0


def run_of(n: int = 200) -> tuple[bytearray, list[int]]:
    """A section of ``n`` equal-length records and where each record starts."""
    recs = [(TS + i % 3, b"key-%04d" % i, b"v" * 40, [("h", b"x")]) for i in range(n)]
    data = bytearray(section(recs))
    starts, pos = [], 0
    for _ in range(n):
        starts.append(pos)
        pos += 1 + data[pos] // 2  # one-byte length varints here
    assert pos == len(data)
    return data, starts


@pytest.mark.parametrize("field,offset,byte,error", [
    ("key length", 5, 0x7F, "record 137: key length -64 does not fit"),
    ("offset delta", 3, 0x00, "record 137: offset delta 0, expected 137"),
    ("header count", -5, 0x04, "record 137"),
    ("header key", -3, 0xFF, "record 137: a header key is not valid UTF-8"),
    ("length", 0, 0x02, "record 137"),
])
def test_one_corrupt_record_in_the_middle_of_a_run_is_named(field: str, offset: int, byte: int, error: str) -> None:
    data, starts = run_of()
    # Record 137: length, attributes, timestamp delta (one byte each), offset delta (two), key length; the
    # record ends with the header count, key length, key, value length and value of its one header.
    data[starts[137] + offset if offset >= 0 else starts[138] + offset] = byte
    body = bytes(data)
    assert check_runs(body, 0, len(body), 200) is None
    batch = forge(body, 200, TS + 2)
    with pytest.raises((CorruptRecordError, InvalidRecordError), match=error):
        validate_produced(batch, 0, check_batch(batch))


def test_a_timestamp_in_the_middle_of_a_run_counts_for_the_max() -> None:
    data, starts = run_of()
    data[starts[150] + 2] = 2 * 60  # its timestamp delta: 60 ms
    body = bytes(data)
    assert check_runs(body, 0, len(body), 200) == 60
    batch = forge(body, 200, TS + 2)  # a wrong maxTimestamp: the records' max is what the broker writes
    assert validate_produced(batch, 0, check_batch(batch)).max_timestamp == TS + 60
    batch = forge(body, 200, TS + 60)
    assert validate_produced(batch, 0, check_batch(batch)).max_timestamp == TS + 60


def test_gaps_in_offset_deltas_are_refused() -> None:
    b = BatchBuilder()
    for i in range(40):
        b.append_with_offset(i + (i >= 20), b"v" * 10, b"k", TS)
    body = b.close()
    assert check_runs(body, 0, len(body), 40) is None
    with pytest.raises(InvalidRecordError, match="record 20: offset delta 21, expected 20"):
        validate_produced(forge(body, 40, TS), 0, check_batch(forge(body, 40, TS)))


header_sets = st.one_of(st.none(), st.just([("trace", b"t")]), st.just([("a", None), ("\u00e9", b"x" * 200)]))


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.integers(16, 150), header_sets, st.integers(0, 200), st.integers(0, 3),
       st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=3), st.integers(-2, 40))
def test_the_run_check_accepts_only_what_the_record_walk_accepts(n, hs, size, key_len, flips, ts_step) -> None:
    """Whatever bytes it is given, the run check never accepts a section the record-by-record walk refuses,
    and agrees with it on the max timestamp."""
    recs = [(TS + i * ts_step, b"k" * key_len, b"v" * size, hs) for i in range(n)]
    data = bytearray(section(recs))
    for at, byte in flips:
        data[at % len(data)] = byte
    body = bytes(data)
    fast = check_runs(body, 0, len(body), n)
    try:
        slow = walk_records(body, 0, len(body), n, TS) - TS
    except (CorruptRecordError, InvalidRecordError):
        assert fast is None, "the run check accepted a section the record walk refuses"
        return
    assert fast is None or fast == slow
    if not flips and size + key_len > 0:
        assert fast is not None, "a well-formed batch of equal records takes the run check"


def test_the_validation_benchmark_runs() -> None:
    from services.broker.log.bench_validate import format_rows, run_validate_bench
    rows = run_validate_bench(seconds=0.01)
    assert [r["records"] for r in rows][:2] == [900, 900] and all(r["validate_ns"] > 0 for r in rows)
    assert "900 x 1 KiB lz4" in format_rows(rows)
