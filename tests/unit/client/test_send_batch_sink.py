"""The Spark sink's ``send_rows`` goes through ``send_batch``: a DataFrame's Arrow batch with topic,
partition and headers columns (Spark's Kafka schema) is queued as ``send()`` of each row would queue it."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pytest

from pipelines.tidelog_source.options import OptionError
from pipelines.tidelog_source.sink import send_rows
from shared.client.producer import Producer
from tests.unit.client.test_send_batch import queued, shut, stub_producer

HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


@pytest.fixture
def pair() -> Iterator[tuple[Producer, Producer]]:
    a, b = stub_producer(3, batch_size=2000), stub_producer(3, batch_size=2000)
    for p in (a, b):
        p._partition_counts["u"] = 2
    yield a, b
    shut(a)
    shut(b)


def test_rows_with_topic_partition_and_headers_columns(pair) -> None:
    a, b = pair
    n = 200
    rows = {
        "key": [None if i % 7 == 0 else f"k{i}".encode() for i in range(n)],
        "value": [f"value-{i}" for i in range(n)],  # a string column: sent as UTF-8
        "topic": ["t" if i % 3 else "u" for i in range(n)],
        "partition": [None if i % 2 else i % 2 for i in range(n)],
        "headers": [[{"key": "h", "value": str(i).encode()}] if i % 5 == 0 else None for i in range(n)],
    }
    batch = pa.RecordBatch.from_pydict(rows, schema=pa.schema([
        ("key", pa.binary()), ("value", pa.string()), ("topic", pa.string()), ("partition", pa.int32()),
        ("headers", HEADERS)]))
    count, futures = send_rows(b, None, iter([batch]))
    assert count == n
    # the same rows through send(), the topic's rows in order; null-key rows without a partition are
    # left out of the comparison (the sticky partitioner picks at random)
    assert all(f.record_count for f in futures)
    seen = sorted((f.topic_partition.topic, int(r)) for f in futures for r in f.rows)
    by_topic: dict[str, int] = {}
    for t, _ in seen:
        by_topic[t] = by_topic.get(t, 0) + 1
    assert by_topic == {"t": rows["topic"].count("t"), "u": rows["topic"].count("u")}
    keyed = {i for i in range(n) if rows["key"][i] is not None or rows["partition"][i] is not None}
    assert len(keyed) > n // 2
    for f in futures:
        topic = f.topic_partition.topic
        idx = [i for i in range(n) if rows["topic"][i] == topic]
        for r in f.rows:
            i = idx[int(r)]
            if i in keyed:
                fa = a.send(topic, rows["value"][i].encode(), key=rows["key"][i], partition=rows["partition"][i],
                            headers=[("h", str(i).encode())] if i % 5 == 0 else None)
                assert fa._result.tp == f.topic_partition


def test_same_bytes_as_send_for_one_topic(pair) -> None:
    a, b = pair
    n = 120
    keys = [f"key-{i}".encode() for i in range(n)]
    values = [bytes([i]) * (i % 40) for i in range(n)]
    batch = pa.RecordBatch.from_pydict({"key": keys, "value": values, "timestamp": list(range(n))})
    send_rows(b, "t", iter([batch]))
    for k, v in zip(keys, values, strict=True):
        a.send("t", v, key=k)
    qa, qb = queued(a), queued(b)
    assert qa.keys() == qb.keys()
    for p in qa:  # same records in the same batches (timestamps: the call's clock, so compare counts)
        assert [len(x) for x in qa[p]] == [len(x) for x in qb[p]]


def test_missing_columns_fail_clearly(pair) -> None:
    _, b = pair
    with pytest.raises(OptionError, match="value column"):
        send_rows(b, "t", iter([pa.RecordBatch.from_pydict({"key": [b"k"]})]))
    with pytest.raises(OptionError, match="topic"):
        send_rows(b, None, iter([pa.RecordBatch.from_pydict({"value": [b"v"]})]))
    with pytest.raises(OptionError, match="binary or string"):
        send_rows(b, "t", iter([pa.RecordBatch.from_pydict({"value": [1]})]))
