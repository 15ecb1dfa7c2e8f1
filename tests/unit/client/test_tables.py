"""``shared.client.tables`` without a cluster: rows with a timestamp column queue exactly the bytes
``send()`` with those timestamps would (cut to milliseconds), and a polled batch is cut at the range's end."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from shared.client.consumer import arrow_table_schema
from shared.client.tables import _keep, send_rows
from shared.types import TopicPartition
from tests.unit.client.test_send_batch import queued, shut, stub_producer


@pytest.mark.parametrize("unit", ["s", "ms", "us", "ns", "int"])
def test_timestamp_column_gives_the_bytes_of_send_with_those_timestamps(unit: str) -> None:
    a, b = stub_producer(3, batch_size=4000), stub_producer(3, batch_size=4000)
    try:
        n = 150
        base = dt.datetime(2026, 12, 7, 6, 0, 0, tzinfo=dt.UTC)
        stamps = [base + dt.timedelta(milliseconds=7 * i, microseconds=123) for i in range(n)]
        ms = [int(t.timestamp() * 1000) for t in stamps]
        if unit == "s":
            ms = [m // 1000 * 1000 for m in ms]
        col = (pa.array(ms, pa.int64()) if unit == "int"
               else pa.array(stamps, pa.timestamp("us", "UTC")).cast(pa.timestamp(unit, "UTC"), safe=False))
        keys = [b"k%d" % (i % 11) for i in range(n)]
        values = [b"v" * (i % 30) for i in range(n)]
        count, futures = send_rows(b, "t", [pa.RecordBatch.from_pydict({"key": keys, "value": values,
                                                                        "timestamp": col})], timestamps=True)
        assert count == n and futures
        for k, v, m in zip(keys, values, ms, strict=True):
            a.send("t", v, key=k, timestamp=m)
        assert queued(a) == queued(b)
    finally:
        shut(a)
        shut(b)


def test_a_bad_timestamp_column_is_refused() -> None:
    b = stub_producer(1)
    try:
        with pytest.raises(ValueError, match="timestamp column"):
            send_rows(b, "t", [pa.RecordBatch.from_pydict({"value": [b"v"], "timestamp": [1.5]})], timestamps=True)
    finally:
        shut(b)


def test_a_polled_batch_is_cut_at_the_end_offset() -> None:
    schema = arrow_table_schema()

    def batch(partition: int, offsets: list[int]) -> pa.RecordBatch:
        n = len(offsets)
        return pa.RecordBatch.from_pydict({
            "key": [None] * n, "value": [b"x"] * n, "topic": ["t"] * n, "partition": [partition] * n,
            "offset": offsets, "timestamp": [0] * n, "timestampType": [0] * n, "headers": [[]] * n}, schema=schema)

    tps = [TopicPartition("t", 0), TopicPartition("t", 1)]
    chunks: dict[TopicPartition, list[pa.RecordBatch]] = {tp: [] for tp in tps}
    ends = {tps[0]: 13, tps[1]: 100}
    _keep(batch(0, [10, 11, 12, 14, 15]), chunks, ends, "t")  # a compacted gap at 13: cut before 14
    _keep(batch(1, [5, 6]), chunks, ends, "t")
    _keep(batch(0, [16]), chunks, ends, "t")  # wholly past the end: nothing
    _keep(batch(1, []), chunks, ends, "t")
    assert [b.column("offset").to_pylist() for b in chunks[tps[0]]] == [[10, 11, 12]]
    assert [b.column("offset").to_pylist() for b in chunks[tps[1]]] == [[5, 6]]
