"""``tidelog bench produce|consume``: throughput and latency against a running cluster, as Kafka's perf tools."""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from typing import Any

import click
from tqdm import tqdm

from shared.cli import bench_kafka
from shared.cli.connect import bootstrap_servers, client_settings, cluster_options
from shared.client import Admin, Consumer, ConsumerRecords, Producer, TopicPartition
from shared.errors import ErrorCode, TidelogError
from shared.records.decoder import payload_size


def _progress(flag: bool | None) -> bool:
    """--progress / --no-progress, else a bar only when stderr is a terminal (not in a log or a pipe)."""
    return sys.stderr.isatty() if flag is None else flag


def progress_bar(records: int, progress: bool | None) -> Any:
    """The benches' records progress bar on stderr (see ``_progress``)."""
    return tqdm(total=records, unit="rec", unit_scale=True, disable=not _progress(progress), mininterval=0.5,
                file=click.get_text_stream("stderr"))


def latency_sampler(start: float, into: list[float]) -> Any:
    """A delivery callback appending the milliseconds since ``start`` to ``into``."""
    def done(_md: Any) -> None:
        into.append((time.perf_counter() - start) * 1000)
    return done


def consumed_bytes(batch: ConsumerRecords) -> int:
    """The key and value bytes of every record of a poll (a null key or value counts 0), as Kafka's
    ConsumerPerformance counts them. Summed in C (``payload_size``): a loop over the records in Python
    cost ~0.1 µs of the consumer's main thread per record, and map/filter/sum ~0.15-0.2 µs (py-spy), on a
    thread whose whole poll of a 1 KiB record now costs ~0.3 µs."""
    return sum(map(payload_size, batch.by_partition.values()))


def bench_consumer(servers: str, topic: str, client_id: str, fetch_max_bytes: int, max_partition_fetch_bytes: int,
                   max_poll_records: int, fetch_depth: int, group: str | None, fetch_transport: str = "auto") -> Consumer:
    """The consume benches' consumer: subscribed as a member of ``group``, else assigned every partition
    of ``topic`` from the beginning."""
    consumer = Consumer(servers, client_id=client_id, auto_offset_reset="earliest", fetch_max_bytes=fetch_max_bytes,
                        max_partition_fetch_bytes=max_partition_fetch_bytes, max_poll_records=max_poll_records,
                        fetch_depth=fetch_depth, group_id=group, fetch_transport=fetch_transport, **client_settings())
    if group is not None:
        consumer.subscribe([topic])
    else:
        parts = consumer.cluster.partitions_for(topic, 10)
        consumer.assign([TopicPartition(topic, p) for p in sorted(parts)])
        consumer.seek_to_beginning()
    return consumer


def percentiles(samples_ms: list[float]) -> dict[str, float]:
    if not samples_ms:
        return {k: 0.0 for k in ("avg", "p50", "p95", "p99", "p999", "max")}
    s = sorted(samples_ms)

    def pct(q: float) -> float:
        return s[min(int(q * len(s)), len(s) - 1)]

    return {"avg": statistics.fmean(s), "p50": pct(0.50), "p95": pct(0.95), "p99": pct(0.99),
            "p999": pct(0.999), "max": s[-1]}


def _report(kind: str, res: dict[str, Any], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(res))
        return
    lat = res["latency_ms"]
    click.echo(
        f"{res['records']} records {kind}, {res['records_per_s']:,.0f} records/sec ({res['mb_per_s']:.2f} MB/sec), "
        f"{lat['avg']:.2f} ms avg latency, {lat['max']:.2f} ms max latency, {lat['p50']:.2f} ms 50th, "
        f"{lat['p95']:.2f} ms 95th, {lat['p99']:.2f} ms 99th, {lat['p999']:.2f} ms 99.9th."
        + (f" Broker CPU {res['broker_cpu_us_per_record']:.2f} µs/record." if res.get("broker_cpu_us_per_record")
           is not None else "")
        + (f" Client CPU {res['client_cpu_us_per_record']:.2f} µs/record." if res.get("client_cpu_us_per_record")
           is not None else "")
    )
    if "client_metrics" in res:
        click.echo("client metrics: " + ", ".join(f"{k}={v:,.2f}" if isinstance(v, float) else f"{k}={v}"
                                                  for k, v in res["client_metrics"].items()))


def _ensure_topic(servers: str, topic: str, partitions: int, rf: int, record_bytes: int) -> None:
    """Create ``topic`` unless it exists. A principal without CREATE (a secure cluster's bench user whose
    topic an admin made) goes on: the sends say it if the topic is missing or not writable."""
    admin = Admin(servers, **client_settings())
    try:
        admin.create_topic(topic, partitions, rf, {"max.message.bytes": str(max(8 << 20, record_bytes * 2))})
    except TidelogError as exc:
        if exc.code not in (ErrorCode.TOPIC_ALREADY_EXISTS, ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                            ErrorCode.CLUSTER_AUTHORIZATION_FAILED):
            raise
    finally:
        admin.close()


def _door_options(f: Any) -> Any:
    f = click.option("--kafka-bootstrap", "kafka_bootstrap_servers", envvar="TIDELOG_KAFKA_BOOTSTRAP", default=None,
                     help="Kafka listener host:port[,...] for --kafka (default: kafka_bootstrap of --data-dir)")(f)
    f = click.option("--kafka", is_flag=True, help="through the brokers' Kafka listener with confluent-kafka "
                                                  "(same as --door kafka)")(f)
    f = click.option("--door", type=click.Choice(["grpc", "kafka", "both"]), default="grpc", show_default=True,
                     help="gRPC with Tidelog's client, the Kafka listener with confluent-kafka, or both in turn")(f)
    return f


@click.command("produce")
@click.option("--topic", required=True)
@click.option("--records", type=click.IntRange(1), default=1_000_000, show_default=True)
@click.option("--record-size", type=click.IntRange(0), default=1024, show_default=True)
@click.option("--key-size", type=click.IntRange(0), default=16, show_default=True, help="0: null keys")
@click.option("--acks", type=click.Choice(["all", "-1", "1", "0"]), default="1", show_default=True)
@click.option("--batch-size", type=click.IntRange(1), default=1_048_576, show_default=True)
@click.option("--linger-ms", type=click.IntRange(0), default=5, show_default=True)
@click.option("--compression", type=click.Choice(["none", "gzip", "snappy", "lz4", "zstd"]), default="none", show_default=True)
@click.option("--throughput", type=float, default=-1, show_default=True, help="records/s to aim for (-1: as fast as possible)")
@click.option("--partitions", type=click.IntRange(1), default=1, show_default=True, help="when creating the topic")
@click.option("--replication-factor", type=click.IntRange(1), default=1, show_default=True, help="when creating the topic")
@click.option("--latency-sample", type=click.IntRange(1), default=50, show_default=True, help="measure every Nth record")
@click.option("--warmup-records", type=click.IntRange(0), default=0, show_default=True,
              help="the first N records are also reported apart: the rest is the steady state (as Kafka's perf tool)")
@click.option("--json", "as_json", is_flag=True)
@click.option("--progress/--no-progress", default=None, help="a progress bar on stderr [default: when stderr is a terminal]")
@click.option("--client-id", default="tidelog-producer", show_default=True, help="client.id (quotas apply per client id)")
@click.option("--metrics", "show_metrics", is_flag=True, help="also print the client's Kafka metrics (metrics())")
@click.option("--columnar", is_flag=True, help="send Arrow columns with Producer.send_batch (gRPC door only; "
                                               "latency per record batch)")
@_door_options
@cluster_options
def bench_produce(topic: str, records: int, record_size: int, key_size: int, acks: str, batch_size: int,
                  linger_ms: int, compression: str, throughput: float, partitions: int, replication_factor: int,
                  latency_sample: int, warmup_records: int, as_json: bool, progress: bool | None, client_id: str,
                  show_metrics: bool, columnar: bool, door: str, kafka: bool, kafka_bootstrap_servers: str | None,
                  bootstrap: str | None, rest: str | None, data_dir: str) -> None:
    """Send RECORDS records of RECORD-SIZE random bytes (and random KEY-SIZE-byte keys) as fast as possible.

    With --warmup-records N, a second line gives the steady state: throughput from the N+1th send to the
    end, and the latencies of the records after the first N. --kafka sends through the brokers' Kafka
    listener with confluent-kafka instead; --door both runs Tidelog's client, then confluent-kafka, in one run."""
    if warmup_records >= records:
        raise click.BadParameter(f"must be below --records ({records})", param_hint="--warmup-records")
    servers = bootstrap_servers(bootstrap, rest, data_dir)
    _ensure_topic(servers, topic, partitions, replication_factor, batch_size)
    door = "kafka" if kafka else door
    if door in ("kafka", "both"):
        kafka_servers = bench_kafka.kafka_bootstrap(kafka_bootstrap_servers, data_dir)
    if door in ("grpc", "both") and columnar:
        from shared.cli import bench_columnar_produce

        cpu = bench_kafka.BrokerCpu(data_dir)
        cpu.start()
        bench_columnar_produce.run(servers, topic, records, record_size, key_size, acks, batch_size, linger_ms,
                                   compression, throughput, latency_sample, warmup_records, as_json, progress,
                                   client_id, show_metrics, cpu)
    elif door in ("grpc", "both"):
        cpu = bench_kafka.BrokerCpu(data_dir)
        cpu.start()
        _grpc_produce(servers, topic, records, record_size, key_size, acks, batch_size, linger_ms, compression,
                      throughput, latency_sample, warmup_records, as_json, progress, client_id, show_metrics, cpu)
    if door in ("kafka", "both"):
        cpu = bench_kafka.BrokerCpu(data_dir)
        cpu.start()
        res = bench_kafka.kafka_produce(kafka_servers, topic, records, record_size, key_size, acks, batch_size,
                                        linger_ms, compression, latency_sample, client_id,
                                        bench_kafka.kafka_security(client_settings()))
        cpu.stop()
        res["latency_ms"] = percentiles(res.pop("latencies"))
        _with_cpu(res, cpu)
        _report("sent through the Kafka listener", res, as_json)


def _with_cpu(res: dict[str, Any], cpu: bench_kafka.BrokerCpu) -> None:
    """The brokers' CPU per record, and this process's (``client_cpu_s``: every thread, over the timed part)."""
    if res.get("client_cpu_s") is not None and res.get("records"):
        res["client_cpu_us_per_record"] = res["client_cpu_s"] / res["records"] * 1e6
    if cpu.seconds is not None:
        res["broker_cpu_s"] = cpu.seconds
        res["broker_cpu_us_per_record"] = cpu.per_record_us(res["records"])


def _grpc_produce(servers: str, topic: str, records: int, record_size: int, key_size: int, acks: str,
                  batch_size: int, linger_ms: int, compression: str, throughput: float, latency_sample: int,
                  warmup_records: int, as_json: bool, progress: bool | None, client_id: str, show_metrics: bool,
                  cpu: bench_kafka.BrokerCpu) -> None:
    values = [os.urandom(record_size) for _ in range(256)]
    keys = [os.urandom(key_size) for _ in range(65536)] if key_size else [None] * 65536
    producer = Producer(servers, acks=acks, batch_size=batch_size, linger_ms=linger_ms, client_id=client_id,
                        compression_type=compression, max_request_size=max(4 * batch_size, 4 << 20),
                        **client_settings())
    latencies: list[float] = []
    steady: list[float] = []  # latencies of the records after the warm-up
    errors: list[BaseException] = []

    bar = progress_bar(records, progress)
    send = producer.send
    c0 = time.process_time()
    t0 = time.perf_counter()
    t_steady = t0
    try:
        for i in range(records):
            if i == warmup_records:
                t_steady = time.perf_counter()
            key = keys[i & 65535]
            if throughput > 0:
                ahead = i / throughput - (time.perf_counter() - t0)
                if ahead > 0:
                    time.sleep(ahead)
            if i % latency_sample == 0:
                t = time.perf_counter()
                into = steady if warmup_records and i >= warmup_records else latencies
                send(topic, values[i & 255], key=key).add_callback(latency_sampler(t, into)).add_errback(errors.append)
            else:
                send(topic, values[i & 255], key=key)
            if i % 20_000 == 0:
                bar.update(20_000 if i else 0)
        producer.flush()
    finally:
        elapsed = time.perf_counter() - t0
        client_cpu = time.process_time() - c0
        cpu.stop()
        bar.close()
        producer.close()
    if errors:
        raise click.ClickException(f"{len(errors)} sampled sends failed, first: {errors[0]}")
    res: dict[str, Any] = {
        "records": records, "record_size": record_size, "seconds": elapsed, "records_per_s": records / elapsed,
        "mb_per_s": records * (record_size + key_size) / elapsed / 1e6, "latency_ms": percentiles(latencies + steady),
        "acks": acks, "batch_size": batch_size, "linger_ms": linger_ms, "compression": compression,
        "throttled_responses": producer.throttled_responses, "throttle_time_ms_max": producer.throttle_time_ms_max,
        "client_cpu_s": client_cpu}
    if warmup_records:
        n, secs = records - warmup_records, elapsed - (t_steady - t0)
        res["steady_state"] = {"records": n, "seconds": secs, "records_per_s": n / secs,
                               "mb_per_s": n * (record_size + key_size) / secs / 1e6,
                               "latency_ms": percentiles(steady)}
    if show_metrics:
        res["client_metrics"] = producer.metrics()
    _with_cpu(res, cpu)
    _report("sent", res, as_json)
    if producer.throttled_responses and not as_json:
        click.echo(f"{producer.throttled_responses} responses throttled by a quota "
                   f"(throttle_time_ms max {producer.throttle_time_ms_max}).")
    if warmup_records and not as_json:
        _report("sent in steady state", res["steady_state"], False)


@click.command("consume")
@click.option("--topic", required=True)
@click.option("--records", type=click.IntRange(1), default=1_000_000, show_default=True)
@click.option("--fetch-max-bytes", type=click.IntRange(1024), default=64 << 20, show_default=True)
@click.option("--max-partition-fetch-bytes", type=click.IntRange(1024), default=1 << 20, show_default=True)
@click.option("--max-poll-records", type=click.IntRange(1), default=500, show_default=True)
@click.option("--fetch-depth", type=click.IntRange(1), default=4, show_default=True,
              help="fetches in flight per broker stream (gRPC transport)")
@click.option("--fetch-transport", type=click.Choice(["auto", "grpc"]), default="auto", show_default=True,
              help="the consumer's fetch_transport: auto fetches over the brokers' Kafka listener when plaintext")
@click.option("--timeout-ms", type=click.IntRange(1), default=30_000, show_default=True, help="give up when idle this long")
@click.option("--group", default=None, help="consume as a member of this (new) group instead of assign (joining is timed)")
@click.option("--json", "as_json", is_flag=True)
@click.option("--progress/--no-progress", default=None, help="a progress bar on stderr [default: when stderr is a terminal]")
@click.option("--client-id", default="tidelog-consumer", show_default=True, help="client.id (quotas apply per client id)")
@click.option("--metrics", "show_metrics", is_flag=True, help="also print the client's Kafka metrics (metrics())")
@click.option("--columnar", is_flag=True, help="read Arrow tables with Consumer.poll_arrow (Tidelog's client only)")
@_door_options
@cluster_options
def bench_consume(topic: str, records: int, fetch_max_bytes: int, max_partition_fetch_bytes: int,
                  max_poll_records: int, fetch_depth: int, fetch_transport: str, timeout_ms: int, group: str | None,
                  as_json: bool, progress: bool | None, client_id: str, show_metrics: bool, columnar: bool, door: str, kafka: bool, kafka_bootstrap_servers: str | None,
                  bootstrap: str | None, rest: str | None, data_dir: str) -> None:
    """Read RECORDS records from the beginning of TOPIC (every partition), decoding each one (--kafka: with
    confluent-kafka through the Kafka listener; --door both: one after the other)."""
    servers = bootstrap_servers(bootstrap, rest, data_dir)
    door = "kafka" if kafka else door
    if door in ("grpc", "both"):
        cpu = bench_kafka.BrokerCpu(data_dir)
        cpu.start()
        consume = _grpc_consume
        if columnar:
            from shared.cli.bench_columnar_consume import run as consume
        consume(servers, topic, records, fetch_max_bytes, max_partition_fetch_bytes, max_poll_records,
                fetch_depth, timeout_ms, group, as_json, progress, client_id, show_metrics, cpu, fetch_transport)
    if door in ("kafka", "both"):
        kafka_servers = bench_kafka.kafka_bootstrap(kafka_bootstrap_servers, data_dir)
        cpu = bench_kafka.BrokerCpu(data_dir)
        cpu.start()
        res = bench_kafka.kafka_consume(kafka_servers, topic, records, fetch_max_bytes, max_partition_fetch_bytes,
                                        timeout_ms, client_id, bench_kafka.kafka_security(client_settings()))
        cpu.stop()
        res["latency_ms"] = percentiles(res.pop("poll_ms"))
        _with_cpu(res, cpu)
        _report("consumed through the Kafka listener", res, as_json)


def _grpc_consume(servers: str, topic: str, records: int, fetch_max_bytes: int, max_partition_fetch_bytes: int,
                  max_poll_records: int, fetch_depth: int, timeout_ms: int, group: str | None, as_json: bool,
                  progress: bool | None, client_id: str, show_metrics: bool, cpu: bench_kafka.BrokerCpu,
                  fetch_transport: str = "auto") -> None:
    consumer = bench_consumer(servers, topic, client_id, fetch_max_bytes, max_partition_fetch_bytes, max_poll_records,
                              fetch_depth, group, fetch_transport)
    bar = progress_bar(records, progress)
    n = 0
    nbytes = 0
    poll_ms: list[float] = []
    c0 = time.process_time()
    t0 = time.perf_counter()
    idle = t0
    try:
        while n < records:
            t = time.perf_counter()
            batch = consumer.poll(100)
            poll_ms.append((time.perf_counter() - t) * 1000)
            if not batch:
                if (time.perf_counter() - idle) * 1000 > timeout_ms:
                    raise click.ClickException(f"only {n} of {records} records arrived before {timeout_ms} ms of idleness")
                continue
            idle = time.perf_counter()
            nbytes += consumed_bytes(batch)
            k = len(batch)
            n += k
            bar.update(k)
        elapsed = time.perf_counter() - t0
        client_cpu = time.process_time() - c0
        cpu.stop()
        client_metrics = consumer.metrics()
    finally:
        bar.close()
        consumer.close()
    res = {"records": n, "seconds": elapsed, "records_per_s": n / elapsed, "mb_per_s": nbytes / elapsed / 1e6,
           "latency_ms": percentiles(poll_ms), "throttled_responses": consumer.throttled_responses,
           "client_cpu_s": client_cpu}
    if show_metrics:
        res["client_metrics"] = client_metrics
    _with_cpu(res, cpu)
    _report("consumed", res, as_json)
