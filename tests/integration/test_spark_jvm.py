"""``format("tidelog-jvm")``: the JVM batch reader (pipelines/jvm) with real Spark (the session of
test_spark.py) against the shared cluster's Kafka listeners. It must give exactly the rows the Python
``tidelog`` source gives, for every batch shape the brokers store."""

from __future__ import annotations

import glob
import json
import os
import signal

import pytest

from shared.client import Producer
from shared.client.partitioner import partition_for_key
from tests.conftest import wait_for
from tests.integration.kafka_util import confluent_read, kafka_bootstrap
from tests.integration.test_spark import _wait_log_start, produce, read, spark, unique  # noqa: F401


def jvm(spark, cluster, **options):  # noqa: F811
    r = spark.read.format("tidelog-jvm").option("kafka.bootstrap.servers", kafka_bootstrap(cluster))
    for k, v in options.items():
        r = r.option(k, v if isinstance(v, str) else json.dumps(v))
    return r.load()


def rows(df) -> list[tuple]:
    """Every column, comparable across the two readers (headers as (key, bytes) tuples)."""
    out = []
    for r in df.collect():
        d = r.asDict()
        if "headers" in d:
            d["headers"] = tuple((h.key, bytes(h.value) if h.value is not None else None) for h in d["headers"])
        out.append(tuple(d[c] for c in df.columns))
    return sorted(out, key=lambda t: (t[2], t[3], t[4]))


def test_the_jvm_reader_gives_the_python_sources_rows(env, spark) -> None:  # noqa: F811
    cluster, bootstrap, admin = env
    topic = unique("jv")
    admin.create_topic(topic, partitions=3)
    produce(bootstrap, topic, 3000)  # null keys, headers on odd records, three partitions
    with Producer(bootstrap) as p:  # a null value (a tombstone) and an empty one
        p.send(topic, None, key=b"tomb", partition=0)
        p.send(topic, b"", key=b"empty", partition=0).get(30)
    for headers in ("true", "false"):
        got = jvm(spark, cluster, subscribe=topic, includeHeaders=headers)
        want = read(spark, bootstrap, subscribe=topic, includeHeaders=headers)
        assert got.schema == want.schema
        assert len(got_rows := rows(got)) == 3002
        assert got_rows == rows(want)
    # offsets JSON (-2 earliest, -1 latest), assign, a pattern, and minPartitions splitting the ranges
    start, end = {topic: {"0": 10, "1": -2, "2": 5}}, {topic: {"0": -1, "1": 100, "2": 7}}
    got = jvm(spark, cluster, assign={topic: [0, 1, 2]}, startingOffsets=start, endingOffsets=end)
    assert rows(got) == rows(read(spark, bootstrap, assign={topic: [0, 1, 2]}, startingOffsets=start,
                                  endingOffsets=end))
    assert {r.partition for r in got.select("partition").collect()} == {0, 1, 2}
    split = jvm(spark, cluster, subscribePattern=f"{topic}$", minPartitions="7")
    assert split.rdd.getNumPartitions() == 7 and rows(split) == rows(jvm(spark, cluster, subscribe=topic))
    # a topic that does not exist is empty, as with the Python source
    nothing = unique("nothing")
    assert jvm(spark, cluster, subscribe=nothing).count() == 0
    assert nothing not in admin.list_topics()  # reading never creates a topic (Metadata v4, no auto-creation)


def test_the_jvm_reader_streams(env, spark, tmp_path) -> None:  # noqa: F811
    """readStream.format("tidelog-jvm"): micro-batches of at most maxOffsetsPerTrigger, Trigger.AvailableNow,
    a restart from the checkpoint reading only what came after, and a recreated topic as data loss."""
    cluster, bootstrap, admin = env
    topic = unique("jsr")
    admin.create_topic(topic, partitions=2)
    produce(bootstrap, topic, 300)
    out, ck = str(tmp_path / "out"), str(tmp_path / "ck")

    def run(**options: str):
        r = (spark.readStream.format("tidelog-jvm").option("kafka.bootstrap.servers", kafka_bootstrap(cluster))
             .option("subscribe", topic).option("startingOffsets", "earliest"))
        for k, v in options.items():
            r = r.option(k, v)
        q = (r.load().selectExpr("CAST(value AS STRING) v", "partition", "offset").writeStream.format("parquet")
             .option("path", out).option("checkpointLocation", ck).trigger(availableNow=True).start())
        q.awaitTermination(120)
        return q

    q = run(maxOffsetsPerTrigger="100")
    assert q.exception() is None
    assert [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]] == [100, 100, 100]
    produce(bootstrap, topic, 200, start=300)
    assert run().exception() is None
    assert sorted(r.v for r in spark.read.parquet(out).collect()) == sorted(f"v{i}" for i in range(500))
    # the topic deleted and created again: its offsets went back
    admin.delete_topic(topic)
    wait_for(lambda: topic not in admin.list_topics(), 30, what="the topic deleted")
    wait_for(lambda: admin.create_topic(topic, partitions=2) or True, 30, what="the topic created again")
    produce(bootstrap, topic, 20, start=1000)
    with pytest.raises(Exception, match=r"the offset of .* went from .* failOnDataLoss=false"):
        run()
    assert run(failOnDataLoss="false").exception() is None
    assert sum(1 for r in spark.read.parquet(out).collect() if int(r.v[1:]) >= 1000) == 20


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches(env, spark, codec) -> None:  # noqa: F811
    cluster, bootstrap, admin = env
    topic = unique(f"jz-{codec}")
    admin.create_topic(topic, partitions=1)
    produce(bootstrap, topic, 500, compression_type=codec, batch_size=4096)
    got = jvm(spark, cluster, subscribe=topic, includeHeaders="true")
    assert rows(got) == rows(read(spark, bootstrap, subscribe=topic, includeHeaders="true"))
    assert got.count() == 500


def test_read_committed_leaves_out_aborted_transactions(env, spark) -> None:  # noqa: F811
    cluster, bootstrap, admin = env
    topic = unique("jrc")
    admin.create_topic(topic, partitions=2)
    with Producer(bootstrap) as plain:
        for i in range(10):
            plain.send(topic, f"plain{i}".encode(), partition=i % 2)
    with Producer(bootstrap, transactional_id=unique("jrc-t")) as txn:
        txn.init_transactions()
        for name, commit in (("a", True), ("b", False), ("c", True)):
            txn.begin_transaction()
            for i in range(20):
                txn.send(topic, f"{name}{i}".encode(), partition=i % 2)
            txn.flush()
            if commit:
                txn.commit_transaction()
            else:
                txn.abort_transaction()

    def values(df) -> list[str]:
        return sorted(r.v for r in df.selectExpr("CAST(value AS STRING) v").collect())

    committed = jvm(spark, cluster, subscribe=topic, **{"kafka.isolation.level": "read_committed"})
    assert values(committed) == sorted([f"plain{i}" for i in range(10)] + [f"{n}{i}" for n in "ac" for i in range(20)])
    assert rows(committed) == rows(read(spark, bootstrap, subscribe=topic,
                                        **{"kafka.isolation.level": "read_committed"}))
    assert len(values(jvm(spark, cluster, subscribe=topic))) == 70  # read_uncommitted: the aborted ones too


def test_bad_options_fail_clearly(env, spark) -> None:  # noqa: F811
    cluster, _, admin = env
    topic = unique("jbad")
    admin.create_topic(topic, partitions=1)
    cases = [
        ({"subscribe": topic, "kafka.bootstrap.servers": ""}, "kafka.bootstrap.servers is required"),
        ({}, "exactly one of subscribe"),
        ({"subscribe": topic, "assign": json.dumps({topic: [0]})}, "exactly one of subscribe"),
        ({"subscribe": topic, "startingOffsets": "latest"}, "cannot be latest"),
        ({"subscribe": topic, "endingOffsets": "earliest"}, "cannot be earliest"),
        ({"subscribe": topic, "startingOffsets": "{nope"}, "startingOffsets must be earliest, latest or JSON"),
        ({"subscribe": topic, "startingOffsets": json.dumps({topic: {"0": "x"}})}, "bad offset"),
        ({"subscribe": topic, "startingOffsets": json.dumps({topic: {"1": 0}})}, "has no offset for"),
        ({"assign": "[1]"}, "option assign must be JSON"),
        ({"subscribePattern": "(", }, "not a valid regex"),
        ({"subscribe": topic, "minPartitions": "0"}, "minPartitions must be a positive integer"),
        ({"subscribe": topic, "kafka.isolation.level": "read_dirty"}, "must be read_uncommitted or read_committed"),
        ({"subscribe": topic, "includeHeaders": "yes"}, "includeHeaders must be true or false"),
        ({"subscribe": topic, "kafka.security.protocol": "SASL_SSL"}, "needs the cluster.s CA certificate"),
        ({"subscribe": topic, "kafka.security.protocol": "SASL_PLAINTEXT"}, "use SASL_SSL"),
        ({"subscribe": topic, "kafka.ssl.truststore.location": "/x.jks"}, "a Java keystore setting"),
        ({"subscribe": topic, "startingTimestamp": "0"}, "option startingTimestamp is not supported by format"),
        ({"subscribe": topic, "endingOffsets": json.dumps({topic: {"0": 10**6}})}, "outside its log"),
        ({"assign": json.dumps({topic: [5]})}, "has partitions 0 to 0"),
    ]
    for options, message in cases:
        with pytest.raises(Exception, match=message):
            jvm(spark, cluster, **options).collect()
    with pytest.raises(Exception, match="endingOffsets is for batch queries only"):
        (spark.readStream.format("tidelog-jvm").option("kafka.bootstrap.servers", kafka_bootstrap(cluster))
         .option("subscribe", topic).option("endingOffsets", "latest").load().writeStream.format("noop").start()
         .processAllAvailable())
    with pytest.raises(Exception, match="maxOffsetsPerTrigger is for streaming queries only"):
        jvm(spark, cluster, subscribe=topic, maxOffsetsPerTrigger="10").collect()
    with pytest.raises(Exception, match="maxOffsetsPerTrigger must be a positive integer"):
        jvm(spark, cluster, subscribe=topic, maxOffsetsPerTrigger="0").collect()
    # planning asks again for up to kafka.request.timeout.ms (a leader may be moving): 2 s here
    nobody = (spark.read.format("tidelog-jvm").option("kafka.bootstrap.servers", "127.0.0.1:1")
              .option("kafka.request.timeout.ms", "2000").option("subscribe", topic))
    with pytest.raises(Exception, match="planning the read"):
        nobody.load().collect()
    grpc = (spark.read.format("tidelog-jvm").option("kafka.bootstrap.servers", env[1].split(",")[0])
            .option("kafka.request.timeout.ms", "2000"))
    with pytest.raises(Exception, match="is it a broker's Kafka listener"):  # the gRPC port, a common slip
        grpc.option("subscribe", topic).load().collect()


def test_data_loss_and_a_corrupt_batch(env, spark) -> None:  # noqa: F811
    cluster, bootstrap, admin = env
    topic = unique("jloss")
    admin.create_topic(topic, partitions=1, replication_factor=1, configs={"segment.bytes": 2000})
    produce(bootstrap, topic, 600, partitions=1, batch_size=512)
    admin.alter_configs(topic, {"retention.bytes": 3000})  # old segments go within a second
    start = _wait_log_start(bootstrap, topic, 300)
    with pytest.raises(Exception, match="OFFSET_OUT_OF_RANGE.*failOnDataLoss"):
        jvm(spark, cluster, subscribe=topic, startingOffsets={topic: {"0": 0}}).collect()
    lenient = jvm(spark, cluster, subscribe=topic, startingOffsets={topic: {"0": 0}}, failOnDataLoss="false")
    offsets = sorted(r.offset for r in lenient.select("offset").collect())
    assert offsets[0] >= start and offsets[-1] == 599

    # one flipped byte in a stored record: the reader names the batch instead of returning wrong data
    bad = unique("jcrc")
    admin.create_topic(bad, partitions=1, replication_factor=1)
    produce(bootstrap, bad, 50, partitions=1)
    [log] = glob.glob(os.path.join(cluster.lc.data_dir, "broker-*", "**", f"{bad}-0", "*.log"), recursive=True)
    with open(log, "r+b") as f:
        f.seek(61 + 8)  # inside the first record of the first batch
        byte = f.read(1)
        f.seek(61 + 8)
        f.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(Exception, match=f"CRC mismatch in the batch of {bad}-0 at offset 0"):
        jvm(spark, cluster, subscribe=bad).collect()


def test_a_leader_killed_between_planning_and_reading(make_cluster, spark) -> None:  # noqa: F811
    """kill -9 of a partition's leader after the query was planned: its task finds the new leader (Metadata,
    then a retried fetch) and the read returns every acknowledged record exactly once."""
    from shared.client import Admin

    cluster = make_cluster(brokers=3)
    bootstrap = ",".join(p.address for p in cluster.procs("broker"))
    topic = unique("jkill")
    with Admin(bootstrap) as admin:
        admin.create_topic(topic, partitions=2, replication_factor=3, configs={"min.insync.replicas": "2"})
        sent = produce(bootstrap, topic, 4000, partitions=2, acks="all")
        leader = admin.describe_topic(topic)["partitions"][0]["leader"]
    servers = ",".join(p.info["kafka"] for p in cluster.procs("broker") if str(p.id) != str(leader))
    rdd = (spark.read.format("tidelog-jvm").option("kafka.bootstrap.servers", servers).option("subscribe", topic)
           .load().selectExpr("CAST(value AS STRING) v", "partition", "offset").rdd)  # planned here
    os.kill(cluster.proc("broker", leader).pid, 9)
    got = rdd.map(lambda r: (r.v, r.partition, r.offset)).collect()
    assert sorted(got) == sorted((v, part, off) for v, (part, off, _, _) in sent.items())


# -- the writer ------------------------------------------------------------------------------------------------


def jvm_write(df, cluster, **options) -> None:
    w = df.write.format("tidelog-jvm").option("kafka.bootstrap.servers", kafka_bootstrap(cluster)).mode("append")
    for k, v in options.items():
        w = w.option(k, v)
    w.save()


def test_the_jvm_writer_round_trip(env, spark) -> None:  # noqa: F811
    """Keys (string or binary), values, nulls, headers, a partition column and a topic column: what the Python
    source reads back is what was written, keyed rows sit where Producer.send puts them (murmur2)."""
    cluster, bootstrap, admin = env
    a, b = unique("jwa"), unique("jwb")
    for t in (a, b):
        admin.create_topic(t, partitions=3)
    rows = []
    for i in range(3000):
        key = None if i % 7 == 0 else f"k{i % 101}"
        value = None if i % 250 == 3 else ("" if i % 250 == 4 else f"v{i}")
        headers = [("i", str(i).encode()), ("none", None)] if i % 2 else []
        rows.append((key, value, headers, 2 if i % 13 == 0 else None, b if i % 5 == 0 else a, i))
    df = spark.createDataFrame(rows, "key string, value string, headers array<struct<key:string,value:binary>>, "
                                     "partition int, topic string, ignored int")
    jvm_write(df, cluster)  # each row to its topic column's topic
    got = {}
    for t in (a, b):
        for r in read(spark, bootstrap, subscribe=t, includeHeaders="true").collect():
            got[(t, r.offset, r.partition)] = r
    assert len(got) == 3000
    by_value = {}
    for (t, _, part), r in got.items():
        v = None if r.value is None else r.value.decode()
        by_value.setdefault(v, []).append((t, part, r))
    for key, value, headers, partition, topic, _ in rows:
        if value is None or value == "":
            continue
        [(t, part, r)] = by_value[value]
        assert t == topic
        assert (r.key.decode() if r.key is not None else None) == key
        assert [(h.key, None if h.value is None else bytes(h.value)) for h in r.headers] == headers
        if partition is not None:
            assert part == partition
    assert len(by_value[None]) == len([r for r in rows if r[1] is None])
    assert len(by_value[""]) == len([r for r in rows if r[1] == ""])
    # keyed rows without a partition column: the partition Kafka's default partitioner (and Producer.send) picks
    keyed = [(part, r.key) for placed in by_value.values() for _, part, r in placed
             if r.key is not None and (r.value is None or not r.value or rows[int(r.value[1:])][3] is None)]
    assert len(keyed) > 2000
    assert all(part == partition_for_key(key, 3) for part, key in keyed)
    # the topic option wins over a topic column, as in Spark's Kafka sink
    c = unique("jwc")
    admin.create_topic(c, partitions=1)
    jvm_write(spark.createDataFrame([(f"o{i}", b) for i in range(10)], "value string, topic string"), cluster, topic=c)
    assert jvm(spark, cluster, subscribe=c).count() == 10


def test_the_jvm_writer_bounds_its_open_batches(env, spark) -> None:  # noqa: F811
    """Past kafka.buffer.memory of open batches (many partitions, large batch.size) the largest is sent at
    once: every row still lands once, each partition's in order."""
    cluster, bootstrap, admin = env
    topic = unique("jwmem")
    admin.create_topic(topic, partitions=8)
    df = spark.range(20_000).selectExpr("CAST(id % 97 AS STRING) AS key", "CAST(id AS STRING) AS value")
    jvm_write(df.coalesce(1), cluster, topic=topic, **{"kafka.buffer.memory": "65536"})
    got = read(spark, bootstrap, subscribe=topic).selectExpr("partition", "offset", "CAST(value AS STRING) v").collect()
    assert sorted(int(r.v) for r in got) == list(range(20_000))
    for p in range(8):  # one task wrote them all: each partition holds its rows in the order they were written
        ids = [int(r.v) for r in sorted((r for r in got if r.partition == p), key=lambda r: r.offset)]
        assert ids == sorted(ids)


def test_the_jvm_writer_streams(env, spark, tmp_path) -> None:  # noqa: F811
    """writeStream.format("tidelog-jvm"): a micro-batch query copies a topic (Trigger.AvailableNow)."""
    cluster, bootstrap, admin = env
    src, dst = unique("jws-src"), unique("jws-dst")
    for t in (src, dst):
        admin.create_topic(t, partitions=2)
    produce(bootstrap, src, 500)
    query = (spark.readStream.format("tidelog").option("bootstrap.servers", bootstrap).option("subscribe", src)
             .option("startingOffsets", "earliest").option("includeHeaders", "true").load()
             .selectExpr("key", "value", "headers")
             .writeStream.format("tidelog-jvm").option("kafka.bootstrap.servers", kafka_bootstrap(cluster))
             .option("topic", dst).option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert query.exception() is None
    copied = jvm(spark, cluster, subscribe=dst, includeHeaders="true")
    original = jvm(spark, cluster, subscribe=src, includeHeaders="true")
    def content(df) -> list[tuple]:
        return sorted((r.key or b"", r.key is None, r.value, tuple(r.headers)) for r in df.collect())

    assert len(content(copied)) == 500 and content(copied) == content(original)


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_the_jvm_writer_compresses(env, spark, codec) -> None:  # noqa: F811
    """Each codec's batches are stored compressed (the log's first batch says so) and read back whole, by the
    tidelog source and by librdkafka (confluent-kafka), a client no one here wrote."""
    cluster, bootstrap, admin = env
    topic = unique(f"jwz-{codec}")
    admin.create_topic(topic, partitions=1, replication_factor=1)
    df = spark.createDataFrame([(f"k{i}", f"value {i} " * 20) for i in range(2000)], "key string, value string")
    jvm_write(df, cluster, topic=topic, **{"kafka.compression.type": codec, "kafka.batch.size": "16384"})
    got = sorted(r.v for r in read(spark, bootstrap, subscribe=topic).selectExpr("CAST(value AS STRING) v").collect())
    assert got == sorted(f"value {i} " * 20 for i in range(2000))
    [log] = glob.glob(os.path.join(cluster.lc.data_dir, "broker-*", "**", f"{topic}-0", "*.log"), recursive=True)
    with open(log, "rb") as f:
        head = f.read(61)
    codes = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
    assert int.from_bytes(head[21:23], "big") & 7 == codes[codec]
    by_librdkafka = confluent_read(kafka_bootstrap(cluster), topic, [0])
    assert sorted((r.rec.key, r.rec.value) for r in by_librdkafka) == sorted(
        (f"k{i}".encode(), (f"value {i} " * 20).encode()) for i in range(2000))


def test_the_jvm_writer_refuses_clearly(env, spark) -> None:  # noqa: F811
    cluster, _, admin = env
    topic = unique("jwbad")
    admin.create_topic(topic, partitions=1, configs={"max.message.bytes": "10000"})
    ok = spark.createDataFrame([("k", "v")], "key string, value string")
    cases = [
        (spark.createDataFrame([("k",)], "key string"), {"topic": topic}, "needs a value column"),
        (spark.createDataFrame([(1, "v")], "key int, value string"), {"topic": topic}, "key column must be binary or string"),
        (spark.createDataFrame([("v", 1)], "value string, topic int"), {}, "topic column must be a string"),
        (spark.createDataFrame([("v", "0")], "value string, partition string"), {"topic": topic},
         "partition column must be an int"),
        (ok, {}, "no topic"),
        (ok, {"topic": topic, "kafka.acks": "some"}, "kafka.acks must be"),
        (ok, {"topic": topic, "kafka.compression.type": "brotli"}, "compression.type must be"),
        (ok, {"topic": topic, "kafka.batch.size": "-1"}, "batch.size must be a positive integer"),
        (ok, {"topic": topic, "transactional.id.prefix": "x"}, "writes exactly once"),
        (ok, {"topic": topic, "kafka.security.protocol": "SSL"}, "needs the cluster.s CA certificate"),
        (spark.createDataFrame([("v", 5)], "value string, partition int"), {"topic": topic}, "out of range"),
        (spark.createDataFrame([("x" * 20000,)], "value string"), {"topic": topic}, "MESSAGE_TOO_LARGE"),
    ]
    for df, options, message in cases:
        with pytest.raises(Exception, match=message):
            jvm_write(df, cluster, **options)
    with pytest.raises(Exception, match="kafka.bootstrap.servers is required"):
        ok.write.format("tidelog-jvm").option("topic", topic).mode("append").save()
    # a topic that does not exist yet is created by its first Metadata (v1), as with auto.create.topics.enable
    fresh = unique("jwnew")
    jvm_write(ok, cluster, topic=fresh)
    assert [r.value for r in jvm(spark, cluster, subscribe=fresh).collect()] == [b"v"]


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSTOP], ids=["kill-9", "sigstop"])
def test_the_jvm_writer_through_a_leader_kill(make_cluster, spark, sig) -> None:  # noqa: F811
    """kill -9 or SIGSTOP of the leader while a write with acks=all runs (RF 3, min.insync.replicas 2): the
    task sends what was not acknowledged to the new leader (a paused one times out its requests after
    kafka.request.timeout.ms, 5 s here), and every row is in the topic exactly once (the writer is an
    idempotent producer: a batch written but not acknowledged before the fault is not appended again)."""
    import threading

    from shared.client import Admin, Consumer, TopicPartition

    cluster = make_cluster(brokers=3)
    bootstrap = ",".join(p.address for p in cluster.procs("broker"))
    topic = unique("jwkill")
    n = 300_000
    with Admin(bootstrap) as admin:
        admin.create_topic(topic, partitions=1, replication_factor=3, configs={"min.insync.replicas": "2"})
        leader = admin.describe_topic(topic)["partitions"][0]["leader"]
    servers = ",".join(p.info["kafka"] for p in cluster.procs("broker") if str(p.id) != str(leader))
    df = spark.range(n).selectExpr("CAST(id AS STRING) AS value", "repeat('x', 1000) AS pad").selectExpr(
        "concat(value, ':', pad) AS value")
    failure: list[BaseException] = []

    def write() -> None:
        try:
            (df.write.format("tidelog-jvm").option("kafka.bootstrap.servers", servers).option("topic", topic)
             .option("kafka.batch.size", "16384").option("kafka.request.timeout.ms", "5000").mode("append").save())
        except BaseException as exc:  # noqa: BLE001  (reported below)
            failure.append(exc)

    writer = threading.Thread(target=write)
    writer.start()
    tp = TopicPartition(topic, 0)
    with Consumer(bootstrap) as c:
        c.assign([tp])
        wait_for(lambda: c.end_offsets([tp])[tp] >= 20_000, 60, what="the write under way")
    assert writer.is_alive(), "the write ended before the fault"
    pid = cluster.proc("broker", leader).pid
    os.kill(pid, sig)
    try:
        writer.join(180)
        assert not writer.is_alive() and not failure, failure
    finally:
        if sig == signal.SIGSTOP:
            os.kill(pid, signal.SIGCONT)
    survivors = ",".join(p.address for p in cluster.procs("broker") if str(p.id) != str(leader))
    ids = [int(r.v.split(":")[0]) for r in spark.read.format("tidelog").option("bootstrap.servers", survivors)
           .option("subscribe", topic).load().selectExpr("CAST(value AS STRING) v").collect()]
    assert len(ids) == n and set(ids) == set(range(n))
