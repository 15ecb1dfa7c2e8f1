"""``shared.client.tables`` without a cluster: rows with a timestamp column queue exactly the bytes
``send()`` with those timestamps would (cut to milliseconds), and a polled batch is cut at the range's end."""

from __future__ import annotations

import datetime as dt
import json

import pyarrow as pa
import pytest

from shared.client.consumer import arrow_table_schema
from shared.client.tables import EARLIEST, LATEST, _earliest, _keep, _offsets, send_rows
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
            send_rows(b, "t", [pa.RecordBatch.from_pydict({"value": [b"v"], "timestamp": ["x"]})], timestamps=True)
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
    after = {tps[0]: 10, tps[1]: 5}
    ends = {tps[0]: 13, tps[1]: 100}
    _keep(batch(0, [8, 9, 10, 11, 12, 14, 15]), chunks, after, ends, "t")  # from 10; a gap at 13: cut before 14
    _keep(batch(1, [5, 6]), chunks, after, ends, "t")
    _keep(batch(1, [4, 5, 6, 7]), chunks, after, ends, "t")  # read again from before: nothing twice
    _keep(batch(0, [16]), chunks, after, ends, "t")  # wholly past the end: nothing
    _keep(batch(1, []), chunks, after, ends, "t")
    assert [b.column("offset").to_pylist() for b in chunks[tps[0]]] == [[10, 11, 12]]
    assert [b.column("offset").to_pylist() for b in chunks[tps[1]]] == [[5, 6], [7]]
    assert after == {tps[0]: 13, tps[1]: 8}


class _Offsets:
    """What ``_offsets`` asks of a consumer, answered from fixed tables (no broker: the rule only)."""

    def __init__(self) -> None:
        self.asked_times: dict[TopicPartition, int] = {}

    def beginning_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: 3 for tp in tps}

    def end_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: 50 for tp in tps}

    def offsets_for_times(self, times: dict[TopicPartition, int]) -> dict[TopicPartition, tuple[int, int] | None]:
        self.asked_times = times
        return {tp: (None if tp.partition == 1 else (20, ms)) for tp, ms in times.items()}


def test_range_bounds() -> None:
    c = _Offsets()
    tps = [TopicPartition("t", 0), TopicPartition("t", 1)]
    assert _offsets(c, tps, "earliest", EARLIEST, "start") == {tps[0]: 3, tps[1]: 3}
    assert _offsets(c, tps, "latest", LATEST, "end") == {tps[0]: 50, tps[1]: 50}
    # Spark's JSON offsets: string keys, -2 earliest, -1 latest; unnamed partitions take the default.
    assert _offsets(c, tps, json.loads('{"0": 7}'), EARLIEST, "start") == {tps[0]: 7, tps[1]: 3}
    assert _offsets(c, tps, {0: -1, 1: -2}, LATEST, "end") == {tps[0]: 50, tps[1]: 3}
    assert _earliest(json.loads('{"0": -2}'), 0) and _earliest({1: 4}, 0) and not _earliest({0: 4}, 0)
    # A time: the first offset at or after it, in whole milliseconds rounded up; none after it: the end.
    at = dt.datetime(2026, 12, 7, 6, 0, 0, 90_500, tzinfo=dt.UTC)
    assert _offsets(c, tps, at, EARLIEST, "start") == {tps[0]: 20, tps[1]: 50}
    assert set(c.asked_times.values()) == {int(at.replace(microsecond=91_000).timestamp() * 1000)}
    _offsets(c, tps, at.replace(tzinfo=None, microsecond=90_000), EARLIEST, "start")  # naive: UTC
    assert set(c.asked_times.values()) == {int(at.replace(microsecond=90_000).timestamp() * 1000)}
    with pytest.raises(ValueError, match="partition 5"):
        _offsets(c, tps, {5: 1}, EARLIEST, "start")
    with pytest.raises(ValueError, match="partition numbers"):
        _offsets(c, tps, {"zero": 1}, EARLIEST, "start")
    with pytest.raises(ValueError, match=">= 0"):
        _offsets(c, tps, {0: -3}, EARLIEST, "start")
    with pytest.raises(TypeError):
        _offsets(c, tps, 5, EARLIEST, "start")  # type: ignore[arg-type]


def test_pandas_shaped_columns_are_taken() -> None:
    """A category key column, fixed-size binary values and int timestamps as floats (pandas makes an int
    column with a None float) queue exactly the bytes send() would; a None timestamp is the send's time."""
    a, b = stub_producer(2, batch_size=4000), stub_producer(2, batch_size=4000)
    try:
        keys = [f"k{i % 3}" for i in range(12)]
        values = [b"%08d" % i for i in range(12)]
        stamps = [1_765_000_000_000 + i for i in range(12)]
        batch = pa.RecordBatch.from_pydict({
            "key": pa.array(keys).dictionary_encode(),
            "value": pa.array(values, pa.binary(8)),
            "timestamp": pa.array([float(t) for t in stamps])})
        send_rows(b, "t", [batch], timestamps=True)
        for k, v, t in zip(keys, values, stamps, strict=True):
            a.send("t", v, key=k.encode(), timestamp=t)
        assert queued(a) == queued(b)
        with_none = pa.RecordBatch.from_pydict({"value": [b"v", b"w"]}).append_column(
            "timestamp", pa.array([float("nan"), 5.0], from_pandas=True))
        assert send_rows(b, "t", [with_none], timestamps=True)[0] == 2  # NaN (pandas' None) is taken as no time
        with pytest.raises(ValueError, match="whole milliseconds"):
            send_rows(b, "t", [pa.RecordBatch.from_pydict({"value": [b"v"], "timestamp": [1.5]})], timestamps=True)
    finally:
        shut(a)
        shut(b)
