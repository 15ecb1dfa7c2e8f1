"""Kafka's transactional clients on the brokers' Kafka listener, unchanged (2 brokers, 1 coordinator,
real etcd): confluent-kafka's (librdkafka) transactional producer commits and aborts across two
partitions, seen (or not) by read_committed and read_uncommitted consumers; a consume-transform-produce
loop commits its input offsets with ``send_offsets_to_transaction`` (visible only after the commit); a
second producer with the same transactional.id fences the first; kafka-python's transactional producer
commits too; the requests by hand, for the leader's verification of a transactional produce (KIP-890) and
the errors each version can name."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from kafka.record.default_records import DefaultRecordBatchBuilder

from shared.client import Admin
from tests.conftest import Cluster, kill_cluster, start_cluster
from tests.integration.kafka_util import (
    API_VERSIONS,
    PRODUCE,
    KafkaWire,
    confluent_read,
    grpc_bootstrap,
    kafka_bootstrap,
    wait_partitions_led,
)

OFFSET_FETCH, FIND_COORDINATOR, INIT_PRODUCER_ID, ADD_PARTITIONS_TO_TXN, END_TXN = 9, 10, 22, 24, 26
DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 65, 66
RETRIABLE = (14, 15, 16, 51)  # COORDINATOR_LOAD_IN_PROGRESS, _NOT_AVAILABLE, NOT_COORDINATOR, CONCURRENT_TRANSACTIONS
INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE, UNSTABLE_OFFSET_COMMIT, TRANSACTION_ABORTABLE = 47, 48, 88, 120
# What the Kafka listener claims for the transaction APIs (and Produce, v12 being transactions V2's).
TXN_APIS = {0: (3, 11), 22: (0, 5), 24: (0, 3), 25: (0, 4), 26: (0, 4), 28: (0, 4), 65: (0, 0), 66: (0, 1)}
TXN_ENV = {"TIDELOG_GROUP_INITIAL_REBALANCE_DELAY_MS": "200", "TIDELOG_CONTROLLED_SHUTDOWN_ENABLE": "false"}


@dataclass
class Kafka:
    cluster: Cluster
    bootstrap: str
    tidelog: Admin

    def new_topic(self, prefix: str, partitions: int = 2) -> str:
        topic = f"{prefix}-{uuid.uuid4().hex[:8]}"
        self.tidelog.create_topic(topic, partitions=partitions, replication_factor=2)
        wait_partitions_led(self.bootstrap, topic, partitions)
        return topic


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kafka]:
    c = start_cluster(str(tmp_path_factory.mktemp("kafka-txn")), controllers=1, brokers=2, coordinators=1,
                      cleaners=0, quotas=0, extra_env=TXN_ENV)
    tidelog = Admin(grpc_bootstrap(c))
    try:
        yield Kafka(c, kafka_bootstrap(c), tidelog)
    finally:
        tidelog.close()
        kill_cluster(c)


def test_api_versions_lists_the_transaction_apis(kafka: Kafka) -> None:
    with KafkaWire(kafka.bootstrap.split(",")[0]) as w:
        r = w.request(API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
    claimed = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in r.api_keys}
    assert {k: claimed.get(k) for k in TXN_APIS} == TXN_APIS
    assert 27 not in claimed  # WriteTxnMarkers: coordinator to leaders, over gRPC


def txn_producer(k: Kafka, transactional_id: str, **conf: Any) -> Producer:
    p = Producer({"bootstrap.servers": k.bootstrap, "transactional.id": transactional_id, "linger.ms": 5, **conf})
    p.init_transactions(30)  # the first lookup creates __transaction_state: FindCoordinator retries meanwhile
    return p


def values(bootstrap: str, topic: str, isolation: str) -> list[bytes]:
    return [r.rec.value for r in confluent_read(bootstrap, topic, [0, 1], **{"isolation.level": isolation})]


def test_commit_and_abort_across_partitions(kafka: Kafka) -> None:
    topic = kafka.new_topic("ktx")
    p = txn_producer(kafka, f"tx-{topic}")
    p.begin_transaction()
    for i in range(6):
        p.produce(topic, value=f"c{i}".encode(), partition=i % 2)
    p.commit_transaction(30)
    p.begin_transaction()
    for i in range(4):
        p.produce(topic, value=f"a{i}".encode(), partition=i % 2)
    p.flush(30)  # the aborted records are in the log before the abort
    p.abort_transaction(30)
    p.begin_transaction()
    p.produce(topic, value=b"c6", partition=1)
    p.commit_transaction(30)
    committed = sorted(values(kafka.bootstrap, topic, "read_committed"))
    assert committed == [f"c{i}".encode() for i in range(7)]
    assert sorted(values(kafka.bootstrap, topic, "read_uncommitted")) == sorted(
        committed + [f"a{i}".encode() for i in range(4)])


def committed_offsets(k: Kafka, group: str, tps: list[TopicPartition], isolation: str) -> dict[int, int]:
    """OffsetFetch by librdkafka: under read_committed it sets require_stable (KIP-447) and retries while a
    transaction's offset commit is pending (UNSTABLE_OFFSET_COMMIT); read_uncommitted gets what is committed."""
    c = Consumer({"bootstrap.servers": k.bootstrap, "group.id": group, "enable.auto.commit": False,
                  "isolation.level": isolation})
    try:
        return {tp.partition: tp.offset for tp in c.committed(tps, timeout=20)}
    finally:
        c.close()


def test_consume_transform_produce_commits_offsets_with_the_output(kafka: Kafka) -> None:
    src, out = kafka.new_topic("ktx-in"), kafka.new_topic("ktx-out")
    plain = Producer({"bootstrap.servers": kafka.bootstrap})
    for i in range(10):
        plain.produce(src, value=str(i).encode(), partition=i % 2)
    assert plain.flush(30) == 0
    group = f"g-{src}"
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    consumer.subscribe([src])
    p = txn_producer(kafka, f"tx-{src}")
    try:
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < 10:
            assert time.monotonic() < deadline, f"consumed only {got}"
            for m in consumer.consume(10, 0.5):
                assert m.error() is None, m.error()
                got.append(m.value())
        p.begin_transaction()
        for v in got:
            p.produce(out, value=b"x" + v, partition=int(v) % 2)
        positions = consumer.position(consumer.assignment())
        assert sorted((tp.partition, tp.offset) for tp in positions) == [(0, 5), (1, 5)]
        p.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)
        tps = [TopicPartition(src, 0), TopicPartition(src, 1)]
        pending = committed_offsets(kafka, group, tps, "read_uncommitted")
        assert all(o < 0 for o in pending.values()), pending  # pending in the transaction, not committed
        with KafkaWire(kafka.bootstrap.split(",")[0]) as w:  # any broker forwards to the group's coordinator
            r = w.request(OFFSET_FETCH, 8, {"groups": [{"group_id": group, "topics": [
                {"name": src, "partition_indexes": [0, 1]}]}], "require_stable": True})
        assert [(p.partition_index, p.error_code, p.committed_offset) for p in r.groups[0].topics[0].partitions] == [
            (0, UNSTABLE_OFFSET_COMMIT, -1), (1, UNSTABLE_OFFSET_COMMIT, -1)]
        p.commit_transaction(30)
        assert committed_offsets(kafka, group, tps, "read_committed") == {0: 5, 1: 5}
        assert sorted(values(kafka.bootstrap, out, "read_committed")) == sorted(b"x" + v for v in got)
    finally:
        consumer.close()


def test_second_producer_fences_the_first(kafka: Kafka) -> None:
    topic = kafka.new_topic("ktx-fence")
    tid = f"tx-{topic}"
    first = txn_producer(kafka, tid)
    first.begin_transaction()
    first.produce(topic, value=b"zombie", partition=0)
    first.flush(30)
    second = txn_producer(kafka, tid)  # bumps the epoch and aborts the first's open transaction
    second.begin_transaction()
    second.produce(topic, value=b"live", partition=1)
    second.commit_transaction(30)
    with pytest.raises(KafkaException) as info:
        first.commit_transaction(30)
    err = info.value.args[0]
    assert err.fatal(), err
    assert err.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH), err
    assert values(kafka.bootstrap, topic, "read_committed") == [b"live"]


def txn_batch(value: bytes, producer_id: int, producer_epoch: int, base_sequence: int) -> bytes:
    """A transactional RecordBatch v2 encoded by kafka-python's builder (not Tidelog's)."""
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=True, producer_id=producer_id,
                                        producer_epoch=producer_epoch, base_sequence=base_sequence,
                                        batch_size=1 << 20)
    builder.append(0, int(time.time() * 1000), None, value, [])
    return bytes(builder.build())


def leader_address(k: Kafka, topic: str, partition: int) -> str:
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": k.bootstrap}).list_topics(topic, timeout=10)
    b = md.brokers[md.topics[topic].partitions[partition].leader]
    return f"{b.host}:{b.port}"


def find_txn_coordinator(k: Kafka, tid: str, timeout: float = 30.0) -> str:
    """FindCoordinator (key_type 1) as a client asks it, until answered (the first lookup creates
    __transaction_state): the Kafka address of the broker named."""
    deadline = time.monotonic() + timeout
    with KafkaWire(k.bootstrap.split(",")[0]) as w:
        while True:
            c = w.request(FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": [tid]}).coordinators[0]
            if c.error_code == 0:
                return f"{c.host}:{c.port}"
            assert time.monotonic() < deadline, f"no transaction coordinator for {tid}: {c}"
            time.sleep(0.2)


def init_producer_id(k: Kafka, tid: str, version: int, timeout: float = 30.0) -> Any:
    """InitProducerId at the coordinator, retried while retriable (loading, moving, a transaction
    completing), as clients retry."""
    deadline = time.monotonic() + timeout
    body: dict[str, Any] = {"transactional_id": tid, "transaction_timeout": 60_000}
    if version >= 3:
        body.update(producer_id=-1, producer_epoch=-1)
    while True:
        with KafkaWire(find_txn_coordinator(k, tid)) as w:
            init = w.request(INIT_PRODUCER_ID, version, body)
        if init.error_code not in RETRIABLE or time.monotonic() > deadline:
            return init
        time.sleep(0.2)


def test_raw_requests_and_produce_verification(kafka: Kafka) -> None:
    """The requests librdkafka sends, by hand: the leader appends a transactional batch only for a partition
    the client added (KIP-890 part 1); otherwise TRANSACTION_ABORTABLE from Produce v11, INVALID_TXN_STATE
    before it (the error those versions know)."""
    topic = kafka.new_topic("ktx-raw")
    tid = f"tx-{topic}"
    init = init_producer_id(kafka, tid, 4)
    assert init.error_code == 0 and init.producer_id >= 0
    with KafkaWire(find_txn_coordinator(kafka, tid)) as w:
        pid, epoch = init.producer_id, init.producer_epoch
        add = w.request(ADD_PARTITIONS_TO_TXN, 3, {
            "v3_and_below_transactional_id": tid, "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": epoch, "v3_and_below_topics": [{"name": topic, "partitions": [1]}]})
        assert [(p.partition_index, p.partition_error_code)
                for p in add.results_by_topic_v3_and_below[0].results_by_partition] == [(1, 0)]

    def produce(partition: int, version: int, value: bytes, seq: int) -> int:
        with KafkaWire(leader_address(kafka, topic, partition)) as w:
            r = w.request(PRODUCE, version, {"transactional_id": tid, "acks": -1, "timeout": 5000, "topic_data": [
                {"name": topic, "partition_data": [{"index": partition,
                                                    "records": txn_batch(value, pid, epoch, seq)}]}]})
        return int(r.responses[0].partition_responses[0].error_code)

    assert produce(0, 9, b"not-added", 0) == INVALID_TXN_STATE
    assert produce(0, 11, b"not-added", 0) == TRANSACTION_ABORTABLE
    assert produce(1, 9, b"added", 0) == 0
    with KafkaWire(kafka.bootstrap.split(",")[-1]) as w:
        end = w.request(END_TXN, 3, {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
                                     "committed": False})
        assert end.error_code == 0
    again = init_producer_id(kafka, tid, 2)  # CONCURRENT_TRANSACTIONS while the abort completes: retried
    assert again.error_code == 0 and (again.producer_id, again.producer_epoch) != (pid, epoch)
    with KafkaWire(find_txn_coordinator(kafka, tid)) as w:
        stale = w.request(END_TXN, 1, {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
                                       "committed": True})
        assert stale.error_code == INVALID_PRODUCER_EPOCH  # PRODUCER_FENCED, as EndTxn v1 names it
    assert values(kafka.bootstrap, topic, "read_committed") == []
    assert values(kafka.bootstrap, topic, "read_uncommitted") == [b"added"]


def test_describe_and_list_transactions(kafka: Kafka) -> None:
    """kafka-transactions.sh's describe (any broker forwards to the id's coordinator) and list (asked of
    every broker, each listing what it is the coordinator of: the union names each id once)."""
    topic = kafka.new_topic("ktx-desc")
    tid = f"tx-{topic}"
    p = txn_producer(kafka, tid)
    p.begin_transaction()
    p.produce(topic, value=b"open", partition=1)
    p.flush(30)
    with KafkaWire(kafka.bootstrap.split(",")[-1]) as w:
        d = w.request(DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [tid]}).transaction_states[0]
    assert (d.error_code, d.transactional_id, d.transaction_state) == (0, tid, "Ongoing")
    assert [(t.topic, list(t.partitions)) for t in d.topics] == [(topic, [1])]
    listed = []
    for address in kafka.bootstrap.split(","):
        with KafkaWire(address) as w:
            r = w.request(LIST_TRANSACTIONS, 1, {"state_filters": ["Ongoing", "Bogus"], "producer_id_filters": [],
                                                 "duration_filter": -1})
        assert (r.error_code, list(r.unknown_state_filters)) == (0, ["Bogus"])
        listed += [(t.transactional_id, t.producer_id, t.transaction_state) for t in r.transaction_states]
    assert [x for x in listed if x[0] == tid] == [(tid, d.producer_id, "Ongoing")]
    p.commit_transaction(30)


def test_kafka_python_transactional_producer(kafka: Kafka) -> None:
    kafka_producer = pytest.importorskip("kafka").KafkaProducer
    topic = kafka.new_topic("ktx-kp")
    p = kafka_producer(bootstrap_servers=kafka.bootstrap, transactional_id=f"tx-{topic}", linger_ms=5)
    try:
        p.init_transactions()
        p.begin_transaction()
        for i in range(4):
            p.send(topic, value=f"k{i}".encode(), partition=i % 2)
        p.commit_transaction()
        p.begin_transaction()
        p.send(topic, value=b"gone", partition=0)
        p.flush()
        p.abort_transaction()
    finally:
        p.close(timeout=10)
    assert sorted(values(kafka.bootstrap, topic, "read_committed")) == [f"k{i}".encode() for i in range(4)]
    assert b"gone" in values(kafka.bootstrap, topic, "read_uncommitted")
