"""``tidelog bench produce|consume --kafka``: the same measurements through the brokers' Kafka listener,
driven by confluent-kafka (librdkafka), and the brokers' CPU per record for either door.

confluent-kafka is a test/benchmark dependency, imported only when ``--kafka`` is asked for.
"""

from __future__ import annotations

import os
import time
from typing import Any

import click

from shared.client.discovery import read_cluster_file


def kafka_bootstrap(given: str | None, data_dir: str) -> str:
    if given:
        return given
    info = read_cluster_file(os.path.abspath(data_dir))
    found = (info or {}).get("kafka_bootstrap")
    if not found:
        raise click.ClickException("no Kafka listener known: pass --kafka-bootstrap host:port "
                                   "(or start the cluster with `tidelog up`, which records kafka_bootstrap)")
    return str(found)


def kafka_security(settings: dict[str, Any]) -> dict[str, str]:
    """librdkafka's names for kafka-python's security settings (``connect.client_settings()``): ``{}`` for
    plaintext; SASL_SSL / SSL with the CA, the SASL mechanism and user, the client certificate when given."""
    proto = str(settings.get("security_protocol") or "PLAINTEXT").upper()
    if proto == "PLAINTEXT":
        return {}
    conf = {"security.protocol": proto}
    for ours, theirs in (("ssl_cafile", "ssl.ca.location"), ("ssl_certfile", "ssl.certificate.location"),
                         ("ssl_keyfile", "ssl.key.location"), ("sasl_mechanism", "sasl.mechanisms"),
                         ("sasl_plain_username", "sasl.username"), ("sasl_plain_password", "sasl.password")):
        if settings.get(ours) and (theirs.startswith("ssl.") or proto.startswith("SASL")):
            conf[theirs] = str(settings[ours])
    return conf


class BrokerCpu:
    """CPU seconds (user + system) the local brokers (or the services of another ``role``) of cluster.json
    spent between start() and stop()."""

    def __init__(self, data_dir: str, role: str = "broker") -> None:
        info = read_cluster_file(os.path.abspath(data_dir)) or {}
        self.pids = [int(p["pid"]) for p in info.get("processes", []) if p.get("role") == role and p.get("pid")]
        self.tick = os.sysconf("SC_CLK_TCK")
        self._start = 0.0
        self.seconds: float | None = None

    def _total(self) -> float | None:
        total = 0
        for pid in self.pids:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                return None
            total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
        return total / self.tick

    def start(self) -> None:
        self._start = self._total() or 0.0

    def stop(self) -> None:
        end = self._total()
        self.seconds = None if end is None or not self.pids else end - self._start

    def per_record_us(self, records: int) -> float | None:
        return None if self.seconds is None or not records else self.seconds / records * 1e6


def kafka_produce(bootstrap: str, topic: str, records: int, record_size: int, key_size: int, acks: str,
                  batch_size: int, linger_ms: int, compression: str, latency_sample: int,
                  client_id: str, security: dict[str, str] | None = None) -> dict[str, Any]:
    """``security``: librdkafka's security settings (``kafka_security``), none for plaintext."""
    from confluent_kafka import Producer as KafkaProducer

    values = [os.urandom(record_size) for _ in range(256)]
    keys = [os.urandom(key_size) for _ in range(65536)] if key_size else [None] * 65536
    producer = KafkaProducer({
        "bootstrap.servers": bootstrap, "client.id": client_id, "acks": "all" if acks == "-1" else acks,
        "linger.ms": linger_ms, "batch.size": min(batch_size, 2_147_483_647),
        "compression.type": compression, "queue.buffering.max.messages": 1_000_000,
        "queue.buffering.max.kbytes": 2_097_151, "message.max.bytes": max(4 * batch_size, 4 << 20),
        "enable.idempotence": False, **(security or {}),
    })
    latencies: list[float] = []
    errors: list[Any] = []

    def sampler(start: float) -> Any:
        def done(err: Any, _msg: Any) -> None:
            if err is not None:
                errors.append(err)
            else:
                latencies.append((time.perf_counter() - start) * 1000)
        return done

    def failed(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(err)

    produce = producer.produce
    c0 = time.process_time()
    t0 = time.perf_counter()
    for i in range(records):
        while True:
            try:
                if i % latency_sample == 0:
                    produce(topic, values[i & 255], keys[i & 65535], on_delivery=sampler(time.perf_counter()))
                else:
                    produce(topic, values[i & 255], keys[i & 65535], on_delivery=failed)
                break
            except BufferError:  # the local queue is full: serve delivery reports, then try again
                producer.poll(0.005)
        if i % 10_000 == 0:
            producer.poll(0)
    left = producer.flush(120)
    elapsed = time.perf_counter() - t0
    client_cpu = time.process_time() - c0
    if errors or left:
        raise click.ClickException(f"{len(errors)} sends failed ({left} undelivered), first: {errors[:1]}")
    return {"records": records, "record_size": record_size, "seconds": elapsed, "records_per_s": records / elapsed,
            "mb_per_s": records * (record_size + key_size) / elapsed / 1e6, "latencies": latencies,
            "acks": acks, "batch_size": batch_size, "linger_ms": linger_ms, "compression": compression,
            "door": "kafka (confluent-kafka)", "client_cpu_s": client_cpu}


def kafka_consume(bootstrap: str, topic: str, records: int, fetch_max_bytes: int, max_partition_fetch_bytes: int,
                  timeout_ms: int, client_id: str, security: dict[str, str] | None = None) -> dict[str, Any]:
    from confluent_kafka import OFFSET_BEGINNING
    from confluent_kafka import Consumer as KafkaConsumer
    from confluent_kafka import TopicPartition as KafkaTp

    consumer = KafkaConsumer({
        "bootstrap.servers": bootstrap, "client.id": client_id, "group.id": f"bench-{os.getpid()}",
        "enable.auto.commit": False, "fetch.max.bytes": fetch_max_bytes,
        "max.partition.fetch.bytes": max_partition_fetch_bytes, "queued.max.messages.kbytes": 1_048_576,
        "fetch.wait.max.ms": 100,
        # librdkafka stops fetching a partition for fetch.queue.backoff.ms (1 s) once queued.min.messages
        # (100k) wait in its queue: a reader faster than that would idle out each second.
        "queued.min.messages": 1_000_000, "fetch.queue.backoff.ms": 10, **(security or {}),
    })
    try:
        md = consumer.list_topics(topic, timeout=10)
        parts = sorted(md.topics[topic].partitions) if topic in md.topics else []
        if not parts:
            raise click.ClickException(f"topic {topic!r} has no partitions (does it exist?)")
        consumer.assign([KafkaTp(topic, p, OFFSET_BEGINNING) for p in parts])
        n = nbytes = 0
        poll_ms: list[float] = []
        c0 = time.process_time()
        t0 = time.perf_counter()
        idle = t0
        while n < records:
            t = time.perf_counter()
            batch = consumer.consume(10_000, 0.1)
            poll_ms.append((time.perf_counter() - t) * 1000)
            if not batch:
                if (time.perf_counter() - idle) * 1000 > timeout_ms:
                    raise click.ClickException(f"only {n} of {records} records arrived before {timeout_ms} ms of idleness")
                continue
            idle = time.perf_counter()
            for m in batch:
                if m.error() is not None:
                    raise click.ClickException(f"fetch failed: {m.error()}")
                nbytes += len(m.value() or b"") + len(m.key() or b"")
            n += len(batch)
        elapsed = time.perf_counter() - t0
        client_cpu = time.process_time() - c0
    finally:
        consumer.close()
    return {"records": n, "seconds": elapsed, "records_per_s": n / elapsed, "mb_per_s": nbytes / elapsed / 1e6,
            "poll_ms": poll_ms, "door": "kafka (confluent-kafka)", "client_cpu_s": client_cpu}
