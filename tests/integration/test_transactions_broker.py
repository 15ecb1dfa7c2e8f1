"""Transactions as brokers see them, with real processes: transactional batches hold the last stable
offset, WriteTxnMarkers commits or aborts them (fenced by coordinator epoch), read_committed readers on
both doors (Tidelog's consumer, confluent-kafka) see committed records only, and a new leader after a
SIGKILL keeps the abort index it replicated. The test plays the transaction coordinator itself."""

from __future__ import annotations

import os
import signal
import uuid

import grpc
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from shared.client import Admin, Consumer, TopicPartition
from shared.errors import ErrorCode
from shared.proto import tidelog_pb2 as pb
from shared.proto import tidelog_pb2_grpc as pb_grpc
from shared.records.builder import encode_batch
from tests.conftest import wait_for
from tests.integration.kafka_util import kafka_bootstrap

COORDINATOR_EPOCH = 3


class Txn:
    """One producer's transactional writes to partition 0 of ``topic``, through the leader's gRPC door."""

    def __init__(self, stub: pb_grpc.BrokerStub, topic: str) -> None:
        resp = stub.InitProducerId(pb.InitProducerIdRequest())
        assert resp.error_code == 0
        self.stub, self.topic, self.pid, self.epoch, self.seq = stub, topic, resp.producer_id, 0, 0

    def send(self, *values: bytes) -> pb.ProducePartitionResponse:
        batch = encode_batch([(1_700_000_000_000, None, v, ()) for v in values], producer_id=self.pid,
                             producer_epoch=self.epoch, base_sequence=self.seq, transactional=True)
        resp = self.stub.Produce(pb.ProduceRequest(acks=-1, timeout_ms=5000, transactional_id="t", topics=[
            pb.ProduceTopicData(name=self.topic, partitions=[pb.ProducePartitionData(partition=0, records=batch)])]))
        r = resp.topics[0].partitions[0]
        if r.error_code == 0:
            self.seq += len(values)
        return r

    def end(self, commit: bool, coordinator_epoch: int = COORDINATOR_EPOCH) -> int:
        resp = self.stub.WriteTxnMarkers(pb.WriteTxnMarkersRequest(markers=[pb.WritableTxnMarker(
            producer_id=self.pid, producer_epoch=self.epoch, committed=commit, coordinator_epoch=coordinator_epoch,
            topics=[pb.WritableTxnMarkerTopic(name=self.topic, partitions=[0])])]))
        return resp.markers[0].topics[0].partitions[0].error_code


def values(bootstrap: str, topic: str, isolation: str, end: int) -> list[bytes]:
    with Consumer(bootstrap, isolation_level=isolation, auto_offset_reset="earliest") as c:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek(tp, 0)
        out: list[bytes] = []
        wait_for(lambda: out.extend(r.value for r in c.poll(500)) or c.position(tp) >= end, 20,
                 what=f"{isolation} reader at {end}")
        return out


def kafka_values(cluster: object, topic: str, end: int) -> list[bytes]:
    c = KafkaConsumer({"bootstrap.servers": kafka_bootstrap(cluster), "group.id": f"g-{uuid.uuid4().hex[:6]}",
                       "isolation.level": "read_committed", "enable.auto.commit": False})
    try:
        c.assign([KafkaTopicPartition(topic, 0, 0)])
        out: list[bytes] = []

        def caught_up() -> bool:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                out.append(m.value())
            return c.position([KafkaTopicPartition(topic, 0)])[0].offset >= end

        wait_for(caught_up, 30, what="confluent-kafka read_committed reader")
        return out
    finally:
        c.close()


def test_read_committed_sees_committed_transactions_only_on_both_doors_and_after_failover(make_cluster) -> None:
    # The test plays the transaction coordinator: the brokers do not ask a real one (KIP-890 verification off).
    c = make_cluster(controllers=1, brokers=2, coordinators=1, cleaners=0, quotas=0,
                     extra_env={"TIDELOG_TRANSACTION_PARTITION_VERIFICATION_ENABLE": "false"})
    brokers = {int(p.id): p for p in c.procs("broker")}
    bootstrap = ",".join(p.address for p in brokers.values())
    admin = Admin(bootstrap)
    topic = f"txn-{uuid.uuid4().hex[:6]}"
    admin.create_topic(topic, 1, 2)
    wait_for(lambda: len(admin.describe_topic(topic)["partitions"][0]["isr"]) == 2, 30, what="both replicas in sync")
    leader = admin.describe_topic(topic)["partitions"][0]["leader"]
    stub = pb_grpc.BrokerStub(grpc.insecure_channel(brokers[leader].address))

    committed, aborted, plain = Txn(stub, topic), Txn(stub, topic), Txn(stub, topic)
    assert committed.send(b"c1", b"c2").error_code == 0  # offsets 0-1
    assert aborted.send(b"a1").error_code == 0  # offset 2
    # An idempotent (non-transactional) batch of a producer inside its transaction: Kafka refuses it.
    bad = encode_batch([(1, None, b"x", ())], producer_id=aborted.pid, producer_epoch=0, base_sequence=1)
    r = stub.Produce(pb.ProduceRequest(acks=-1, timeout_ms=5000, topics=[pb.ProduceTopicData(
        name=topic, partitions=[pb.ProducePartitionData(partition=0, records=bad)])])).topics[0].partitions[0]
    assert r.error_code == ErrorCode.INVALID_TXN_STATE, r
    plain_batch = encode_batch([(1, None, b"p1", ())], producer_id=plain.pid, producer_epoch=0, base_sequence=0)
    stub.Produce(pb.ProduceRequest(acks=-1, timeout_ms=5000, topics=[pb.ProduceTopicData(
        name=topic, partitions=[pb.ProducePartitionData(partition=0, records=plain_batch)])]))  # offset 3

    # Both transactions open: the last stable offset holds at the first one's first offset.
    lso = stub.ListOffsets(pb.ListOffsetsRequest(replica_id=-1, isolation_level=1, topics=[
        pb.ListOffsetsTopic(name=topic, partitions=[pb.ListOffsetsPartition(partition=0, timestamp=-1)])]))
    assert lso.topics[0].partitions[0].offset == 0
    assert values(bootstrap, topic, "read_uncommitted", 4) == [b"c1", b"c2", b"a1", b"p1"]

    assert committed.end(commit=True) == 0  # marker at 4
    assert aborted.end(commit=False) == 0  # marker at 5
    # A deposed coordinator's marker (older coordinator epoch) is fenced.
    assert committed.end(commit=False, coordinator_epoch=COORDINATOR_EPOCH - 1) == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    assert values(bootstrap, topic, "read_committed", 6) == [b"c1", b"c2", b"p1"]
    assert kafka_values(c, topic, 6) == [b"c1", b"c2", b"p1"]

    # SIGKILL the leader: the follower that replicated the markers leads, with the same abort index.
    os.kill(brokers[leader].pid, signal.SIGKILL)
    follower = next(b for b in brokers if b != leader)
    wait_for(lambda: admin.describe_topic(topic)["partitions"][0]["leader"] == follower, 30, what="failover")
    survivors = brokers[follower].address
    assert values(survivors, topic, "read_committed", 6) == [b"c1", b"c2", b"p1"]
    assert values(survivors, topic, "read_uncommitted", 6) == [b"c1", b"c2", b"a1", b"p1"]
    admin.close()
