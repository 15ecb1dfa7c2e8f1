"""The vectorised field-position decoder must agree exactly with the record-by-record decoder."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from shared.errors import CorruptRecordError
from shared.records import positions
from shared.records.builder import encode_batch
from shared.records.columns import decode_columns
from shared.records.decoder import decode_records, decode_records_scalar, records_section
from shared.records.header import HEADER_SIZE, iter_batches
from shared.records.positions import MIN_VECTOR_RECORDS, cut_keys_values, record_positions
from shared.records.record import Record as R

plain_record = st.tuples(
    st.integers(2**40, 2**40 + 1_000_000),  # deltas below 2**20 ms: three-byte varints at most
    st.one_of(st.none(), st.binary(max_size=20)),
    st.one_of(st.none(), st.binary(max_size=200), st.just(b"z" * 8200)),  # 1-, 2- and 3-byte lengths
    st.just([]),
)


def positions_of(data: bytes):
    (pos, header), = list(iter_batches(data))
    section = records_section(data, header, pos)
    return header, section, record_positions(section, 0, len(section), header.records_count, header.base_offset,
                                             header.base_timestamp, None)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(plain_record, min_size=MIN_VECTOR_RECORDS, max_size=60), st.integers(0, 2**40))
def test_batches_of_plain_records_take_the_fast_path_and_decode_exactly(records, base_offset) -> None:
    data = encode_batch(records, base_offset=base_offset)
    header, section, found = positions_of(data)
    assert found is not None
    expected = [R(base_offset + i, ts, k, v, []) for i, (ts, k, v, _) in enumerate(records)]
    assert decode_records(header, section) == expected
    assert decode_records_scalar(header, section, R) == expected
    cols = decode_columns(header, data, start=HEADER_SIZE, end=len(data))
    p = cols.positions
    assert p.offsets.tolist() == [r.offset for r in expected]
    assert p.timestamps.tolist() == [r.timestamp for r in expected]
    for i, r in enumerate(expected):
        key = None if p.key_null is not None and p.key_null[i] else data[p.key_start[i]:p.key_end[i]]
        value = None if p.value_null is not None and p.value_null[i] else data[p.value_start[i]:p.value_end[i]]
        assert (key, value) == (r.key, r.value)


def test_headers_small_batches_and_huge_values_use_the_record_by_record_decoder() -> None:
    many = [(1, b"k", b"v", [])] * 40
    assert positions_of(encode_batch(many))[2] is not None
    assert positions_of(encode_batch(many[:MIN_VECTOR_RECORDS - 1]))[2] is None
    assert positions_of(encode_batch(many[:-1] + [(1, b"k", b"v", [("h", b"x")])]))[2] is None
    big = many[:-1] + [(1, b"k", b"x" * (1 << 21), [])]  # a four-byte length varint
    header, section, found = positions_of(encode_batch(big))
    # the numpy walk reads varints of up to three bytes; the compiled reader, as the record decoder, more
    assert (found is None) == (positions.compiled_fields is None)
    if found is not None:
        assert section[found.value_start[-1]:found.value_end[-1]] == b"x" * (1 << 21)
    assert decode_records(header, section)[-1].value == b"x" * (1 << 21)


def test_without_the_compiled_reader_the_numpy_walk_reads_huge_values_record_by_record(monkeypatch) -> None:
    monkeypatch.setattr(positions, "compiled_fields", None)
    big = [(1, b"k", b"v", [])] * 39 + [(1, b"k", b"x" * (1 << 21), [])]
    assert positions_of(encode_batch(big))[2] is None


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(min_size=1, max_size=40), st.integers(0, 100_000))
@example(noise=b"\x80" * 10, where=0)  # a length varint longer than 10 bytes
def test_a_damaged_section_is_never_accepted_by_the_fast_path_alone(noise: bytes, where: int) -> None:
    records = [(1000 + i, b"key-%d" % i, b"v" * (i * 37 % 300), []) for i in range(60)]
    header, section, _ = positions_of(encode_batch(records))
    where %= len(section)
    damaged = bytearray(section)
    damaged[where:where + len(noise)] = noise[:len(section) - where]
    damaged = bytes(damaged)
    found = record_positions(damaged, 0, len(damaged), header.records_count, header.base_offset,
                             header.base_timestamp, None)
    try:
        slow = decode_records_scalar(header, damaged, R)
    except (CorruptRecordError, IndexError):
        assert found is None, "the fast path accepted a section the full decoder rejects"
        with pytest.raises(CorruptRecordError):
            decode_records(header, damaged)
        return
    assert decode_records(header, damaged) == slow


def test_a_negative_offset_delta_is_corrupt_in_both_decoders() -> None:
    many = [(5, b"k", b"v" * 20, []) for _ in range(40)]
    header, section, _ = positions_of(encode_batch(many))
    # Record 0 is: length varint (1 byte), attributes, timestamp delta, offset delta. Make the delta -1.
    damaged = bytearray(section)
    assert damaged[3] == 0
    damaged[3] = 1  # zig-zag -1
    assert record_positions(bytes(damaged), 0, len(damaged), header.records_count, header.base_offset,
                            header.base_timestamp, None) is None
    with pytest.raises(CorruptRecordError, match="negative offset delta"):
        decode_records(header, bytes(damaged))
    with pytest.raises(CorruptRecordError, match="negative offset delta"):
        decode_columns(header, bytes(damaged))


runs = st.lists(st.tuples(st.integers(1, 90), st.integers(0, 400), st.one_of(st.none(), st.binary(max_size=8))),
                min_size=1, max_size=6)


def _run_records(spec, base_ts: int = 10_000) -> list:
    out = []
    for count, size, key in spec:
        out += [(base_ts + len(out) // 7, key, b"v" * size, []) for _ in range(count)]
    return out


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs)
def test_runs_of_equal_length_records_are_followed_exactly(spec) -> None:
    """Runs of one record length (fixed-size payloads) are walked with numpy; mixed with short runs."""
    records = _run_records(spec)
    if len(records) < MIN_VECTOR_RECORDS:
        records += [(10_000, b"k", b"x" * (i % 5), []) for i in range(MIN_VECTOR_RECORDS)]
    header, section, found = positions_of(encode_batch(records))
    assert found is not None
    expected = [R(i, ts, k, v, []) for i, (ts, k, v, _) in enumerate(records)]
    assert decode_records(header, section) == expected == decode_records_scalar(header, section, R)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(min_size=1, max_size=6), st.integers(0, 1_000_000))
@example(noise=b"\x80" * 6, where=0)
def test_a_damaged_run_is_never_accepted_by_the_fast_path_alone(noise: bytes, where: int) -> None:
    records = _run_records([(70, 300, b"key"), (40, 10, None), (90, 300, b"key")])
    header, section, found = positions_of(encode_batch(records))
    assert found is not None
    where %= len(section)
    damaged = bytearray(section)
    damaged[where:where + len(noise)] = noise[:len(section) - where]
    damaged = bytes(damaged)
    found = record_positions(damaged, 0, len(damaged), header.records_count, header.base_offset,
                             header.base_timestamp, None)
    try:
        slow = decode_records_scalar(header, damaged, R)
    except (CorruptRecordError, IndexError):
        assert found is None, "the fast path accepted a section the full decoder rejects"
        return
    assert decode_records(header, damaged) == slow


# Runs of at least 32 records: a run boundary changes the layout of up to two records (the last one's gap to
# the next key holds the next record's length varint), and the offset delta's varint grows at 64, so shorter runs
# can legitimately exceed cut_keys_values' limit of one layout change per 8 records and take the slice path.
key_runs = st.lists(st.tuples(st.integers(32, 90), st.integers(0, 400), st.binary(max_size=8)), min_size=1, max_size=4)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(key_runs, st.integers(0, 2**40))
def test_keys_and_values_cut_by_runs_of_one_layout_are_exact(spec, base_offset) -> None:
    """Records sharing a layout are cut by one struct format per run; offset deltas of one and two
    bytes and timestamp steps make new runs within equal payloads."""
    records = _run_records(spec)
    records += [(records[-1][0], b"k", b"tail", [])] * MIN_VECTOR_RECORDS
    header, section, found = positions_of(encode_batch(records, base_offset=base_offset))
    assert found is not None
    cut = cut_keys_values(section, found)
    assert cut is not None, "few layouts: cut by runs"
    assert cut == ([k for _, k, _, _ in records], [v for _, _, v, _ in records])
    expected = [R(base_offset + i, ts, k, v, []) for i, (ts, k, v, _) in enumerate(records)]
    assert decode_records(header, section) == expected == decode_records_scalar(header, section, R)


def test_nulls_and_many_layouts_are_cut_with_slices() -> None:
    with_null = [(1, None, b"v", [])] + [(1, b"k", b"v", [])] * 30
    header, section, found = positions_of(encode_batch(with_null))
    assert found is not None and cut_keys_values(section, found) is None
    varied = [(1, b"k", b"v" * (i % 7), []) for i in range(40)]  # a new layout at every record
    header, section, found = positions_of(encode_batch(varied))
    assert found is not None and cut_keys_values(section, found) is None
    assert decode_records(header, section) == decode_records_scalar(header, section, R)


mixed_record = st.tuples(
    st.integers(0, 2**45),
    st.one_of(st.none(), st.binary(max_size=20)),
    st.one_of(st.none(), st.binary(max_size=300)),
    st.one_of(st.just([]), st.lists(st.tuples(st.text(max_size=3), st.binary(max_size=4)), max_size=2)),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(mixed_record, min_size=1, max_size=40), min_size=1, max_size=4),
       st.lists(st.integers(0, 5), min_size=4, max_size=4), st.binary(max_size=3), st.integers(0, 10**6))
def test_compiled_reader_agrees_with_the_numpy_walk(batches, gaps, noise, where) -> None:
    """plain_fields gives the positions the numpy walk gives, for one batch and for several (compacted gaps
    between them, some with headers: then both give up), and a damaged section never makes it accept what
    the record-by-record decoder refuses."""
    from shared.records.columns import decode_columns_many

    data, base = b"", 0
    for records, gap in zip(batches, gaps, strict=False):
        data += encode_batch(records, base_offset=base + gap)
        base += gap + len(records)
    found_batches = list(iter_batches(data))

    def both(buf: bytes):
        got = [decode_columns_many(buf, found_batches)]
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(positions, "compiled_fields", None)
            got.append(decode_columns_many(buf, found_batches))
        return got

    fast, slow = both(data)
    if not any(r[3] for records in batches for r in records):  # no headers: the compiled reader takes them all
        assert fast is not None
    if slow is not None:
        assert fast is not None
        for name in ("offsets", "timestamps", "key_start", "key_end", "value_start", "value_end"):
            assert getattr(fast[0].positions, name).tolist() == getattr(slow[0].positions, name).tolist(), name
        for name in ("key_null", "value_null"):
            a, b = getattr(fast[0].positions, name), getattr(slow[0].positions, name)
            assert (a is None) == (b is None) and (a is None or a.tolist() == b.tolist())
        assert fast[1].tolist() == slow[1].tolist()
    if fast is not None:  # what the compiled reader accepts, the record decoder reads the same way
        decoded = [r for pos, h in found_batches for r in decode_records(h, records_section(data, h, pos))]
        p = fast[0].positions
        assert p.offsets.tolist() == [r.offset for r in decoded]
        assert [None if p.value_null is not None and p.value_null[i] else data[p.value_start[i]:p.value_end[i]]
                for i in range(len(decoded))] == [r.value for r in decoded]
    # damage one batch's records (the header's CRC is not checked here): never accepted unless decodable
    pos, h = found_batches[0]
    lo = pos + HEADER_SIZE
    at = lo + where % max(1, h.size - HEADER_SIZE)
    damaged = bytearray(data)
    damaged[at:at + len(noise)] = noise[:len(data) - at]
    fast_d, _ = both(bytes(damaged))
    if fast_d is not None:
        section = bytes(damaged[lo:pos + h.size])
        decoded = decode_records_scalar(h, section, R)  # raises if the records are not decodable
        assert fast_d[0].positions.offsets[:len(decoded)].tolist() == [r.offset for r in decoded]
