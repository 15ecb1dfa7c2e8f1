"""``read_arrow`` / ``write_arrow`` on the shared cluster: a pandas table written and read back in one call
each, copied to another topic as it is, read by ranges and times, under read_committed (an aborted and an
open transaction), and refused clearly when the input is wrong."""

from __future__ import annotations

import datetime as dt
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from shared.client import Consumer, Producer, TopicPartition, partition_for_key, read_arrow, write_arrow
from shared.client.consumer import arrow_table_schema
from shared.errors import (
    ErrorCode,
    OffsetOutOfRangeError,
    TidelogError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)


@pytest.fixture
def new_topic(env: Any) -> Iterator[Callable[..., str]]:
    """Makes topics for one test on the shared cluster; they are deleted after it."""
    admin = env[2]
    made: list[str] = []

    def make(partitions: int = 3) -> str:
        name = f"tables-{uuid.uuid4().hex[:8]}"
        admin.create_topic(name, partitions=partitions, replication_factor=1)
        made.append(name)
        return name

    yield make
    for name in made:
        admin.delete_topic(name)


def test_a_pandas_table_round_trips_and_copies(env: Any, new_topic: Callable[..., str]) -> None:
    _, bootstrap, admin = env
    src, dst = new_topic(), new_topic()
    n = 20_000
    stamp = pd.Timestamp("2026-01-02T03:04:05.678Z")
    df = pd.DataFrame({
        "key": [f"user-{i % 97}" for i in range(n)],
        "value": [f"order {i}".encode() for i in range(n)],
        "timestamp": [stamp + pd.Timedelta(milliseconds=i) for i in range(n)],
    })
    assert write_arrow(bootstrap, src, df, acks="all") == n

    table = read_arrow(bootstrap, src)
    assert table.schema == arrow_table_schema()
    assert table.num_rows == n
    part = table.column("partition").to_numpy()
    off = table.column("offset").to_numpy()
    assert np.all(np.diff(part) >= 0)  # by partition, then offset
    for p in range(3):
        assert off[part == p].tolist() == list(range(int((part == p).sum())))
    rows = table.select(["key", "value", "partition", "timestamp"]).to_pylist()
    assert sorted(r["value"] for r in rows) == sorted(df["value"])
    for r in rows[:500]:  # keyed rows land where send() puts them (murmur2)
        assert r["partition"] == partition_for_key(r["key"], 3)
    by_value = {r["value"]: r for r in rows}
    for i in (0, 1, n - 1):
        r = by_value[f"order {i}".encode()]
        assert r["key"] == f"user-{i % 97}".encode()
        assert r["timestamp"] == (stamp + pd.Timedelta(milliseconds=i)).to_pydatetime()

    # A table read_arrow returned goes back in as it is: keys, values, headers and timestamps kept.
    assert write_arrow(bootstrap, dst, table) == n
    copy = read_arrow(bootstrap, dst)
    cols = ["key", "value", "partition", "offset", "timestamp", "headers"]
    assert copy.select(cols).equals(table.select(cols))


def test_polars_and_duckdb_in_and_out(env: Any, new_topic: Callable[..., str]) -> None:
    """Polars frames and DuckDB relations go in through the Arrow PyCapsule interface (Polars in view
    layouts); the table read_arrow returns goes straight into either."""
    import duckdb
    import polars as pl

    _, bootstrap, _ = env
    topic = new_topic(partitions=2)
    frame = pl.DataFrame({"key": [f"k{i % 5}" for i in range(1000)], "value": [f"p{i}".encode() for i in range(1000)],
                          "headers": [[{"key": "src", "value": b"polars"}]] * 1000}
                         ).with_columns(pl.col("key").cast(pl.Categorical))
    assert write_arrow(bootstrap, topic, frame) == 1000
    relation = duckdb.sql("SELECT 'k' || (i % 5)::VARCHAR AS key, 'd' || i::VARCHAR AS value FROM range(500) t(i)")
    assert write_arrow(bootstrap, topic, relation) == 500

    back = pl.from_arrow(read_arrow(bootstrap, topic))
    assert isinstance(back, pl.DataFrame) and back.height == 1500
    assert back.filter(pl.col("value") == b"p7")["key"].to_list() == [b"k2"]
    db = duckdb.connect()
    db.register("records", read_arrow(bootstrap, topic))
    # the same key, the same partition, whichever library wrote it (murmur2, as send() does)
    per_key = db.sql("SELECT key, count(DISTINCT partition) AS parts, count(*) AS n FROM records GROUP BY key "
                         "ORDER BY key").fetchall()
    assert per_key == [(f"k{i}".encode(), 1, 300) for i in range(5)]
    headers = db.sql("SELECT headers[1].value AS v, count(*) FROM records GROUP BY v ORDER BY v NULLS FIRST").fetchall()
    assert headers == [(None, 500), (b"polars", 1000)]


def test_ranges_times_and_headers(env: Any, new_topic: Callable[..., str]) -> None:
    _, bootstrap, admin = env
    topic = new_topic(partitions=2)
    with Producer(bootstrap, linger_ms=2) as p:
        for i in range(100):
            p.send(topic, b"v%d" % i, partition=i % 2, timestamp=1_700_000_000_000 + i,
                   headers=[("n", b"%d" % i)] if i % 10 == 0 else None)
        p.flush()
    whole = read_arrow(bootstrap, topic)
    assert whole.column("partition").to_pylist() == [0] * 50 + [1] * 50
    assert whole.column("headers").to_pylist()[0] == [{"key": "n", "value": b"0"}]

    part = read_arrow(bootstrap, topic, partitions=[1], start={1: 10}, end={1: 20})
    assert part.column("offset").to_pylist() == list(range(10, 20))
    assert part.column("value").to_pylist() == [b"v%d" % (2 * o + 1) for o in range(10, 20)]
    # Partitions a bound does not name take its default (-2 earliest, -1 latest, as Spark's JSON offsets).
    mixed = read_arrow(bootstrap, topic, start={0: 45, 1: -2}, end={1: 3})
    assert [(r["partition"], r["offset"]) for r in mixed.select(["partition", "offset"]).to_pylist()] == \
        [(0, o) for o in range(45, 50)] + [(1, o) for o in range(3)]

    since = read_arrow(bootstrap, topic, start=dt.datetime.fromtimestamp(1_700_000_000.090, dt.UTC))
    assert sorted(since.column("value").to_pylist()) == sorted(b"v%d" % i for i in range(90, 100))
    naive_utc = dt.datetime(2023, 11, 14, 22, 13, 20, 90_000)  # naive: taken as UTC
    assert read_arrow(bootstrap, topic, start=naive_utc).num_rows == 10
    assert read_arrow(bootstrap, topic, end=dt.datetime.fromtimestamp(1_700_000_000.004, dt.UTC)).num_rows == 4

    empty = read_arrow(bootstrap, topic, start="latest")
    assert empty.num_rows == 0 and empty.schema == arrow_table_schema()
    assert read_arrow(bootstrap, topic, start={0: 30}, end={0: 30}, partitions=[0]).num_rows == 0

    # An end past what the log holds is waited for, up to timeout_ms.
    t0 = time.monotonic()
    with pytest.raises(TidelogError) as exc:
        read_arrow(bootstrap, topic, partitions=[0], end={0: 51}, timeout_ms=1500, request_timeout_ms=10_000)
    assert exc.value.code == ErrorCode.REQUEST_TIMED_OUT and "not read up to their end offset" in str(exc.value)
    assert time.monotonic() - t0 < 15


def test_read_committed_skips_aborted_and_stops_at_an_open_transaction(env: Any, new_topic: Callable[..., str]) -> None:
    _, bootstrap, admin = env
    topic = new_topic(partitions=1)
    tag = uuid.uuid4().hex[:6]
    with Producer(bootstrap, transactional_id=f"tables-a-{tag}", max_block_ms=30_000) as p:
        p.init_transactions()
        p.begin_transaction()
        p.send_batch(topic, [b"committed-%d" % i for i in range(50)])
        p.commit_transaction()
        p.begin_transaction()
        p.send_batch(topic, [b"aborted-%d" % i for i in range(30)])
        p.flush()
        p.abort_transaction()
        p.begin_transaction()
        p.send_batch(topic, [b"later-%d" % i for i in range(20)])
        p.commit_transaction()
    opened = Producer(bootstrap, transactional_id=f"tables-o-{tag}", max_block_ms=30_000)
    began = False
    try:
        opened.init_transactions()
        opened.begin_transaction()
        began = True
        [first] = opened.send_batch(topic, [b"open-%d" % i for i in range(10)])
        opened.flush()
        # commit_transaction() returns once the commit is decided; its markers follow. Wait for the last
        # stable offset to reach the open transaction, so "later" is committed for every reader.
        tp = TopicPartition(topic, 0)
        open_at = first.get(10).base_offset
        with Consumer(bootstrap, isolation_level="read_committed") as c:
            deadline = time.monotonic() + 20
            while c.end_offsets([tp])[tp] < open_at:
                assert time.monotonic() < deadline, "the committed transactions' markers never came"
                time.sleep(0.05)
        committed = read_arrow(bootstrap, topic, isolation_level="read_committed", timeout_ms=20_000)
        values = committed.column("value").to_pylist()
        assert values == [b"committed-%d" % i for i in range(50)] + [b"later-%d" % i for i in range(20)]
        everything = read_arrow(bootstrap, topic, timeout_ms=20_000)
        assert sum(v.startswith(b"aborted-") for v in everything.column("value").to_pylist()) == 30
        assert sum(v.startswith(b"open-") for v in everything.column("value").to_pylist()) == 10
    finally:
        if began:
            opened.abort_transaction()
        opened.close()


def test_bad_input_is_refused_clearly(env: Any, new_topic: Callable[..., str]) -> None:
    _, bootstrap, admin = env
    topic = new_topic(partitions=1)
    with pytest.raises(TopicExistsError):  # Admin raises the code's own class, as the README's snippets catch it
        admin.create_topic(topic)
    with pytest.raises(UnknownTopicOrPartitionError):
        read_arrow(bootstrap, f"missing-{uuid.uuid4().hex[:6]}", timeout_ms=3000)
    with pytest.raises(UnknownTopicOrPartitionError, match="no partition 4"):
        read_arrow(bootstrap, topic, partitions=[0, 4])
    with pytest.raises(ValueError, match="'earliest', 'latest'"):
        read_arrow(bootstrap, topic, start="beginning")
    with pytest.raises(TypeError, match="start must be"):
        read_arrow(bootstrap, topic, start=12)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="names partition 3"):
        read_arrow(bootstrap, topic, end={3: 10})
    with pytest.raises(ValueError, match=">= 0"):
        read_arrow(bootstrap, topic, start={0: -7})
    with pytest.raises(ValueError, match="without a consumer group"):
        read_arrow(bootstrap, topic, group_id="g")
    with pytest.raises(ValueError, match="value column"):
        write_arrow(bootstrap, topic, pa.table({"key": [b"k"]}))
    with pytest.raises(ValueError, match="binary or string"):
        write_arrow(bootstrap, topic, pa.table({"value": [1, 2]}))
    with pytest.raises(ValueError, match="timestamp column"):
        write_arrow(bootstrap, topic, pa.table({"value": [b"v"], "timestamp": ["yesterday"]}))
    with pytest.raises(ValueError, match="transactions"):
        write_arrow(bootstrap, topic, pa.table({"value": [b"v"]}), transactional_id="t")
    with pytest.raises(ValueError, match="ends before it starts: start 5, end 2"):
        read_arrow(bootstrap, topic, start={0: 5}, end={0: 2})
    with pytest.raises(ValueError, match="timeout_ms must be > 0"):
        read_arrow(bootstrap, topic, timeout_ms=0)
    with pytest.raises(ValueError, match="partitions must be a list of partition numbers"):
        read_arrow(bootstrap, topic, partitions=["zero"])
    with pytest.raises(ValueError, match="partitions must be a list of partition numbers"):
        read_arrow(bootstrap, topic, partitions="10")  # not partitions 1 and 0
    assert read_arrow(bootstrap, topic, partitions=0).num_rows == 0
    assert read_arrow(bootstrap, topic, partitions=["0"]).num_rows == 0  # "0" is partition 0
    with pytest.raises(ValueError, match="string partition|must hold integers"):
        write_arrow(bootstrap, topic, pa.table({"value": [b"v"], "partition": ["0"]}))
    with pytest.raises(UnknownTopicOrPartitionError):  # within ~10 s of metadata waits, whatever max_block_ms
        write_arrow(bootstrap, f"missing-{uuid.uuid4().hex[:6]}", pa.table({"value": [b"v"]}))
    assert read_arrow(bootstrap, topic).num_rows == 0  # nothing was written by the refused calls
    # A partition the topic does not have: refused at once (a copy keeps the source's partition numbers, and
    # waiting max_block_ms for the topic to grow would only delay the error) before any row is sent.
    t0 = time.monotonic()
    with pytest.raises(ValueError, match="partition 9 out of range.*drop the partition column"):
        write_arrow(bootstrap, topic, pa.table({"value": [b"a", b"b"], "partition": [0, 9]}))
    assert time.monotonic() - t0 < 30  # not the default max_block_ms of 60 s
    two_chunks = pa.concat_tables([pa.table({"value": [b"a"], "partition": [0]}),
                                   pa.table({"value": [b"b"], "partition": [-1]})])
    with pytest.raises(ValueError, match="partition -1 out of range"):  # checked for the whole table first
        write_arrow(bootstrap, topic, two_chunks)
    # Rows a later chunk makes bad are found before the first chunk goes (a read_arrow table has many chunks).
    with pytest.raises(ValueError, match="Invalid timestamp: -1"):
        write_arrow(bootstrap, topic, pa.concat_tables([pa.table({"value": [b"a"], "timestamp": [5]}),
                                                        pa.table({"value": [b"b"], "timestamp": [-1]})]))
    hdr = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    with pytest.raises(ValueError, match="header keys must be str"):
        write_arrow(bootstrap, topic, pa.concat_tables([
            pa.table({"value": [b"a"], "headers": pa.array([[{"key": "k", "value": b"v"}]], hdr)}),
            pa.table({"value": [b"b"], "headers": pa.array([[{"key": None, "value": b"v"}]], hdr)})]))
    with Consumer(bootstrap) as c:
        tp = TopicPartition(topic, 0)
        assert c.end_offsets([tp])[tp] == 0
    # pandas' shapes for partition numbers with a None (floats) and all None (a null column): taken
    assert write_arrow(bootstrap, topic, pd.DataFrame({"value": [b"x", b"y"], "partition": [0, None]})) == 2
    assert write_arrow(bootstrap, topic, pd.DataFrame({"value": [b"z"], "partition": [None]})) == 1
    assert read_arrow(bootstrap, topic).column("value").to_pylist() == [b"x", b"y", b"z"]
    with pytest.raises(ValueError, match="whole partition numbers"):
        write_arrow(bootstrap, topic, pd.DataFrame({"value": [b"x"], "partition": [0.5]}))


def test_records_deleted_under_a_read(env: Any, new_topic: Callable[..., str], monkeypatch: pytest.MonkeyPatch) -> None:
    """DeleteRecords on one of two partitions between the read's offset lookup and its first fetch: an
    "earliest" start moves on to the new log start (as a consumer with auto.offset.reset=earliest) and the
    other partition is read whole (the records a poll already took are returned before the error); an
    explicit start below the log start raises."""
    from tests.integration.kafka_util import KafkaWire

    cluster, bootstrap, admin = env
    topic = new_topic(partitions=2)
    with Producer(bootstrap, linger_ms=0) as p:
        for part in (0, 1):
            for i in range(100):
                p.send(topic, b"p%d-%d" % (part, i), partition=part)
        p.flush()
    leader = int(admin.describe_topic(topic)["partitions"][1]["leader"])

    def delete_below(offset: int) -> None:
        with KafkaWire(str(cluster.proc("broker", leader).info["kafka"]), timeout=30) as conn:
            r = conn.request(21, 2, {"topics": [{"name": topic, "partitions": [{"partition_index": 1,
                                                                                "offset": offset}]}],
                                     "timeout": 10_000})
        assert int(r.topics[0].partitions[0].error_code) == 0

    real_seek = Consumer.seek
    deleted: list[int] = []

    def seek_after_a_delete(self: Consumer, tp: TopicPartition, offset: int) -> None:
        if not deleted:  # the read looked its starts up already (0); now partition 1 starts at 60
            delete_below(60)
            deleted.append(offset)
        real_seek(self, tp, offset)

    monkeypatch.setattr(Consumer, "seek", seek_after_a_delete)
    table = read_arrow(bootstrap, topic, timeout_ms=30_000)
    monkeypatch.undo()
    assert deleted == [0]
    rows = list(zip(table.column("partition").to_pylist(), table.column("offset").to_pylist(), strict=True))
    assert rows == [(0, i) for i in range(100)] + [(1, i) for i in range(60, 100)]
    assert table.column("value").to_pylist()[100:] == [b"p1-%d" % i for i in range(60, 100)]
    with pytest.raises(OffsetOutOfRangeError):
        read_arrow(bootstrap, topic, partitions=[1], start={1: 10}, timeout_ms=30_000)
    assert read_arrow(bootstrap, topic, partitions=[1], start={1: 90}).num_rows == 10
