"""Transactions in the tidelog Spark source and sink, with real Spark (the session of test_spark.py)
against a real cluster: ``kafka.isolation.level`` and the exactly-once sink (``transactional.id.prefix``)."""

from __future__ import annotations

import os
import shutil
import uuid

import pytest

from pipelines.tidelog_source.sink import TaskIdentity, parse_sink_options, write_exactly_once
from shared.client import Consumer, Producer, TopicPartition
from tests.integration.test_spark import read, spark, unique  # noqa: F401  (the shared Spark session)


def _values(df) -> list[str]:
    return sorted(r.v for r in df.selectExpr("CAST(value AS STRING) v").collect())


def test_read_committed_skips_aborted_and_stops_at_an_open_transaction(env, spark) -> None:  # noqa: F811
    _, bootstrap, admin = env
    topic = unique("rc")
    admin.create_topic(topic, partitions=1)
    with Producer(bootstrap) as plain:
        for i in range(10):
            plain.send(topic, f"plain{i}".encode())
    aborted = Producer(bootstrap, transactional_id=unique("rc-a"))
    committed = Producer(bootstrap, transactional_id=unique("rc-c"))
    pending = Producer(bootstrap, transactional_id=unique("rc-o"))
    try:
        for p in (aborted, committed, pending):
            p.init_transactions()
        aborted.begin_transaction()
        for i in range(5):
            aborted.send(topic, f"aborted{i}".encode())
        aborted.flush()  # in the log, then aborted (unsent records would just be dropped)
        aborted.abort_transaction()
        committed.begin_transaction()
        for i in range(5):
            committed.send(topic, f"committed{i}".encode())
        committed.commit_transaction()
        pending.begin_transaction()
        for i in range(3):
            pending.send(topic, f"open{i}".encode())
        pending.flush()
        with Producer(bootstrap) as plain:
            plain.send(topic, b"after0").get(30)  # past the open transaction: above the LSO
        expected = sorted([f"plain{i}" for i in range(10)] + [f"committed{i}" for i in range(5)])
        rc = {"subscribe": topic, "kafka.isolation.level": "read_committed"}
        assert _values(read(spark, bootstrap, **rc)) == expected  # planned to the LSO: no wait, no open data
        assert len(_values(read(spark, bootstrap, subscribe=topic))) == 10 + 5 + 5 + 3 + 1  # read_uncommitted
        name = topic.replace("-", "_")  # a micro-batch plans to the LSO too, and ends while the transaction is open
        q = (spark.readStream.format("tidelog").option("bootstrap.servers", bootstrap).option("subscribe", topic)
             .option("startingOffsets", "earliest").option("kafka.isolation.level", "read_committed").load()
             .writeStream.format("memory").queryName(name).trigger(availableNow=True).start())
        assert q.awaitTermination(60) and q.exception() is None
        assert _values(spark.table(name)) == expected
        pending.commit_transaction()
        assert _values(read(spark, bootstrap, **rc)) == sorted(expected + ["open0", "open1", "open2", "after0"])
    finally:
        for p in (aborted, committed, pending):
            p.close()
    with pytest.raises(Exception, match="kafka.isolation.level must be read_uncommitted or read_committed"):
        read(spark, bootstrap, subscribe=topic, **{"kafka.isolation.level": "serializable"}).collect()


def _committed_values(bootstrap: str, topic: str, n_partitions: int) -> list[str]:
    """Every record a read_committed consumer sees in ``topic`` (read to the LSO)."""
    tps = [TopicPartition(topic, p) for p in range(n_partitions)]
    with Consumer(bootstrap, isolation_level="read_committed") as c:
        c.assign(tps)
        c.seek_to_beginning(*tps)
        end = c.end_offsets(tps)
        out: list[str] = []
        while any(c.position(tp) < end[tp] for tp in tps):
            out.extend(r.value.decode() for r in c.poll(1.0))
    return sorted(out)


def test_sink_task_fenced_zombie_and_rerun_of_a_committed_batch(env) -> None:
    """One task of one micro-batch, on the executor's code path without Spark: an attempt killed mid-write
    (its transaction left open, the producer still alive: a zombie), the retry, then the batch re-run."""
    _, bootstrap, admin = env
    topic, prefix = unique("eos-task"), unique("eos")
    admin.create_topic(topic, partitions=1)
    opts = parse_sink_options({"bootstrap.servers": bootstrap, "topic": topic, "transactional.id.prefix": prefix})
    task = TaskIdentity(partition=0, batch_id=7, query_id=str(uuid.uuid4()))
    rows = [f"r{i}" for i in range(100)]
    with pytest.raises(ValueError, match="transactional.id is not supported"):
        parse_sink_options({"bootstrap.servers": bootstrap, "kafka.transactional.id": "x"})
    with pytest.raises(ValueError, match="kafka.transaction.timeout.ms must be a positive integer"):
        parse_sink_options({"bootstrap.servers": bootstrap, "transactional.id.prefix": "p",
                            "kafka.transaction.timeout.ms": "soon"})

    def batches():
        import pyarrow as pa

        yield pa.RecordBatch.from_pydict({"value": rows})

    zombie = Producer(bootstrap, transactional_id=task.transactional_id(prefix))
    try:
        zombie.init_transactions()
        zombie.begin_transaction()
        for v in rows[:50]:
            zombie.send(topic, v.encode())
        zombie.flush()  # half the rows written, then the attempt "dies"
        assert write_exactly_once(opts, task, batches()).records == 100  # the retry fences it
        with pytest.raises(Exception):  # noqa: B017  (fenced: PRODUCER_FENCED / INVALID_PRODUCER_EPOCH)
            zombie.commit_transaction()
    finally:
        zombie.close()
    again = write_exactly_once(opts, task, batches())  # batch 7 re-run (driver restart)
    assert again.skipped and again.records == 0
    assert _committed_values(bootstrap, topic, 1) == sorted(rows)
    nxt = write_exactly_once(opts, TaskIdentity(0, 8, task.query_id), batches())  # the next batch writes
    assert nxt.records == 100 and not nxt.skipped


def _copy_stream(spark, bootstrap: str, source: str, sink: str, ck: str, prefix: str, flag: str):  # noqa: F811
    from pyspark.sql.functions import col, udf

    @udf("binary")
    def fail_once(value, partition, offset):  # no type hints: they would make it an Arrow UDF
        # a task failing mid-batch: whatever its transaction holds by then is aborted (how much it sent
        # depends on how far the writer got behind the UDF's worker; test_sink_task_fenced_zombie... covers
        # a half-written, never-aborted attempt deterministically)
        if partition == 0 and offset == 1200 and os.path.exists(flag):
            os.remove(flag)
            raise RuntimeError("injected task failure")
        return value

    return (spark.readStream.format("tidelog").option("bootstrap.servers", bootstrap).option("subscribe", source)
            .option("startingOffsets", "earliest").load()
            .select(col("key"), fail_once(col("value"), col("partition"), col("offset")).alias("value"))
            .writeStream.format("tidelog").option("bootstrap.servers", bootstrap).option("topic", sink)
            .option("transactional.id.prefix", prefix).option("checkpointLocation", ck)
            .trigger(availableNow=True).start())


def test_streaming_sink_exactly_once_across_task_failure_and_batch_reruns(env, spark, tmp_path) -> None:  # noqa: F811
    _, bootstrap, admin = env
    source, sink, prefix = unique("eos-in"), unique("eos-out"), unique("eos")
    admin.create_topic(source, partitions=2)
    admin.create_topic(sink, partitions=2)
    with Producer(bootstrap, linger_ms=5) as p:
        for i in range(1500):
            p.send(source, f"a{i}".encode(), partition=0)
        for i in range(300):
            p.send(source, f"b{i}".encode(), partition=1)
    expected = sorted([f"a{i}" for i in range(1500)] + [f"b{i}" for i in range(300)])
    ck, flag = str(tmp_path / "ck"), str(tmp_path / "fail")
    open(flag, "w").close()
    # run 1: partition 0's task fails (local mode does not retry it), so the query stops in batch 0
    q = _copy_stream(spark, bootstrap, source, sink, ck, prefix, flag)
    with pytest.raises(Exception, match="injected task failure"):
        q.awaitTermination(120)
    # run 2: batch 0 again, same id and offsets (a driver restart); a task that committed in run 1 writes nothing
    q = _copy_stream(spark, bootstrap, source, sink, ck, prefix, flag)
    q.awaitTermination(120)
    assert q.exception() is None
    assert _committed_values(bootstrap, sink, 2) == expected  # checked with the client's read_committed consumer
    # the driver dies after the tasks committed batch 0 but before the commit log records it: run again
    shutil.rmtree(os.path.join(ck, "commits"))
    q = _copy_stream(spark, bootstrap, source, sink, ck, prefix, flag)
    q.awaitTermination(120)
    assert q.exception() is None
    assert _committed_values(bootstrap, sink, 2) == expected
