"""``tidelog transactions`` and ``/v1/transactions`` on a real cluster (2 brokers, a transaction
coordinator, real etcd): list and describe a real transactional id (driven through the coordinator's
gRPC API), and a hanging transaction — transactional data no coordinator knows of (a producer id from
Broker.InitProducerId, the brokers' KIP-890 verification off) — found by ``find-hanging``, holding a
read_committed consumer at its first offset until ``abort`` writes the ABORT marker."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import pytest
from click.testing import CliRunner

from shared.cli.main import cli
from shared.client import Admin, Consumer, TopicPartition
from shared.proto import tidelog_pb2 as pb
from shared.proto import tidelog_pb2_grpc as pb_grpc
from shared.proto import transactions_pb2 as tpb
from shared.proto import transactions_pb2_grpc as tpb_grpc
from shared.records.builder import encode_batch
from tests.conftest import Cluster, kill_cluster, start_cluster, wait_for
from tests.integration.kafka_util import KafkaWire

HUNG, REAL, TXN_ID = "hung", "txn-real", "tx-admin"
# Set when the module's cluster starts, not at import: under xdist a module may run a quarter of an hour
# after collection, and a stamp that old is past transaction.max.timeout.ms (15 minutes).
TWO_MINUTES_AGO = 0


@pytest.fixture(scope="module")
def cluster_(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, Admin]]:
    global TWO_MINUTES_AGO
    TWO_MINUTES_AGO = int(time.time() * 1000) - 120_000
    c = start_cluster(str(tmp_path_factory.mktemp("txn-admin")), controllers=1, brokers=2, coordinators=1,
                      cleaners=0, quotas=0, extra_env={"TIDELOG_TRANSACTION_PARTITION_VERIFICATION_ENABLE": "false"})
    admin = Admin(",".join(p.address for p in c.procs("broker")))
    try:
        for topic in (HUNG, REAL):
            admin.create_topic(topic, 1, 2)
            wait_for(lambda t=topic: len(admin.describe_topic(t)["partitions"][0]["isr"]) == 2, 30, what=f"{topic} in sync")
        yield c, admin
    finally:
        admin.close()
        kill_cluster(c)


def leader(c: Cluster, admin: Admin, topic: str) -> pb_grpc.BrokerStub:
    lead = admin.describe_topic(topic)["partitions"][0]["leader"]
    return pb_grpc.BrokerStub(grpc.insecure_channel({int(p.id): p.address for p in c.procs("broker")}[lead]))


def produce(stub: pb_grpc.BrokerStub, topic: str, value: bytes, transactional_id: str = "", **batch: Any) -> int:
    records = encode_batch([(TWO_MINUTES_AGO, None, value, ())], **batch)
    r = stub.Produce(pb.ProduceRequest(acks=-1, timeout_ms=5000, transactional_id=transactional_id, topics=[
        pb.ProduceTopicData(name=topic, partitions=[pb.ProducePartitionData(partition=0, records=records)])]),
        timeout=10).topics[0].partitions[0]
    assert r.error_code == 0, r
    return r.base_offset


def tidelog(c: Cluster, *args: str) -> str:
    out = CliRunner().invoke(cli, ["transactions", *args, "--rest", c.rest])
    assert out.exit_code == 0, out.output
    return out.output


def coordinator(c: Cluster, txn_id: str) -> tpb_grpc.TransactionCoordinatorStub:
    broker = pb_grpc.BrokerStub(grpc.insecure_channel(c.procs("broker")[0].address))

    def found() -> pb.GroupCoordinatorNode | None:
        n = broker.FindCoordinator(pb.FindCoordinatorRequest(group_ids=[txn_id], key_type=1), timeout=5).coordinators[0]
        return n if n.error_code == 0 else None
    node = wait_for(found, 30, what=f"the coordinator of {txn_id}")
    return tpb_grpc.TransactionCoordinatorStub(grpc.insecure_channel(node.address))


def test_list_and_describe_a_transactional_id(cluster_: tuple[Cluster, Admin]) -> None:
    c, admin = cluster_
    stub = coordinator(c, TXN_ID)
    init = wait_for(lambda: (r := stub.InitProducerId(tpb.TxnInitProducerIdRequest(
        transactional_id=TXN_ID, transaction_timeout_ms=300_000, producer_id=-1, producer_epoch=-1), timeout=10)
    ).error_code == 0 and r, 30, what="InitProducerId")
    pid, epoch = init.producer_id, init.producer_epoch
    added = stub.AddPartitionsToTxn(tpb.AddPartitionsToTxnRequest(
        transactional_id=TXN_ID, producer_id=pid, producer_epoch=epoch, topics=[tpb.TxnTopic(name=REAL, partitions=[0])]),
        timeout=10)
    assert added.error_code == 0 and added.results[0].partitions[0].error_code == 0, added
    produce(leader(c, admin, REAL), REAL, b"real", TXN_ID, producer_id=pid, producer_epoch=epoch, base_sequence=0,
            transactional=True)

    described = httpx.get(f"{c.rest}/v1/transactions/{TXN_ID}", timeout=30).json()
    assert (described["state"], described["producer_id"], described["topic_partitions"]) == ("Ongoing", pid, [f"{REAL}-0"])
    listed = httpx.get(f"{c.rest}/v1/transactions", params={"state": "Ongoing"}, timeout=30).json()["transactions"]
    assert [(t["transactional_id"], t["producer_id"], t["state"]) for t in listed] == [(TXN_ID, pid, "Ongoing")]
    assert listed[0]["coordinator"] == described["coordinator"] == c.procs("coordinator")[0].id
    assert httpx.get(f"{c.rest}/v1/transactions", params={"state": "PrepareCommit"}, timeout=30).json() == {"transactions": []}
    assert httpx.get(f"{c.rest}/v1/transactions/nobody", timeout=30).status_code == 404

    # Open for two minutes as far as its last write says, but its coordinator holds the partition: not hanging.
    assert json.loads(tidelog(c, "find-hanging", "--topic", REAL, "--max-transaction-timeout", "1", "--json")) == []

    text = tidelog(c, "list")
    assert "TransactionalId" in text and TXN_ID in text and "Ongoing" in text
    text = tidelog(c, "describe", "--transactional-id", TXN_ID)
    assert "TopicPartitions" in text and f"{REAL}-0" in text
    producers = json.loads(tidelog(c, "describe-producers", "--topic", REAL, "--partition", "0", "--json"))
    assert [(p["producer_id"], p["current_txn_start_offset"]) for p in producers["active_producers"]] == [(pid, 0)]

    end = stub.EndTxn(tpb.EndTxnRequest(transactional_id=TXN_ID, producer_id=pid, producer_epoch=epoch, committed=True),
                      timeout=10)
    assert end.error_code == 0, end
    wait_for(lambda: httpx.get(f"{c.rest}/v1/transactions/{TXN_ID}", timeout=30).json()["state"] == "CompleteCommit",
             20, what="CompleteCommit")


def test_a_hanging_transaction_is_found_and_aborted(cluster_: tuple[Cluster, Admin]) -> None:
    c, admin = cluster_
    stub = leader(c, admin, HUNG)
    pid = stub.InitProducerId(pb.InitProducerIdRequest(), timeout=10).producer_id
    assert produce(stub, HUNG, b"before") == 0
    # No coordinator knows this producer: its transaction will never get a marker.
    assert produce(stub, HUNG, b"hung", producer_id=pid, producer_epoch=0, base_sequence=0, transactional=True) == 1
    assert produce(stub, HUNG, b"after") == 2

    # Within the default transaction.max.timeout.ms (15 minutes) it could still be a live transaction.
    assert json.loads(tidelog(c, "find-hanging", "--topic", HUNG, "--json")) == []
    [row] = json.loads(tidelog(c, "find-hanging", "--topic", HUNG, "--max-transaction-timeout", "1", "--json"))
    assert (row["topic"], row["partition"], row["producer_id"], row["producer_epoch"], row["start_offset"],
            row["coordinator_epoch"], row["last_timestamp"]) == (HUNG, 0, pid, 0, 1, -1, TWO_MINUTES_AGO)
    by_broker = httpx.get(f"{c.rest}/v1/transactions/hanging", params={
        "broker": admin.describe_topic(HUNG)["partitions"][0]["leader"], "max_transaction_timeout_ms": 60_000},
        timeout=30).json()["hanging"]
    assert [(h["topic"], h["producer_id"]) for h in by_broker] == [(HUNG, pid)]
    assert "Duration(min)" in tidelog(c, "find-hanging", "--topic", HUNG, "--max-transaction-timeout", "1")
    assert httpx.get(f"{c.rest}/v1/transactions/hanging", timeout=30).status_code == 400  # no topic, no broker
    # The Kafka door's DescribeProducers (61) reports the same open transaction.
    lead = admin.describe_topic(HUNG)["partitions"][0]["leader"]
    with KafkaWire(str(c.proc("broker", lead).info["kafka"])) as conn:
        [state] = conn.request(61, 0, {"topics": [{"name": HUNG, "partition_indexes": [0]}]}).topics[0].partitions[0].active_producers
    assert (state.producer_id, state.current_txn_start_offset, state.coordinator_epoch) == (pid, 1, -1)

    tp = TopicPartition(HUNG, 0)
    with Consumer(admin.bootstrap_servers, isolation_level="read_committed", auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        seen: list[bytes] = []
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            seen.extend(r.value for r in consumer.poll(200))
        assert (seen, consumer.position(tp)) == ([b"before"], 1)  # held at the last stable offset

        assert "Aborted" in tidelog(c, "abort", "--topic", HUNG, "--partition", "0", "--start-offset", "1")
        wait_for(lambda: seen.extend(r.value for r in consumer.poll(200)) or consumer.position(tp) >= 4, 20,
                 what="the read_committed consumer past the ABORT marker")
        assert seen == [b"before", b"after"]
    assert json.loads(tidelog(c, "find-hanging", "--topic", HUNG, "--max-transaction-timeout", "0", "--json")) == []
    # Already aborted: nothing starts at that offset any more.
    r = httpx.post(f"{c.rest}/v1/transactions/abort", json={"topic": HUNG, "partition": 0, "start_offset": 1}, timeout=30)
    assert (r.status_code, r.json()["error"]) == (400, "INVALID_REQUEST")

    # Kafka's older form: the producer named by id, epoch and coordinator epoch (-1: it never saw a marker).
    pid2 = stub.InitProducerId(pb.InitProducerIdRequest(), timeout=10).producer_id
    assert produce(stub, HUNG, b"hung-2", producer_id=pid2, producer_epoch=0, base_sequence=0, transactional=True) == 4
    assert lso(stub) == 4
    tidelog(c, "abort", "--topic", HUNG, "--partition", "0", "--producer-id", str(pid2), "--producer-epoch", "0",
            "--coordinator-epoch", "-1")
    assert lso(stub) == 6  # past the marker at 5


def lso(stub: pb_grpc.BrokerStub) -> int:
    """ListOffsets latest under read_committed: the last stable offset."""
    r = stub.ListOffsets(pb.ListOffsetsRequest(replica_id=-1, isolation_level=1, topics=[
        pb.ListOffsetsTopic(name=HUNG, partitions=[pb.ListOffsetsPartition(partition=0, timestamp=-1)])]), timeout=10)
    return r.topics[0].partitions[0].offset
