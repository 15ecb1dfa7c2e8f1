"""The tidelog PySpark source and sink with real Spark (local[2], loopback) against a real cluster."""

from __future__ import annotations

import json
import os
import time
import uuid

import pytest

from pipelines.jobs.clicks_per_minute import build_query
from pipelines.jobs.export_parquet import export
from pipelines.jobs.generate_clicks import generate
from pipelines.spark import local_session
from shared.client import Consumer, Producer, TopicPartition
from tests.conftest import wait_for


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


@pytest.fixture(scope="session")
def spark():
    """One local Spark for the run (test_spark_transactions.py imports this fixture)."""
    session = local_session("tidelog-tests")
    yield session
    session.stop()


def produce(bootstrap: str, topic: str, n: int, start: int = 0, partitions: int | None = None, **kw) -> dict[str, tuple]:
    """Send n records; return value -> (partition, offset, key, headers)."""
    out = {}
    with Producer(bootstrap, linger_ms=2, **kw) as p:
        futs = []
        for i in range(start, start + n):
            value = f"v{i}".encode()
            key = None if i % 5 == 0 else f"k{i % 11}".encode()
            headers = [("i", str(i).encode())] if i % 2 else None
            futs.append((value, key, headers, p.send(topic, value, key=key, headers=headers,
                                                     partition=(i % partitions) if partitions else None)))
        for value, key, headers, f in futs:
            md = f.get(30)
            out[value.decode()] = (md.partition, md.offset, key, headers)
    return out


def read(spark, bootstrap: str, **options):
    r = spark.read.format("tidelog").option("bootstrap.servers", bootstrap)
    for k, v in options.items():
        r = r.option(k, v if isinstance(v, str) else json.dumps(v))
    return r.load()


def test_batch_read_equals_what_was_produced(env, spark) -> None:
    _, bootstrap, admin = env
    topic = unique("sb")
    admin.create_topic(topic, partitions=3)
    sent = produce(bootstrap, topic, 3000)
    df = read(spark, bootstrap, subscribe=topic, includeHeaders="true")
    assert [f.name for f in df.schema.fields] == ["key", "value", "topic", "partition", "offset", "timestamp",
                                                  "timestampType", "headers"]
    rows = df.collect()
    assert len(rows) == 3000
    for r in rows:
        part, off, key, headers = sent[r.value.decode()]
        assert (r.topic, r.partition, r.offset) == (topic, part, off)
        assert r.key == key
        assert [(h.key, bytes(h.value)) for h in r.headers] == (headers or [])
        assert r.timestampType == 0 and r.timestamp is not None
    # without headers the column is absent, as in Spark's Kafka source
    assert "headers" not in read(spark, bootstrap, subscribe=topic).columns
    # minPartitions splits ranges: same rows
    split = read(spark, bootstrap, subscribe=topic, minPartitions="7")
    assert split.rdd.getNumPartitions() >= 7 and split.count() == 3000


def test_offsets_patterns_assign_and_timestamps(env, spark) -> None:
    _, bootstrap, admin = env
    prefix = unique("pat")
    for i in range(2):
        admin.create_topic(f"{prefix}-{i}", partitions=2)
        produce(bootstrap, f"{prefix}-{i}", 200, partitions=2)
    assert read(spark, bootstrap, subscribePattern=f"{prefix}-.*").count() == 400
    t0 = f"{prefix}-0"
    assert read(spark, bootstrap, assign={t0: [1]}).count() == 100
    df = read(spark, bootstrap, subscribe=t0, startingOffsets={t0: {"0": 10, "1": -2}},
              endingOffsets={t0: {"0": 20, "1": -1}})
    got = sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())
    assert got == [(0, o) for o in range(10, 20)] + [(1, o) for o in range(100)]
    assert read(spark, bootstrap, subscribe=t0, startingOffsets="latest").count() == 0
    # by timestamp: records sent with explicit timestamps
    topic = unique("ts")
    admin.create_topic(topic, partitions=1)
    with Producer(bootstrap) as p:
        for i in range(10):
            p.send(topic, f"t{i}".encode(), timestamp=1_000_000 + i * 1000)
    rows = read(spark, bootstrap, subscribe=topic, startingTimestamp="1004500").select("offset").collect()
    assert sorted(r.offset for r in rows) == [5, 6, 7, 8, 9]


def test_bad_options_fail_clearly(env, spark) -> None:
    _, bootstrap, _ = env
    with pytest.raises(Exception, match="bootstrap.servers is required"):
        spark.read.format("tidelog").option("subscribe", "x").load().collect()
    with pytest.raises(Exception, match="exactly one of subscribe, subscribePattern or assign"):
        read(spark, bootstrap, subscribe="x", assign={"x": [0]}).collect()
    with pytest.raises(Exception, match="startingOffsets must be earliest, latest or JSON"):
        read(spark, bootstrap, subscribe="x", startingOffsets="yesterday").collect()


def _stream_to_parquet(spark, bootstrap: str, topic: str, out: str, ck: str, **options) -> int:
    r = (spark.readStream.format("tidelog").option("bootstrap.servers", bootstrap).option("subscribe", topic)
         .option("startingOffsets", "earliest"))
    for k, v in options.items():
        r = r.option(k, v)
    q = (r.load().selectExpr("CAST(value AS STRING) AS v", "partition", "offset")
         .writeStream.format("parquet").option("path", out).option("checkpointLocation", ck)
         .trigger(availableNow=True).start())
    q.awaitTermination(180)
    return len([p for p in q.recentProgress if p["numInputRows"] > 0])


def test_streaming_available_now_exactly_once_across_restarts(env, spark, tmp_path) -> None:
    _, bootstrap, admin = env
    topic = unique("ss")
    admin.create_topic(topic, partitions=2)
    produce(bootstrap, topic, 5000)
    out, ck = str(tmp_path / "out"), str(tmp_path / "ck")
    batches = _stream_to_parquet(spark, bootstrap, topic, out, ck, maxOffsetsPerTrigger="1500")
    assert batches >= 4  # 5000 rows at most 1500 per trigger
    assert spark.read.parquet(out).count() == 5000
    # stopped; more data arrives, including on a partition added meanwhile
    admin.create_partitions(topic, 3)
    time.sleep(1)
    produce(bootstrap, topic, 1500, start=5000, partitions=3)
    _stream_to_parquet(spark, bootstrap, topic, out, ck, maxOffsetsPerTrigger="1500")
    df = spark.read.parquet(out)
    values = [r.v for r in df.select("v").collect()]
    assert len(values) == 6500 and len(set(values)) == 6500, "every record exactly once"
    assert {r.partition for r in df.select("partition").distinct().collect()} == {0, 1, 2}
    assert _stream_to_parquet(spark, bootstrap, topic, out, ck) == 0  # nothing new: no data batch


def _wait_log_start(bootstrap: str, topic: str, above: int) -> int:
    tp = TopicPartition(topic, 0)
    with Consumer(bootstrap) as c:
        c.assign([tp])
        return wait_for(lambda: (s := c.beginning_offsets([tp])[tp]) > above and s, 30, what="retention")


def test_fail_on_data_loss(env, spark, tmp_path) -> None:
    _, bootstrap, admin = env
    topic = unique("loss")
    admin.create_topic(topic, partitions=1, configs={"segment.bytes": 2000})
    produce(bootstrap, topic, 300, partitions=1, batch_size=512)  # batches within segment.bytes, as Kafka requires
    out, ck = str(tmp_path / "out"), str(tmp_path / "ck")
    _stream_to_parquet(spark, bootstrap, topic, out, ck)  # the checkpoint now ends at 300
    produce(bootstrap, topic, 300, start=300, partitions=1, batch_size=512)  # many small segments
    admin.alter_configs(topic, {"retention.bytes": 3000})  # brokers delete old segments within a second
    start = _wait_log_start(bootstrap, topic, 300)
    # batch: asking for deleted offsets
    with pytest.raises(Exception, match="failOnDataLoss"):
        read(spark, bootstrap, subscribe=topic, startingOffsets={topic: {"0": 0}}).collect()
    lenient = read(spark, bootstrap, subscribe=topic, startingOffsets={topic: {"0": 0}}, failOnDataLoss="false")
    assert sorted(r.offset for r in lenient.select("offset").collect())[0] >= start
    # streaming: the checkpoint's next offsets (300...) are gone
    with pytest.raises(Exception, match="failOnDataLoss"):
        _stream_to_parquet(spark, bootstrap, topic, out, ck)
    _stream_to_parquet(spark, bootstrap, topic, out, ck, failOnDataLoss="false")
    offsets = sorted(r.offset for r in spark.read.parquet(out).select("offset").collect())
    assert offsets[:300] == list(range(300)) and offsets[300] >= start and offsets[-1] == 599


def test_writes_land_in_topics(env, spark, tmp_path) -> None:
    _, bootstrap, admin = env
    target, other = unique("w"), unique("w2")
    admin.create_topic(target, partitions=2)
    admin.create_topic(other, partitions=1)
    df = spark.createDataFrame([(f"k{i}", f"v{i}", other if i % 10 == 0 else target) for i in range(1000)],
                               "key string, value string, topic string")
    df.write.format("tidelog").option("bootstrap.servers", bootstrap).mode("append").save()  # topic column
    got = read(spark, bootstrap, subscribe=target).selectExpr("CAST(key AS STRING) k", "CAST(value AS STRING) v").collect()
    assert len(got) == 900 and all(r.v == "v" + r.k[1:] for r in got)
    assert read(spark, bootstrap, subscribe=other).count() == 100
    # streaming copy topic -> topic with writeStream.format("tidelog")
    copy = unique("copy")
    admin.create_topic(copy, partitions=1)
    q = (spark.readStream.format("tidelog").option("bootstrap.servers", bootstrap).option("subscribe", target)
         .option("startingOffsets", "earliest").load().select("key", "value")
         .writeStream.format("tidelog").option("bootstrap.servers", bootstrap).option("topic", copy)
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    q.awaitTermination(120)
    assert read(spark, bootstrap, subscribe=copy).count() == 900


def test_pipeline_jobs(env, spark, tmp_path) -> None:
    _, bootstrap, admin = env
    source, sink = unique("clicks"), unique("cpm")
    admin.create_topic(source, partitions=3)
    admin.create_topic(sink, partitions=3)
    events = generate(bootstrap, source, 3000, users=20, minutes=4)
    q = build_query(spark, bootstrap, source, sink, str(tmp_path / "ck"), available_now=True)
    q.awaitTermination(180)
    rows = read(spark, bootstrap, subscribe=sink).selectExpr("CAST(value AS STRING) v", "offset", "partition").collect()
    latest: dict[tuple[str, str], int] = {}
    for r in sorted(rows, key=lambda r: (r.partition, r.offset)):
        d = json.loads(r.v)
        latest[(d["user"], d["window_start"])] = d["clicks"]
    expected: dict[tuple[str, str], int] = {}
    for e in events:
        start = time.strftime("%Y-%m-%dT%H:%M:00Z", time.gmtime(e["ts"] // 1000))
        expected[(e["user"], start)] = expected.get((e["user"], start), 0) + 1
    assert latest == expected
    n = export(spark, bootstrap, source, str(tmp_path / "export.parquet"))
    assert n == 3000
    assert os.path.isdir(tmp_path / "export.parquet")


def test_streaming_commits_micro_batch_offsets_to_a_group(env, spark, tmp_path) -> None:
    """commitOffsetsToGroup: finished micro-batches' end offsets land in the group (lag tools see them)."""
    import httpx

    cluster, bootstrap, admin = env
    topic, group = unique("sg"), unique("spark-group")
    admin.create_topic(topic, partitions=2)
    produce(bootstrap, topic, 2000, partitions=2)
    out, ck = str(tmp_path / "out"), str(tmp_path / "ck")
    assert _stream_to_parquet(spark, bootstrap, topic, out, ck, maxOffsetsPerTrigger="1000",
                              commitOffsetsToGroup=group) >= 2
    # commit(end) runs once a batch is finished (Spark calls it lagging one batch): at least the
    # batches before the last are in the group, never more than was read.
    described = wait_for(lambda: (r := httpx.get(f"{cluster.rest}/v1/groups/{group}")).status_code == 200 and r.json(),
                         30, what="the group's offsets")
    committed = {p["partition"]: p["committed_offset"] for p in described["partitions"]}
    assert set(committed) == {0, 1} and 1000 <= sum(committed.values()) <= 2000, committed
