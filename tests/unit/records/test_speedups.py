"""The compiled record decoder (``shared/records/_speedups.c``) against the pure-Python one (and its
encoder and the producer's compiled future).

For a valid records section the two must give equal records, field for field; for a damaged one the
compiled loop gives up (``None``) and the Python decoder raises what it always raised, so any input
decodes to exactly what the Python decoder alone gives, or to the same error.
"""

from __future__ import annotations

import dataclasses
import gc
import sys
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.client.consumer import record_class
from shared.client.futures import FutureRecordMetadata, ProduceRequestResult, RecordMetadata, new_future
from shared.errors import CorruptRecordError
from shared.records import _speedups as speedups  # built by setup.py on install: failing here means it was not
from shared.records import builder, decoder
from shared.records.builder import BatchBuilder
from shared.records.decoder import decode_records, decode_records_scalar, records_section
from shared.records.header import HEADER_SIZE, iter_batches
from shared.records.record import NO_HEADERS, Record
from shared.types import TopicPartition


def test_the_extension_is_built_and_used() -> None:
    # setup.py builds it on install (optional there, so a machine without a compiler still installs);
    # on this project's machines and in CI it must be there, or the per-record consume path is 2x slower.
    assert decoder.COMPILED


header_value = st.one_of(st.none(), st.binary(max_size=30))
record = st.tuples(
    st.integers(-(2**40), 2**41),  # timestamps: deltas of one to ten bytes, negative ones too
    st.one_of(st.none(), st.binary(max_size=40)),
    st.one_of(st.none(), st.binary(max_size=300), st.just(b"v" * 20_000)),
    st.one_of(st.just(None), st.lists(st.tuples(st.text(max_size=12), header_value), max_size=3)),
)


def section_of(records: list, base_offset: int) -> tuple:
    b = BatchBuilder()
    for ts, k, v, h in records:
        b.append(v, k, ts, h)
    data = b.build(base_offset)
    (pos, header), = list(iter_batches(data))
    return header, records_section(data, header, pos), data, pos


def python_decode(header, section: bytes, cls: type[Record] = Record) -> list[Record]:
    """``decode_records`` as it is without the extension (positions with numpy, else record by record)."""
    saved, decoder._speedups = decoder._speedups, None
    try:
        return decode_records(header, section, cls)
    finally:
        decoder._speedups = saved


def same(a: list[Record], b: list[Record]) -> None:
    assert [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in a] == \
        [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in b]
    assert [type(r) for r in a] == [type(r) for r in b]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(record, min_size=1, max_size=40), st.integers(0, 2**62))
def test_valid_sections_decode_exactly_as_the_python_decoder(records, base_offset) -> None:
    header, section, data, pos = section_of(records, base_offset)
    fast = speedups.decode_plain(section, 0, len(section), header.records_count, header.base_offset,
                                 header.base_timestamp, None, Record)
    assert fast is not None
    same(fast, python_decode(header, section))
    same(fast, decode_records_scalar(header, section, Record))
    # in place in the fetched buffer, as the consumer decodes, and through decode_records
    same(decode_records(header, data, start=pos + HEADER_SIZE, end=pos + header.size), fast)
    for r, (_ts, _k, _v, h) in zip(fast, records):
        assert r.headers is NO_HEADERS if not h else r.headers == list(h)


@settings(max_examples=30, deadline=None)
@given(st.lists(record, min_size=1, max_size=10), st.integers(0, 2**40))
def test_log_append_time_gives_every_record_the_batch_timestamp(records, ts) -> None:
    header, section, _, _ = section_of(records, 0)
    fast = speedups.decode_plain(section, 0, len(section), header.records_count, 0, header.base_timestamp, ts, Record)
    assert fast is not None and {r.timestamp for r in fast} == {ts}


def test_records_are_made_as_the_asked_class_with_its_attributes() -> None:
    header, section, _, _ = section_of([(5, b"k", b"v", None), (6, None, None, [("h", None)])], 7)
    cls = record_class("t", 3, 0)
    recs = decode_records(header, section, cls)
    assert [type(r) for r in recs] == [cls, cls]
    assert (recs[0].topic, recs[0].partition, recs[0].offset, recs[0].key, recs[1].headers) == ("t", 3, 7, b"k",
                                                                                                 [("h", None)])
    recs[0].value = b"changed"  # ordinary slots: still writable
    assert recs[0].value == b"changed"


def test_a_class_with_its_own_init_is_made_by_the_python_decoder() -> None:
    made = []

    class Counting(Record):
        __slots__ = ()

        def __init__(self, *args) -> None:
            made.append(args[0])
            super().__init__(*args)

    header, section, _, _ = section_of([(5, b"k", b"v", None)] * 3, 10)
    assert [r.offset for r in decode_records(header, section, Counting)] == [10, 11, 12] == made


def test_a_class_that_is_not_a_record_is_refused() -> None:
    header, section, _, _ = section_of([(5, b"k", b"v", None)], 0)
    with pytest.raises(TypeError):
        speedups.decode_plain(section, 0, len(section), 1, 0, 0, None, dict)


def outcome(fn):
    try:
        return "ok", [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in fn()]
    except CorruptRecordError as exc:
        return "error", str(exc)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(record, min_size=1, max_size=8), st.data())
def test_damaged_sections_give_up_and_decode_as_the_python_decoder_alone(records, data) -> None:
    header, section, _, _ = section_of(records, 100)
    buf = bytearray(section)
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(buf) - 1))
        buf[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(buf)))
    damaged = bytes(buf[:cut]) if data.draw(st.booleans()) else bytes(buf)
    count = data.draw(st.sampled_from([header.records_count, header.records_count + 1, 0, 2**31 - 1]))
    h = dataclasses.replace(header, records_count=count)
    fast = speedups.decode_plain(damaged, 0, len(damaged), h.records_count, h.base_offset, h.base_timestamp, None,
                                 Record)
    if fast is not None:  # the damage left a valid section: it must read as the Python decoder reads it
        same(fast, python_decode(h, damaged))
    assert outcome(lambda: decode_records(h, damaged)) == outcome(lambda: python_decode(h, damaged))


def test_bounds_outside_the_buffer_give_up_rather_than_read_past_it() -> None:
    header, section, _, _ = section_of([(5, b"k", b"v", None)], 0)
    for start, end in ((-1, len(section)), (0, len(section) + 1), (3, 2)):
        assert speedups.decode_plain(section, start, end, 1, 0, 0, None, Record) is None


def test_decoding_keeps_no_references() -> None:
    header, section, _, _ = section_of([(5, b"k" * 16, b"v" * 1024, [("a", b"b")])] * 50, 0)
    damaged = section[:-1]

    def run() -> None:
        for _ in range(200):
            speedups.decode_plain(section, 0, len(section), 50, 0, 0, None, Record)
            speedups.decode_plain(damaged, 0, len(damaged), 50, 0, 0, None, Record)

    run()
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        run()
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 64 * 1024, f"{grown} bytes still held after decoding"


def test_payload_size_counts_keys_and_values_and_nulls_as_zero() -> None:
    recs = [Record(0, 0, b"ab", b"cde", []), Record(1, 0, None, b"x" * 1024, []), Record(2, 0, b"k", None, []),
            Record(3, 0, None, None, [])]
    assert speedups.payload_size(recs) == decoder.payload_size(recs) == 2 + 3 + 1024 + 1
    assert speedups.payload_size([]) == 0
    # not records, or values that are not bytes: the Python sum decides
    assert speedups.payload_size([("k", "v")]) is None
    odd = [Record(0, 0, bytearray(b"ab"), b"c", [])]
    assert speedups.payload_size(odd) is None and decoder.payload_size(odd) == 3


def built(records: list, compiled: bool) -> bytes:
    saved = builder.compiled_append
    builder.compiled_append = saved if compiled else None
    try:
        b = BatchBuilder()
        for ts, k, v, h in records:
            b.append(v, k, ts, h)
        return b.build(7)
    finally:
        builder.compiled_append = saved


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(record, min_size=1, max_size=40))
def test_the_compiled_encoder_writes_the_bytes_of_the_python_one(records) -> None:
    assert builder.compiled_append is not None
    assert built(records, True) == built(records, False)


def test_the_compiled_encoder_declines_what_is_not_exactly_bytes() -> None:
    parts: list[bytes] = []
    assert speedups.append_record(parts, 1, 0, bytearray(b"k"), b"v", b"\x00") is False
    assert speedups.append_record(parts, 1, 0, b"k", memoryview(b"v"), b"\x00") is False
    assert speedups.append_record((), 1, 0, b"k", b"v", b"\x00") is False
    assert parts == []
    # and the builder still encodes them, in Python
    assert built([(5, bytearray(b"k"), memoryview(b"v"), None)], True) == built([(5, b"k", b"v", None)], False)


def test_a_closed_builder_still_refuses_a_record() -> None:
    b = BatchBuilder()
    b.append(b"v", b"k", 5)
    b.close()
    with pytest.raises(ValueError, match="closed"):
        b.append(b"w", b"k", 6)


def test_the_compiled_future_is_the_class_with_its_three_slots_and_holds_its_references_once() -> None:
    result = ProduceRequestResult(TopicPartition("t", 2))
    made = new_future(result, 3, 1_700_000_000_000)
    assert new_future is speedups.new_future  # the producer uses the compiled one where it is built
    assert type(made) is FutureRecordMetadata
    assert (made._result, made._relative, made._timestamp) == (result, 3, 1_700_000_000_000)
    result.complete(100)
    assert made.get(0) == RecordMetadata("t", 2, 103, 1_700_000_000_000)
    before = sys.getrefcount(result)
    many = [new_future(result, i, 5) for i in range(1000)]
    assert sys.getrefcount(result) - before == 1000
    del many
    assert sys.getrefcount(result) == before


def test_the_compiled_future_refuses_a_class_without_the_slots() -> None:
    class NoSlots:
        _result = _relative = _timestamp = None

    with pytest.raises(TypeError, match="not an object slot"):
        speedups.set_future_class(NoSlots)
    with pytest.raises(TypeError):
        speedups.set_future_class(42)
    with pytest.raises(TypeError):
        speedups.new_future(1, 2)
    assert type(new_future(ProduceRequestResult(TopicPartition("t", 0)), 0, 0)) is FutureRecordMetadata  # still set
