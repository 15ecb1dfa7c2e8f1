"""Real Kafka clients against the brokers' Kafka-protocol listener, on the shared cluster (3 brokers, real
etcd): the data path only (no consumer groups: every consumer uses assign()).

- confluent-kafka (librdkafka), kafka-python 3 and aiokafka produce with every codec, idempotent or not,
  acks 0/1/all, and read back exactly what they wrote: offsets, keys, values, headers, CreateTime;
- kcat lists the cluster, writes keyed records with headers and reads them back;
- records written through Tidelog's gRPC client are read by the Kafka clients byte for byte, and the other
  way round; both doors serve the same stored bytes;
- ListOffsets (earliest, latest, by timestamp, max timestamp), Metadata auto-creation, and KIP-227 fetch
  sessions across many polls of a multi-partition topic.
"""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest

from shared.client import Admin, Consumer, Producer, TopicPartition
from shared.proto import tidelog_pb2 as pb
from shared.proto import tidelog_pb2_grpc as pb_grpc
from tests.conftest import Cluster
from tests.integration.kafka_util import (
    FETCH,
    LIST_OFFSETS,
    METADATA,
    KafkaWire,
    Read,
    Rec,
    confluent_consumer,
    confluent_read,
    grpc_bootstrap,
    kafka_bootstrap,
    wait_partitions_led,
)

KCAT = "/usr/bin/kcat"
UNKNOWN_TOPIC_OR_PARTITION = 3
TIMESTAMP_CREATE_TIME = 1  # confluent-kafka's TIMESTAMP_CREATE_TIME
EARLIEST_LOCAL_TIMESTAMP, MAX_TIMESTAMP = -4, -3  # ListOffsets v8 / v7 special timestamps


@dataclass
class Kafka:
    cluster: Cluster
    bootstrap: str  # Kafka listeners
    grpc: str  # the brokers' gRPC doors, for Tidelog's own client
    admin: Admin

    def kafka_address(self, broker_id: int) -> str:
        return str(self.cluster.proc("broker", broker_id).info["kafka"])


@pytest.fixture(scope="module")
def kafka(cluster: Cluster) -> Iterator[Kafka]:
    bootstrap = kafka_bootstrap(cluster)
    assert bootstrap == cluster.info["kafka_bootstrap"] and bootstrap.count(",") == len(cluster.procs("broker")) - 1
    admin = Admin(grpc_bootstrap(cluster))
    yield Kafka(cluster, bootstrap, grpc_bootstrap(cluster), admin)
    admin.close()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def new_topic(k: Kafka, prefix: str, partitions: int = 1) -> str:
    topic = unique(prefix)
    k.admin.create_topic(topic, partitions=partitions)
    wait_partitions_led(k.bootstrap, topic, partitions)
    return topic


def sample(n: int, tag: str, base_ts: int | None = None) -> list[Rec]:
    """Records with the shapes clients meet: null keys and values, no/one/duplicate/empty/binary headers,
    CreateTimes out of order within a batch, compressible values."""
    base = base_ts if base_ts is not None else int(time.time() * 1000) - 60_000
    out = []
    for i in range(n):
        key = None if i % 7 == 3 and i % 11 != 5 else f"{tag}-key-{i}".encode()  # never both null (kafka-python)
        value = None if i % 11 == 5 else f"{tag} value {i} ".encode() * (1 + i % 9) + bytes([0, 255, i % 256])
        if i % 3 == 0:
            headers: tuple[tuple[str, bytes | None], ...] = ()
        elif i % 3 == 1:
            headers = (("n", str(i).encode()),)
        else:
            headers = (("dup", b"first"), ("dup", b""), ("bin", b"\x00\x01\xfe\xff"))
        out.append(Rec(key, value, headers, base + (i * 37) % 1000))
    return out


def assert_read(got: list[Any], partition: int, sent: list[Rec]) -> None:
    """The records read from ``partition`` are exactly ``sent``, at offsets 0.., with CreateTime."""
    mine = [r for r in got if r.partition == partition]
    assert [r.offset for r in mine] == list(range(len(sent))), f"partition {partition}: offsets"
    for r, want in zip(mine, sent, strict=True):
        assert r.rec == want, f"partition {partition} offset {r.offset}"
        assert r.timestamp_type == TIMESTAMP_CREATE_TIME


# -- confluent-kafka (librdkafka) ---------------------------------------------------------------------------

CONFLUENT_MODES: list[tuple[str, dict[str, Any]]] = [
    ("idempotent", {"enable.idempotence": True}),  # acks=all implied
    ("acks=all", {"enable.idempotence": False, "acks": "all"}),
    ("acks=1", {"enable.idempotence": False, "acks": 1}),
    ("acks=0", {"enable.idempotence": False, "acks": 0}),
]
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
CODEC_BITS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def confluent_produce(bootstrap: str, topic: str, partition: int | None, records: list[Rec],
                      conf: dict[str, Any]) -> list[tuple[int, int]]:
    """Produce with confluent-kafka; ``(partition, offset)`` of each record from its delivery report."""
    from confluent_kafka import Producer as CkProducer

    producer = CkProducer({"bootstrap.servers": bootstrap, "linger.ms": 20, **conf})
    reports: dict[int, tuple[int, int]] = {}
    errors: list[Any] = []

    def report(i: int) -> Any:
        def cb(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append((i, err))
            else:
                reports[i] = (msg.partition(), msg.offset())
        return cb

    for i, r in enumerate(records):
        extra = {} if partition is None else {"partition": partition}
        producer.produce(topic, value=r.value, key=r.key, headers=list(r.headers) or None, timestamp=r.timestamp,
                         on_delivery=report(i), **extra)
    assert producer.flush(30) == 0, "records left undelivered"
    assert not errors, errors[:3]
    return [reports[i] for i in range(len(records))]


def first_batch_attributes(address: str, topic: str, partition: int) -> int:
    """The attributes of the first stored batch, as the Kafka door serves it (a raw Fetch v12)."""
    with KafkaWire(address) as w:
        resp = w.request(FETCH, 12, fetch_request(topic, partition, 0))
    records = resp.responses[0].partitions[0].records
    return int.from_bytes(records[21:23], "big")  # baseOffset 8, length 4, epoch 4, magic 1, crc 4


def fetch_request(topic: str, partition: int, offset: int, max_bytes: int = 1 << 20) -> dict[str, Any]:
    return {"replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": max_bytes, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic": topic, "partitions": [{
                "partition": partition, "current_leader_epoch": -1, "fetch_offset": offset, "last_fetched_epoch": -1,
                "log_start_offset": -1, "partition_max_bytes": max_bytes}]}]}


def leader_of(k: Kafka, topic: str, partition: int = 0) -> int:
    return int(k.admin.describe_topic(topic)["partitions"][partition]["leader"])


@pytest.mark.parametrize("codec", CODECS)
def test_confluent_kafka_every_codec_idempotent_and_acks_0_1_all_read_back_exactly(kafka: Kafka, codec: str) -> None:
    topic = new_topic(kafka, f"ck-{codec}", partitions=len(CONFLUENT_MODES))
    sent = {}
    for p, (mode, conf) in enumerate(CONFLUENT_MODES):
        sent[p] = sample(60, f"{codec}/{mode}")
        reports = confluent_produce(kafka.bootstrap, topic, p, sent[p], {"compression.type": codec, **conf})
        if conf.get("acks") != 0:  # acks=0 has no offsets to report
            assert reports == [(p, i) for i in range(60)], mode
    got = confluent_read(kafka.bootstrap, topic, range(len(CONFLUENT_MODES)))
    for p in sent:
        assert_read(got, p, sent[p])
    # The broker keeps the batch as the producer compressed it (never recompressed, never inflated).
    attrs = first_batch_attributes(kafka.kafka_address(leader_of(kafka, topic)), topic, 0)
    assert attrs & 0x7 == CODEC_BITS[codec]


# -- kafka-python 3 ------------------------------------------------------------------------------------------

KAFKA_PYTHON_MODES: list[tuple[str, dict[str, Any]]] = [
    ("idempotent", {}),  # kafka-python 3's default: enable_idempotence True, acks all
    ("acks=1", {"enable_idempotence": False, "acks": 1}),
    ("acks=0", {"enable_idempotence": False, "acks": 0}),
]


def kafka_python_read(bootstrap: str, topic: str, partitions: list[int], **conf: Any) -> list[Read]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    consumer = KafkaConsumer(bootstrap_servers=bootstrap.split(","), enable_auto_commit=False, group_id=None,
                             auto_offset_reset="earliest", **conf)
    try:
        tps = [KTP(topic, p) for p in partitions]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        out: list[Read] = []
        deadline = time.monotonic() + 30
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, "kafka-python did not reach the end offsets"
            for tp, msgs in consumer.poll(500).items():
                for m in msgs:
                    rec = Rec(m.key, m.value, tuple((h, v) for h, v in m.headers), m.timestamp)
                    # kafka-python's timestamp_type: 0 CreateTime, 1 LogAppendTime; report it as librdkafka does.
                    out.append(Read(tp.partition, m.offset, rec, TIMESTAMP_CREATE_TIME if m.timestamp_type == 0 else 2))
        return sorted(out, key=lambda r: (r.partition, r.offset))
    finally:
        consumer.close()


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
def test_kafka_python_every_codec_idempotent_and_acks_read_back_exactly(kafka: Kafka, codec: str | None) -> None:
    from kafka import KafkaProducer

    topic = new_topic(kafka, f"kp-{codec or 'none'}", partitions=len(KAFKA_PYTHON_MODES))
    sent = {}
    for p, (mode, conf) in enumerate(KAFKA_PYTHON_MODES):
        producer = KafkaProducer(bootstrap_servers=kafka.bootstrap.split(","), compression_type=codec, linger_ms=20,
                                 **conf)
        try:
            if mode == "idempotent":
                assert producer.config["enable_idempotence"], "kafka-python 3 is idempotent by default"
            sent[p] = sample(60, f"kp/{codec}/{mode}")
            futures = [producer.send(topic, value=r.value, key=r.key, headers=list(r.headers), partition=p,
                                     timestamp_ms=r.timestamp) for r in sent[p]]
            producer.flush(30)
            metas = [f.get(10) for f in futures]
        finally:
            producer.close(10)
        if conf.get("acks") != 0:
            assert [m.offset for m in metas] == list(range(60)), mode
            assert [m.timestamp for m in metas] == [r.timestamp for r in sent[p]]
    got = kafka_python_read(kafka.bootstrap, topic, list(sent))
    for p in sent:
        assert_read(got, p, sent[p])


# -- aiokafka ------------------------------------------------------------------------------------------------


def test_aiokafka_idempotent_producer_every_codec_and_assigned_consumer(kafka: Kafka) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka import TopicPartition as ATP

    codecs = [None, "gzip", "snappy", "lz4", "zstd"]
    topic = new_topic(kafka, "aio", partitions=len(codecs))
    sent = {p: sample(40, f"aio/{c}") for p, c in enumerate(codecs)}

    async def run() -> list[Read]:
        for p, codec in enumerate(codecs):
            producer = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap, compression_type=codec,
                                        enable_idempotence=True, linger_ms=20)
            await producer.start()
            try:
                futures = [await producer.send(topic, value=r.value, key=r.key, headers=list(r.headers), partition=p,
                                               timestamp_ms=r.timestamp) for r in sent[p]]
                metas = [await f for f in futures]
            finally:
                await producer.stop()
            assert [m.offset for m in metas] == list(range(40)), codec
        consumer = AIOKafkaConsumer(bootstrap_servers=kafka.bootstrap, enable_auto_commit=False,
                                    auto_offset_reset="earliest")
        await consumer.start()
        try:
            tps = [ATP(topic, p) for p in sent]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            out: list[Read] = []
            deadline = time.monotonic() + 30
            while len(out) < 40 * len(codecs):
                assert time.monotonic() < deadline, f"aiokafka read {len(out)} records"
                for tp, msgs in (await consumer.getmany(timeout_ms=500)).items():
                    out += [Read(tp.partition, m.offset, Rec(m.key, m.value, tuple(m.headers), m.timestamp),
                                  TIMESTAMP_CREATE_TIME if m.timestamp_type == 0 else 2) for m in msgs]
            return sorted(out, key=lambda r: (r.partition, r.offset))
        finally:
            await consumer.stop()

    got = asyncio.run(run())
    for p in sent:
        assert_read(got, p, sent[p])


# -- kcat -----------------------------------------------------------------------------------------------------


def kcat(*args: str, stdin: str | None = None) -> str:
    done = subprocess.run([KCAT, *args], input=stdin, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_kcat_lists_the_cluster_writes_keys_and_headers_and_reads_them_back(kafka: Kafka) -> None:
    topic = new_topic(kafka, "kcat")
    md = json.loads(kcat("-b", kafka.bootstrap, "-L", "-J", "-t", topic))
    brokers = {b["id"]: b["name"] for b in md["brokers"]}
    assert brokers == {int(p.id): p.info["kafka"] for p in kafka.cluster.procs("broker")}
    (t,) = md["topics"]
    assert t["topic"] == topic and [p["partition"] for p in t["partitions"]] == [0]
    assert t["partitions"][0]["leader"] in brokers

    lines = [f"key-{i}\tvalue {i} with : and spaces" for i in range(20)]
    kcat("-b", kafka.bootstrap, "-P", "-t", topic, "-p", "0", "-K", "\t", "-H", "origin=kcat", "-H", "n=1",
         stdin="\n".join(lines) + "\n")
    out = [json.loads(line) for line in kcat("-b", kafka.bootstrap, "-C", "-t", topic, "-e", "-q", "-J").splitlines()]
    assert [m["offset"] for m in out] == list(range(20))
    assert [(m["key"], m["payload"]) for m in out] == [tuple(line.split("\t", 1)) for line in lines]
    assert all(m["headers"] == ["origin", "kcat", "n", "1"] and m["tstype"] == "create" for m in out)


# -- interop with Tidelog's own (gRPC) client ------------------------------------------------------------------


def interop_sample(n: int, tag: str) -> list[Rec]:
    """As ``sample``, plus a header with a null value (Kafka allows it; every client here keeps it)."""
    return [Rec(r.key, r.value, r.headers + ((("null", None),) if i % 5 == 4 else ()), r.timestamp)
            for i, r in enumerate(sample(n, tag))]


def tidelog_read(k: Kafka, topic: str, partitions: int, expected: int) -> list[Read]:
    out: list[Read] = []
    with Consumer(k.grpc, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        deadline = time.monotonic() + 30
        while len(out) < expected:
            assert time.monotonic() < deadline, f"Tidelog's consumer read {len(out)} of {expected}"
            for r in consumer.poll(500):
                rec = Rec(r.key, r.value, tuple((h, v) for h, v in r.headers), r.timestamp)
                out.append(Read(r.partition, r.offset, rec, TIMESTAMP_CREATE_TIME if r.timestamp_type == 0 else 2))
    return sorted(out, key=lambda r: (r.partition, r.offset))


def test_records_written_by_tidelogs_grpc_client_read_identically_by_confluent_and_kafka_python(kafka: Kafka) -> None:
    topic = new_topic(kafka, "interop-in", partitions=2)
    sent = {p: interop_sample(80, f"tidelog/{p}") for p in range(2)}
    with Producer(kafka.grpc, linger_ms=5, compression_type="lz4") as producer:
        futures = [producer.send(topic, r.value, key=r.key, partition=p, headers=list(r.headers),
                                 timestamp=r.timestamp) for p, recs in sent.items() for r in recs]
        producer.flush()
        metas = [f.get(10) for f in futures]
    assert [(m.partition, m.offset) for m in metas] == [(p, i) for p in range(2) for i in range(80)]
    by_confluent = confluent_read(kafka.bootstrap, topic, range(2))
    by_kafka_python = kafka_python_read(kafka.bootstrap, topic, [0, 1])
    by_tidelog = tidelog_read(kafka, topic, 2, 160)
    for p in sent:
        assert_read(by_confluent, p, sent[p])
        assert_read(by_kafka_python, p, sent[p])
        assert_read(by_tidelog, p, sent[p])


def test_records_written_by_confluent_kafka_read_identically_by_tidelogs_grpc_client(kafka: Kafka) -> None:
    topic = new_topic(kafka, "interop-out", partitions=2)
    sent = {p: interop_sample(80, f"confluent/{p}") for p in range(2)}
    for p, recs in sent.items():
        confluent_produce(kafka.bootstrap, topic, p, recs, {"compression.type": "zstd" if p else "none"})
    got = tidelog_read(kafka, topic, 2, 160)
    for p in sent:
        assert_read(got, p, sent[p])


def test_both_doors_serve_the_same_stored_bytes(kafka: Kafka) -> None:
    topic = new_topic(kafka, "doors")
    confluent_produce(kafka.bootstrap, topic, 0, sample(50, "doors"), {"compression.type": "gzip", "linger.ms": 1})
    leader = leader_of(kafka, topic)
    with KafkaWire(kafka.kafka_address(leader)) as w:
        part = w.request(FETCH, 12, fetch_request(topic, 0, 0)).responses[0].partitions[0]
    assert part.error_code == 0 and part.high_watermark == 50
    with grpc.insecure_channel(kafka.cluster.proc("broker", leader).address) as channel:
        resp = pb_grpc.BrokerStub(channel).Fetch(pb.FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, topics=[
            pb.FetchTopic(name=topic, partitions=[pb.FetchPartition(partition=0, fetch_offset=0,
                                                                    partition_max_bytes=1 << 20)])]), timeout=10)
    assert resp.topics[0].partitions[0].records == bytes(part.records)


# -- ListOffsets ------------------------------------------------------------------------------------------------


def test_list_offsets_earliest_latest_and_by_timestamp(kafka: Kafka) -> None:
    from confluent_kafka import OFFSET_END
    from confluent_kafka import TopicPartition as CkTP

    topic = new_topic(kafka, "offsets")
    base = int(time.time() * 1000) - 100_000
    stamps = [base + 1000 * i for i in range(10)]
    stamps[6] = base + 50_000  # the largest timestamp sits in the middle of the log
    recs = [Rec(b"k%d" % i, b"v%d" % i, (), ts) for i, ts in enumerate(stamps)]
    confluent_produce(kafka.bootstrap, topic, 0, recs, {"linger.ms": 0, "batch.num.messages": 1})

    consumer = confluent_consumer(kafka.bootstrap)
    try:
        assert consumer.get_watermark_offsets(CkTP(topic, 0), timeout=10) == (0, 10)

        def at(ts: int) -> int:
            (tp,) = consumer.offsets_for_times([CkTP(topic, 0, ts)], timeout=10)
            assert tp.error is None
            return int(tp.offset)

        assert at(base - 1) == 0
        assert at(base) == 0
        assert at(base + 2500) == 3  # the first record at or after the time
        assert at(base + 3000) == 3
        assert at(base + 6000) == 6  # offset 6 carries base + 50 s: the first whose time is >= base + 6 s
        assert at(base + 50_001) == OFFSET_END  # nothing that late
    finally:
        consumer.close()

    with KafkaWire(kafka.kafka_address(leader_of(kafka, topic))) as w:
        def raw(version: int, ts: int) -> Any:
            return w.request(LIST_OFFSETS, version, {"replica_id": -1, "isolation_level": 0, "topics": [
                {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1,
                                                "timestamp": ts}]}]}).topics[0].partitions[0]

        latest = raw(8, -1)
        assert (latest.error_code, latest.offset) == (0, 10)
        biggest = raw(7, MAX_TIMESTAMP)
        assert (biggest.error_code, biggest.offset, biggest.timestamp) == (0, 6, base + 50_000)


def test_list_offsets_v8_earliest_local_timestamp_is_answered(kafka: Kafka) -> None:
    """ListOffsets v8 (served) added EARLIEST_LOCAL_TIMESTAMP (-4): Kafka answers the local log start
    offset (the log start offset without tiered storage); it is not an invalid request."""
    topic = new_topic(kafka, "earliest-local")
    confluent_produce(kafka.bootstrap, topic, 0, sample(5, "el"), {})
    with KafkaWire(kafka.kafka_address(leader_of(kafka, topic))) as w:
        part = w.request(LIST_OFFSETS, 8, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1,
                                            "timestamp": EARLIEST_LOCAL_TIMESTAMP}]}]}).topics[0].partitions[0]
    assert (part.error_code, part.offset) == (0, 0)


# -- Metadata ----------------------------------------------------------------------------------------------------


def test_producing_to_a_missing_topic_creates_it_with_num_partitions(kafka: Kafka) -> None:
    topic = unique("auto")
    sent = sample(10, "auto")
    reports = confluent_produce(kafka.bootstrap, topic, None, sent, {})
    assert reports == [(0, i) for i in range(10)]
    assert len(kafka.admin.describe_topic(topic)["partitions"]) == 1  # num.partitions 1
    assert_read(confluent_read(kafka.bootstrap, topic, [0]), 0, sent)


def test_metadata_without_allow_auto_topic_creation_does_not_create(kafka: Kafka) -> None:
    topic = unique("no-auto")
    addr = kafka.bootstrap.split(",")[0]
    with KafkaWire(addr) as w:
        resp = w.request(METADATA, 12, {"topics": [{"name": topic}], "allow_auto_topic_creation": False,
                                        "include_topic_authorized_operations": False})
    assert [(t.name, t.error_code) for t in resp.topics] == [(topic, UNKNOWN_TOPIC_OR_PARTITION)]
    assert topic not in kafka.admin.list_topics()


def test_metadata_for_all_topics_from_librdkafka(kafka: Kafka) -> None:
    """librdkafka (2.16) asks for all topics (Metadata v12, topics null) with three stray bytes after the
    body, which Kafka's request parser ignores: list_topics() must work, as against Kafka."""
    from confluent_kafka.admin import AdminClient

    topic = new_topic(kafka, "all-topics")
    md = AdminClient({"bootstrap.servers": kafka.bootstrap}).list_topics(timeout=10)
    assert {b.id for b in md.brokers.values()} == {int(p.id) for p in kafka.cluster.procs("broker")}
    assert topic in md.topics


def test_a_broker_with_auto_create_topics_disabled_refuses(make_cluster: Any) -> None:
    c = make_cluster(controllers=1, brokers=1, coordinators=0, cleaners=0, quotas=0,
                     extra_env={"TIDELOG_AUTO_CREATE_TOPICS_ENABLE": "false"})
    topic = unique("refused")
    with KafkaWire(kafka_bootstrap(c)) as w:
        resp = w.request(METADATA, 12, {"topics": [{"name": topic}], "allow_auto_topic_creation": True,
                                        "include_topic_authorized_operations": False})
    assert [(t.name, t.error_code) for t in resp.topics] == [(topic, UNKNOWN_TOPIC_OR_PARTITION)]
    with Admin(grpc_bootstrap(c)) as admin:
        assert topic not in admin.list_topics()


# -- fetch sessions (KIP-227) ---------------------------------------------------------------------------------------


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[tuple[int, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append((record.levelno, record.getMessage()))


def test_kafka_python_incremental_fetch_sessions_lose_and_duplicate_nothing(kafka: Kafka) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTP

    partitions, rounds, per_round = 8, 12, 40
    topic = new_topic(kafka, "sessions", partitions=partitions)
    fetcher_log = logging.getLogger("kafka.consumer.fetcher")
    collect = _Collect()
    fetcher_log.addHandler(collect)
    old_level = fetcher_log.level
    fetcher_log.setLevel(logging.DEBUG)
    producer = KafkaProducer(bootstrap_servers=kafka.bootstrap.split(","), linger_ms=5)
    # Small fetches: every poll reads a little of a few partitions, so sessions change at every epoch.
    consumer = KafkaConsumer(bootstrap_servers=kafka.bootstrap.split(","), enable_auto_commit=False, group_id=None,
                             auto_offset_reset="earliest", max_partition_fetch_bytes=512, fetch_max_bytes=2048,
                             fetch_max_wait_ms=100, max_poll_records=25)
    sent: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
    try:
        consumer.assign([KTP(topic, p) for p in range(partitions)])

        def poll() -> None:
            for tp, msgs in consumer.poll(100).items():
                got[tp.partition] += [(m.offset, m.value) for m in msgs]

        for r in range(rounds):
            # Each round writes to a different subset of partitions, so incremental responses differ.
            for i in range(per_round):
                p = (r + i * (1 + r % 3)) % partitions
                value = f"r{r}-i{i}-".encode() + b"x" * 100
                sent[p].append(value)
                producer.send(topic, value=value, partition=p)
            producer.flush(30)
            for _ in range(3):
                poll()
        total = rounds * per_round
        deadline = time.monotonic() + 30
        while sum(len(v) for v in got.values()) < total and time.monotonic() < deadline:
            poll()
        for _ in range(5):  # nothing more may arrive
            poll()
        # kafka-python's per-broker KIP-227 state, read before close() ends the sessions.
        sessions = {node: (h.next_metadata.session_id, h.next_metadata.epoch)
                    for node, h in consumer._fetcher._session_handlers.items()}
    finally:
        consumer.close()
        producer.close(10)
        fetcher_log.removeHandler(collect)
        fetcher_log.setLevel(old_level)
    for p in range(partitions):
        assert [o for o, _ in got[p]] == list(range(len(sent[p]))), f"partition {p}: lost or duplicated offsets"
        assert [v for _, v in got[p]] == sent[p], f"partition {p}: values"
    # Sessions were really used: one per broker leading a partition, carried on over many incremental epochs,
    # and the broker never refused one.
    assert sessions and all(sid > 0 and epoch > 5 for sid, epoch in sessions.values()), sessions
    incremental = [m for _, m in collect.messages if "sent an incremental fetch response for session" in m]
    assert len(incremental) > 10
    problems = [m for lvl, m in collect.messages if lvl >= logging.INFO and
                ("unable to process the fetch request" in m or "invalid" in m)]
    assert not problems, problems[:3]
    created = [m for _, m in collect.messages if "created a new incremental fetch session" in m]
    assert len(created) == len(sessions), created


def test_tidelogs_consumer_sees_kafka_clients_offsets_end_to_end(kafka: Kafka) -> None:
    """The end offsets Tidelog's client lists (gRPC) agree with what librdkafka was acknowledged."""
    topic = new_topic(kafka, "ends", partitions=3)
    for p in range(3):
        confluent_produce(kafka.bootstrap, topic, p, sample(10 * (p + 1), f"ends/{p}"), {})
    with Consumer(kafka.grpc) as consumer:
        ends = consumer.end_offsets([TopicPartition(topic, p) for p in range(3)])
    assert {tp.partition: off for tp, off in ends.items()} == {0: 10, 1: 20, 2: 30}
