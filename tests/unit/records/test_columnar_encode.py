"""The vectorised encoder (``shared.records.columnar_encode``) writes the very bytes of the per-record
builder, which kafka-python's reader decodes to the same records; its murmur2 is Kafka's."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch

from shared.client.partitioner import partition_for_key
from shared.records.builder import BatchBuilder, encode_batch_columns
from shared.records.columnar_encode import (
    as_binary_column,
    encode_batch_columnar,
    encode_sections,
    murmur2_partitions,
    section_builder,
    split_batches,
    varint_matrix,
)
from shared.records.compression import CompressionType
from shared.records.varint import encode_zigzag

blobs = st.one_of(st.none(), st.binary(max_size=40), st.binary(min_size=127, max_size=300))
headers_st = st.one_of(st.none(), st.lists(st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=8))),
                                           max_size=3))
records_st = st.lists(st.tuples(st.integers(-(1 << 40), 1 << 41), blobs, blobs, headers_st), min_size=1, max_size=40)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=records_st, as_arrow=st.booleans(), with_headers=st.booleans())
def test_same_bytes_as_the_builder_and_kafka_python_reads_them(records, as_arrow, with_headers) -> None:
    ts = [r[0] for r in records]
    keys = [r[1] for r in records]
    values = [r[2] for r in records]
    headers = [r[3] for r in records] if with_headers else None
    expected = encode_batch_columns(ts, keys, values, headers, producer_id=7, producer_epoch=1, base_sequence=3)
    k = pa.array(keys, type=pa.binary()) if as_arrow else keys
    v = pa.array(values, type=pa.binary()) if as_arrow else values
    got = encode_batch_columnar(v, k, ts, headers, producer_id=7, producer_epoch=1, base_sequence=3)
    assert got == expected
    batch = DefaultRecordBatch(got)
    decoded = list(batch)
    assert [r.key for r in decoded] == keys
    assert [r.value for r in decoded] == values
    assert [r.timestamp for r in decoded] == ts
    assert [list(r.headers) for r in decoded] == [list(h or []) for h in (headers or [None] * len(records))]


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(0, 3000), min_size=1, max_size=60), batch_size=st.integers(100, 8000),
       compression=st.sampled_from(list(CompressionType)))
def test_sections_cut_where_send_closes_a_batch(sizes, batch_size, compression) -> None:
    """Cut at ``split_batches``'s rows, each section is the batch ``BatchBuilder.append`` makes of the same
    records, with the rule send() applies (61 + sum of estimates within batch.size)."""
    values = [b"x" * s for s in sizes]
    ts = [1_700_000_000_000 + 3 * i for i in range(len(sizes))]
    est = np.array([22 + s for s in sizes])
    starts = split_batches(est, batch_size)
    # send()'s rule, record by record
    expected_starts, size = [], None
    for i, e in enumerate(est.tolist()):
        if size is None or (size + e > batch_size and size > 61):
            expected_starts.append(i)
            size = 61
        size += e
    assert starts.tolist() == expected_starts
    sections = encode_sections(as_binary_column(values, "values"), None, np.array(ts), starts)
    ends = [*expected_starts[1:], len(sizes)]
    for sec, s, e in zip(sections, expected_starts, ends, strict=True):
        b = BatchBuilder(compression)
        for i in range(s, e):
            b.append(values[i], None, ts[i])
        assert section_builder(sec, compression).build(5) == b.build(5)


def test_numpy_columns() -> None:
    fixed = np.array([b"ab", b"c\x00", b""], dtype="S2")  # numpy drops trailing NULs, as tolist() does
    obj = np.array([b"k1", None, "é"], dtype=object)
    got = encode_batch_columnar(fixed, obj, [1, 2, 3])
    assert got == encode_batch_columns([1, 2, 3], [b"k1", None, "é".encode()], [b"ab", b"c", b""])


@pytest.mark.parametrize("bad", [np.zeros(3, dtype=np.int64), pa.array([1, 2, 3]), [1, 2, 3], b"abc"])
def test_non_binary_columns_are_refused(bad) -> None:
    with pytest.raises(TypeError):
        as_binary_column(bad, "values")


@given(st.lists(st.integers(-(1 << 63), (1 << 63) - 1), min_size=1, max_size=50))
def test_varints(values) -> None:
    mat, lens = varint_matrix(np.array(values, dtype=np.int64))
    for row, n, v in zip(mat, lens, values, strict=True):
        assert bytes(row[:n]) == encode_zigzag(v)


@given(st.lists(st.one_of(st.none(), st.binary(max_size=30)), min_size=1, max_size=80), st.integers(1, 50))
def test_murmur2_matches_kafkas_partitioner(keys, partitions) -> None:
    got = murmur2_partitions(as_binary_column(keys, "keys"), partitions).tolist()
    assert got == [-1 if k is None else (partition_for_key(k, partitions) if partitions > 1 else 0) for k in keys]


def test_murmur2_known_vector() -> None:
    # Kafka's DefaultPartitionerTest / Utils.murmur2 vectors (signed results, masked here)
    assert murmur2_partitions(pa.array([b"21"], pa.binary()), 1 << 31).tolist() == [partition_for_key(b"21", 1 << 31)]


def test_header_shapes() -> None:
    from shared.records.columnar_encode import encode_header_column

    as_pairs, _ = encode_header_column([[("a", b"1")], None], 2)
    as_structs, _ = encode_header_column(
        pa.array([[{"key": "a", "value": b"1"}], None],
                 pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))), 2)
    assert as_pairs is not None and as_pairs.equals(as_structs)
    # A bare string per header would be taken apart as a (key, value) pair of its characters: refused.
    with pytest.raises(ValueError, match="each header must be a"):
        encode_header_column([["ab"]], 1)
    with pytest.raises(ValueError, match="header keys must be str"):
        encode_header_column([[(b"k", b"v")]], 1)
    with pytest.raises(ValueError, match="must be a list<struct"):
        encode_header_column(pa.array(["k=v"]), 1)


def test_pandas_header_tuples_with_any_bytes() -> None:
    """pandas (key, value) tuples: pyarrow infers list<list<string>> even for values that are not UTF-8."""
    import pandas as pd

    from shared.records.columnar_encode import encode_header_column

    col = pa.table(pd.DataFrame({"headers": [[("h", b"\xff\x00")], []]})).column("headers")
    got, _ = encode_header_column(col, 2)
    want, _ = encode_header_column([[("h", b"\xff\x00")], None], 2)
    assert got is not None and got.equals(want)
    not_utf8 = pa.array([[[b"\xff", b"v"]]], pa.list_(pa.list_(pa.binary()))).cast(
        pa.list_(pa.list_(pa.string())), safe=False)
    with pytest.raises(ValueError, match="header keys must be UTF-8"):
        encode_header_column(not_utf8, 1)
