"""``tidelog bench spark``: Spark batch read throughput into count() and into a Parquet write."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any

import click

from shared.cli.connect import bootstrap_servers, client_settings, cluster_options
from shared.client import Admin, Consumer, Producer, TopicPartition
from shared.errors import ErrorCode, TidelogError


def _fill(servers: str, topic: str, records: int, record_size: int, partitions: int,
          settings: dict[str, Any] | None = None, distinct: int = 64) -> int:
    """``settings``: the clients' security settings (kafka-python's names; ``{}`` when plaintext).
    ``distinct`` values repeat in turn, the keys cut from them but for every ``distinct``-th record's (random);
    0: every value and key random."""
    settings = settings or {}
    admin = Admin(servers, **settings)
    try:
        admin.create_topic(topic, partitions=partitions, configs={"max.message.bytes": str(8 << 20)})
    except TidelogError as exc:
        if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
            raise
    parts = [p["partition"] for p in admin.describe_topic(topic)["partitions"]]
    admin.close()
    with Consumer(servers, **settings) as c:
        tps = [TopicPartition(topic, p) for p in parts]
        c.assign(tps)
        have = sum(c.end_offsets(tps).values()) - sum(c.beginning_offsets(tps).values())
    missing = records - have
    if missing > 0:
        values = [os.urandom(record_size) for _ in range(distinct)]
        with Producer(servers, acks=1, linger_ms=5, batch_size=1 << 20, max_request_size=4 << 20, **settings) as p:
            if not distinct:
                for _ in range(missing):
                    p.send(topic, os.urandom(record_size), key=os.urandom(16))
            else:
                for i in range(missing):
                    v = values[i % distinct]
                    p.send(topic, v, key=os.urandom(16) if i % distinct == 0 else v[:16])
    return max(records, have)


def _baseline_parquet(path: str, records: int, record_size: int, first: int = 0, chunk: int = 65_536,
                      distinct: int = 64) -> None:
    """Rows ``first..first+records`` shaped as ``_fill`` writes them (key, value; ``distinct`` values in turn,
    keys cut from them but for every ``distinct``-th; 0: all random) as a Parquet file, for Spark's own
    Parquet-to-Parquet copy."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = np.frombuffer(os.urandom(max(distinct, 1) * record_size), np.uint8).reshape(max(distinct, 1), record_size)
    schema = pa.schema([("key", pa.binary()), ("value", pa.binary())])
    with pq.ParquetWriter(path, schema) as w:
        for start in range(first, first + records, chunk):
            n = min(chunk, first + records - start)
            if distinct:
                vals = table[np.arange(start, start + n) % distinct]
                keys = vals[:, :16].copy() if record_size >= 16 else np.zeros((n, 16), np.uint8)
                fresh = np.flatnonzero((np.arange(start, start + n) % distinct) == 0)
                keys[fresh] = np.frombuffer(os.urandom(16 * len(fresh)), np.uint8).reshape(-1, 16)
            else:
                vals = np.frombuffer(os.urandom(n * record_size), np.uint8).reshape(n, record_size)
                keys = np.frombuffer(os.urandom(16 * n), np.uint8).reshape(n, 16)

            def column(a: np.ndarray) -> pa.Array:
                width = a.shape[1]
                return pa.Array.from_buffers(pa.binary(), len(a), [None, pa.py_buffer(
                    np.arange(len(a) + 1, dtype=np.int32) * width), pa.py_buffer(np.ascontiguousarray(a))])

            w.write_batch(pa.record_batch([column(keys), column(vals)], schema=schema))


def _baseline_input(directory: str, records: int, record_size: int, files: int, distinct: int = 64) -> str:
    """The rows of the topic (key, value) as ``files`` Parquet files (one per topic partition, so Spark
    reads them with as many tasks) under ``directory``/in; returns that directory."""
    src = os.path.join(directory, "in")
    os.mkdir(src)
    per = -(-records // files)
    for i, first in enumerate(range(0, records, per)):
        _baseline_parquet(os.path.join(src, f"part-{i}.parquet"), min(per, records - first), record_size, first,
                          distinct=distinct)
    return src


def _timed_twice(action: Callable[[], object]) -> tuple[float, float]:
    """Seconds of a first run of ``action`` (which also warms the JVM's code for it) and of a second one."""
    t0 = time.perf_counter()
    action()
    first_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    action()
    return first_s, time.perf_counter() - t0


def _time_baseline(spark: Any, src: str, out: str, records: int, record_size: int) -> dict[str, float]:
    """Spark's own Parquet -> Parquet copy of the same rows: the physical limit for topic -> Parquet and
    for DataFrame -> topic."""
    df = spark.read.parquet(src)
    first_s, copy_s = _timed_twice(lambda: df.write.mode("overwrite").parquet(out))
    return {"baseline_first_seconds": first_s, "baseline_seconds": copy_s,
            "baseline_records_per_s": records / copy_s, "baseline_mb_per_s": records * record_size / copy_s / 1e6}


def _time_topic_write(spark: Any, src: str, servers: str, topic: str, partitions: int, settings: dict[str, Any],
                      records: int, record_size: int, kafka_servers: str | None = None) -> dict[str, float]:
    """DataFrame -> topic: the same Parquet rows written to a new topic, twice, through the ``tidelog`` sink (at
    least once, its defaults: acks=all, 1 MiB batches, ``Producer.send_batch`` per Arrow batch) or, given
    ``kafka_servers``, the ``tidelog-jvm`` writer (the same defaults, in the JVM through the Kafka listener);
    the topic is deleted afterwards."""
    from pipelines.tidelog_source.security import spark_options

    admin = Admin(servers, **settings)
    admin.create_topic(topic, partitions=partitions, configs={"max.message.bytes": str(8 << 20)})
    try:
        if kafka_servers:
            writer = (spark.read.parquet(src).write.format("tidelog-jvm").options(**spark_options(settings))
                      .option("kafka.bootstrap.servers", kafka_servers).option("topic", topic).mode("append"))
        else:
            writer = (spark.read.parquet(src).write.format("tidelog").options(**spark_options(settings))
                      .option("bootstrap.servers", servers).option("topic", topic).mode("append"))
        first_s, write_s = _timed_twice(writer.save)
        landed = _records_in(servers, topic, settings)
        if landed != 2 * records:  # the two writes, each whole: a figure for fewer records would mean nothing
            raise click.ClickException(f"DataFrame -> topic: {topic} holds {landed} records after two writes of "
                                       f"{records}")
    finally:
        try:
            admin.delete_topic(topic)
        finally:
            admin.close()
    return {"write_first_seconds": first_s, "write_seconds": write_s, "write_records_per_s": records / write_s,
            "write_mb_per_s": records * record_size / write_s / 1e6}


def _records_in(servers: str, topic: str, settings: dict[str, Any]) -> int:
    """Records in ``topic``: end minus beginning offsets, summed over its partitions."""
    with Consumer(servers, **settings) as c:
        tps = [TopicPartition(topic, p) for p in sorted(c.cluster.partitions_for(topic, 10))]
        c.assign(tps)
        return sum(c.end_offsets(tps).values()) - sum(c.beginning_offsets(tps).values())


@click.command("spark")
@click.option("--topic", default="spark-bench", show_default=True)
@click.option("--records", default=1_000_000, show_default=True, type=click.IntRange(1))
@click.option("--record-size", default=1024, show_default=True, type=click.IntRange(0))
@click.option("--partitions", default=4, show_default=True, type=click.IntRange(1))
@click.option("--master", default="local[2]", show_default=True)
@click.option("--baseline/--no-baseline", default=True, show_default=True,
              help="also time Spark's own Parquet -> Parquet copy of the same rows (the physical limit)")
@click.option("--write/--no-write", default=True, show_default=True,
              help="with the baseline, also time DataFrame -> topic: its Parquet rows written to a new topic "
                   "through the tidelog sink (deleted afterwards)")
@click.option("--reader", type=click.Choice(["jvm", "python"]), default="jvm", show_default=True,
              help="read the topic with format('tidelog-jvm') (in the JVM, through the Kafka listener) or "
                   "format('tidelog') (the Python data source)")
@click.option("--writer", type=click.Choice(["jvm", "python"]), default="jvm", show_default=True,
              help="write DataFrame -> topic with format('tidelog-jvm') or format('tidelog') (the Python sink)")
@click.option("--kafka-bootstrap", "kafka_bootstrap_servers", envvar="TIDELOG_KAFKA_BOOTSTRAP", default=None,
              help="Kafka listener host:port[,...] for the jvm reader and writer (default: kafka_bootstrap of "
                   "--data-dir)")
@click.option("--distinct-values", default=64, show_default=True, type=click.IntRange(0),
              help="the values repeat in turn among this many (keys cut from them but every Nth random), in the "
                   "topic and in the baseline's Parquet; 0: every value and key random, which Parquet's dictionary "
                   "encoding cannot shrink. A topic that already holds records is not refilled: give another "
                   "--topic for another shape")
@click.option("--json", "as_json", is_flag=True)
@cluster_options
def bench_spark(topic: str, records: int, record_size: int, partitions: int, master: str, baseline: bool,
                write: bool, reader: str, writer: str, kafka_bootstrap_servers: str | None, distinct_values: int,
                as_json: bool,
                bootstrap: str | None, rest: str | None, data_dir: str) -> None:
    """Fill TOPIC with RECORDS records (if needed), then time a Spark batch read into count() and Parquet,
    and (--write) the same rows written from a DataFrame to a new topic.

    The first count() and the first Parquet write are reported apart: they also start Spark's Python
    workers and warm the JVM. With --baseline (the default) the same rows (key, value) are also
    written to a Parquet file and Spark's own Parquet -> Parquet copy of them is timed the same way
    (second write reported): topic -> Parquet is reported as a fraction of it, and so is DataFrame ->
    topic (those Parquet rows read by Spark and written through the ``tidelog`` sink, second write
    reported).
    """
    from pipelines.spark import local_session
    from pipelines.tidelog_source.security import spark_options

    servers = bootstrap_servers(bootstrap, rest, data_dir)
    settings = client_settings()  # the CLI's credentials (cluster.json's admin on a secure cluster)
    total = _fill(servers, topic, records, record_size, partitions, settings, distinct_values)
    kafka_servers = None
    if "jvm" in (reader, writer):
        from shared.cli.bench_kafka import kafka_bootstrap

        kafka_servers = kafka_bootstrap(kafka_bootstrap_servers, data_dir)
    spark = local_session("tidelog-bench", master)
    if reader == "jvm":
        df = (spark.read.format("tidelog-jvm").options(**spark_options(settings))
              .option("kafka.bootstrap.servers", kafka_servers).option("subscribe", topic)
              .option("startingOffsets", "earliest").option("endingOffsets", "latest").load())
    else:
        df = (spark.read.format("tidelog").options(**spark_options(settings)).option("bootstrap.servers", servers)
              .option("subscribe", topic)
              .option("startingOffsets", "earliest").option("endingOffsets", "latest").load())
    # The first query also starts the Python workers and warms the JVM; it is reported apart.
    t0 = time.perf_counter()
    n = df.count()
    cold_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    n = df.count()
    count_s = time.perf_counter() - t0
    tmp = tempfile.mkdtemp(prefix="tidelog-bench-spark-")
    try:
        # The first write also warms the JVM's Parquet writer code; the second is reported as the figure.
        first_parquet_s, parquet_s = _timed_twice(
            lambda: df.write.mode("overwrite").parquet(os.path.join(tmp, "from-topic")))
        base: dict[str, float] = {}
        if baseline:
            src = _baseline_input(tmp, n, record_size, partitions, distinct_values)
            base = _time_baseline(spark, src, os.path.join(tmp, "copy"), n, record_size)
            if write:
                base |= _time_topic_write(spark, src, servers, f"{topic}-write-{uuid.uuid4().hex[:8]}", partitions,
                                          settings, n, record_size, kafka_servers if writer == "jvm" else None)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        spark.stop()
    res = {"reader": reader, "writer": writer, "records": n, "topic_records": total, "record_size": record_size, "partitions": partitions,
           "distinct_values": distinct_values,
           "first_count_seconds": cold_s, "first_count_records_per_s": n / cold_s,
           "count_seconds": count_s, "count_records_per_s": n / count_s,
           "first_parquet_seconds": first_parquet_s, "first_parquet_records_per_s": n / first_parquet_s,
           "parquet_seconds": parquet_s, "parquet_records_per_s": n / parquet_s,
           "count_mb_per_s": n * record_size / count_s / 1e6, "parquet_mb_per_s": n * record_size / parquet_s / 1e6,
           **base}
    if base:
        res["parquet_vs_baseline"] = base["baseline_seconds"] / parquet_s
    if "write_seconds" in base:
        res["write_vs_baseline"] = base["baseline_seconds"] / base["write_seconds"]
    if as_json:
        click.echo(json.dumps(res))
    else:
        click.echo(f"count(), first query (starts workers): {n} records in {cold_s:.1f}s = {n / cold_s:,.0f} records/s\n"
                   f"count(), warm:                        {n} records in {count_s:.1f}s = {n / count_s:,.0f} records/s ({res['count_mb_per_s']:.0f} MB/s)\n"
                   f"Parquet, first write:                 {n} records in {first_parquet_s:.1f}s = {n / first_parquet_s:,.0f} records/s\n"
                   f"Parquet, second write:                {n} records in {parquet_s:.1f}s = {n / parquet_s:,.0f} records/s ({res['parquet_mb_per_s']:.0f} MB/s)")
        if base:
            click.echo(f"Baseline, Spark Parquet -> Parquet:   {n} records in {base['baseline_seconds']:.1f}s = "
                       f"{base['baseline_records_per_s']:,.0f} records/s ({base['baseline_mb_per_s']:.0f} MB/s); "
                       f"topic -> Parquet = {res['parquet_vs_baseline']:.2f}x of it")
        if "write_seconds" in base:
            click.echo(f"DataFrame -> topic, first write:      {n} records in {base['write_first_seconds']:.1f}s\n"
                       f"DataFrame -> topic, second write:     {n} records in {base['write_seconds']:.1f}s = "
                       f"{base['write_records_per_s']:,.0f} records/s ({base['write_mb_per_s']:.0f} MB/s); "
                       f"{res['write_vs_baseline']:.2f}x of the Parquet copy")
