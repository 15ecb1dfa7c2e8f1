"""Transactions in the tidelog Spark source and sink, with real Spark (the session of test_spark.py)
against a real cluster: ``kafka.isolation.level`` and the exactly-once sink (``transactional.id.prefix``)."""

from __future__ import annotations

import os
import shutil
import time
import uuid

import pytest

from pipelines.tidelog_source.sink import TaskIdentity, end_transactions, parse_sink_options, write_exactly_once
from shared.client import Consumer, Producer, TopicPartition
from shared.errors import TidelogError
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
    # open through the whole test: a loaded machine must not let the coordinator time it out (60 s by default)
    pending = Producer(bootstrap, transactional_id=unique("rc-o"), transaction_timeout_ms=600_000)
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


def _committed_eventually(bootstrap: str, topic: str, n_partitions: int, expected: list[str],
                          timeout: float = 20.0) -> list[str]:
    """What a read_committed consumer sees, read again until it is ``expected`` or ``timeout`` has passed. A
    commit returns once PrepareCommit is written, as Kafka's EndTxn does, and the markers that make the
    records readable land just after: a reader right after the commit may still stop before them (a CI run
    read 100 records of 200 so)."""
    deadline = time.monotonic() + timeout
    while (got := _committed_values(bootstrap, topic, n_partitions)) != expected and time.monotonic() < deadline:
        time.sleep(0.2)
    return got


def test_sink_task_two_phase_commit_zombie_driver_retry_and_reruns(env) -> None:
    """One task of a micro-batch on the executor's and the driver's code paths, without Spark: an attempt
    killed mid-write (its transaction left open, the producer still alive: a zombie), the retry, the
    driver's commit and its retry after a lost answer, the batch re-run; then a batch whose driver died
    between the task's write and its commit()."""
    _, bootstrap, admin = env
    topic, prefix = unique("eos-task"), unique("eos")
    admin.create_topic(topic, partitions=1)
    opts = parse_sink_options({"bootstrap.servers": bootstrap, "topic": topic, "transactional.id.prefix": prefix})
    task = TaskIdentity(partition=0, batch_id=7, query_id=str(uuid.uuid4()))
    rows, rows8 = [f"r{i}" for i in range(100)], [f"s{i}" for i in range(100)]
    with pytest.raises(ValueError, match="transactional.id is not supported"):
        parse_sink_options({"bootstrap.servers": bootstrap, "kafka.transactional.id": "x"})
    with pytest.raises(ValueError, match="kafka.transaction.timeout.ms must be a positive integer"):
        parse_sink_options({"bootstrap.servers": bootstrap, "transactional.id.prefix": "p",
                            "kafka.transaction.timeout.ms": "soon"})

    def batches(values):
        import pyarrow as pa

        yield pa.RecordBatch.from_pydict({"value": values})

    zombie = Producer(bootstrap, transactional_id=task.transactional_id(prefix))
    try:
        zombie.init_transactions()
        zombie.begin_transaction()
        for v in rows[:50]:
            zombie.send(topic, v.encode())
        zombie.flush()  # half the rows written, then the attempt "dies"
        first = write_exactly_once(opts, task, batches(rows))  # the retry fences it
        assert first.records == 100 and first.transaction is not None
        with pytest.raises(Exception):  # noqa: B017  (fenced: PRODUCER_FENCED / INVALID_PRODUCER_EPOCH)
            zombie.commit_transaction()
    finally:
        zombie.close()
    assert _committed_values(bootstrap, topic, 1) == []  # the task does not commit: the driver does
    assert end_transactions(opts, [first, None], commit=True) == 1
    assert end_transactions(opts, [first], commit=True) == 1  # sent again (the answer was lost): a retry, success
    assert end_transactions(opts, [first], commit=False) == 0  # a late abort is refused (best effort: no raise)
    assert _committed_eventually(bootstrap, topic, 1, sorted(rows)) == sorted(rows)
    again = write_exactly_once(opts, task, batches(rows))  # batch 7 re-run (driver restart after its commit)
    assert again.skipped and again.records == 0 and again.transaction is None
    with pytest.raises(TidelogError):  # the id moved on: an old EndTxn never ends a later transaction
        end_transactions(opts, [first], commit=True)

    task8 = TaskIdentity(0, 8, task.query_id)
    lost = write_exactly_once(opts, task8, batches(rows8))  # written; the driver dies before commit()
    assert lost.records == 100 and not lost.skipped
    redo = write_exactly_once(opts, task8, batches(rows8))  # the re-run aborts it and writes the batch again
    assert redo.records == 100 and not redo.skipped
    with pytest.raises(TidelogError):  # the dead driver's handle: fenced
        end_transactions(opts, [lost], commit=True)
    assert end_transactions(opts, [redo], commit=True) == 1
    assert _committed_eventually(bootstrap, topic, 1, sorted(rows + rows8)) == sorted(rows + rows8)
    assert write_exactly_once(opts, task8, batches(rows8)).skipped


def _copy_stream(spark, bootstrap: str, source: str, sink: str, ck: str, prefix: str, flag: str):  # noqa: F811
    from pyspark.sql.functions import col, udf

    @udf("binary")
    def fail_once(value, partition, offset):  # no type hints: they would make it an Arrow UDF
        # a task failing mid-batch: whatever its transaction holds by then is never committed (how much it
        # sent depends on how far the writer got behind the UDF's worker; test_sink_task_two_phase_commit...
        # covers a half-written attempt deterministically, test_spark_sink_retry.py Spark's own retry)
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
    # run 1: partition 0's task fails (local mode does not retry it), so the query stops in batch 0; the
    # driver's abort() aborts partition 1's transaction, and nothing of batch 0 is visible
    q = _copy_stream(spark, bootstrap, source, sink, ck, prefix, flag)
    with pytest.raises(Exception, match="injected task failure"):
        q.awaitTermination(120)
    assert _committed_values(bootstrap, sink, 2) == []
    # run 2: batch 0 again, same id and offsets (a driver restart)
    q = _copy_stream(spark, bootstrap, source, sink, ck, prefix, flag)
    q.awaitTermination(120)
    assert q.exception() is None
    assert _committed_eventually(bootstrap, sink, 2, expected) == expected  # checked with the client's read_committed consumer
    # the driver dies after its commit() of batch 0 but before the commit log records it: run again (every
    # task finds batch 0 in the ledger and writes nothing)
    shutil.rmtree(os.path.join(ck, "commits"))
    q = _copy_stream(spark, bootstrap, source, sink, ck, prefix, flag)
    q.awaitTermination(120)
    assert q.exception() is None
    assert _committed_eventually(bootstrap, sink, 2, expected) == expected


def test_batch_write_exactly_once_commits_from_the_driver(env, spark, tmp_path) -> None:  # noqa: F811
    """``df.write`` with ``transactional.id.prefix``: the tasks' transactions are committed by the driver once
    every task succeeded; a job with a failed task leaves nothing visible to read_committed readers."""
    from pyspark.sql.functions import col, udf

    _, bootstrap, admin = env
    topic, prefix = unique("eos-batch"), unique("eos-b")
    admin.create_topic(topic, partitions=2)
    df = spark.createDataFrame([(f"w{i}",) for i in range(400)], "value string").repartition(2)
    flag = str(tmp_path / "fail")
    open(flag, "w").close()

    @udf("string")
    def fail_once(value):
        if value == "w7" and os.path.exists(flag):
            os.remove(flag)
            raise RuntimeError("injected task failure")
        return value

    failing = df.select(fail_once(col("value")).alias("value"))
    with pytest.raises(Exception, match="injected task failure"):  # local mode: no task retry, the job fails
        failing.write.format("tidelog").option("bootstrap.servers", bootstrap).option("topic", topic) \
            .option("transactional.id.prefix", prefix).mode("append").save()
    assert _committed_values(bootstrap, topic, 2) == []  # the other task's transaction was aborted
    for attempt in range(3):
        try:
            df.write.format("tidelog").option("bootstrap.servers", bootstrap).option("topic", topic) \
                .option("transactional.id.prefix", prefix).mode("append").save()
            break
        except Exception as exc:  # noqa: BLE001
            # The failed job's other task can outlive it (Spark cancels it, its Python worker goes on) and
            # init its transactional id after this job's task did: it fences this job, whose commit then
            # fails with PRODUCER_FENCED and writes nothing. Running the job again is what a user does.
            if "PRODUCER_FENCED" not in str(exc) or attempt == 2:
                raise
    expected = sorted(f"w{i}" for i in range(400))
    assert _committed_eventually(bootstrap, topic, 2, expected) == expected
