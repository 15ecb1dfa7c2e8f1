"""The transaction coordinator on a real cluster (2 brokers, 2 coordinators, real etcd), driven by a raw
gRPC client: InitProducerId, AddPartitionsToTxn, transactional produce, EndTxn; the markers reach the
partition leaders (Broker.WriteTxnMarkers) and a plain consumer sees the data and the COMMIT markers; a
second producer fences the first; a transaction left open past its timeout is aborted by the
coordinator; kill -9 of the coordinator that owns a transaction just prepared, and the survivor
completes it."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest

from shared.client import Admin, Consumer, TopicPartition
from shared.errors import ErrorCode
from shared.proto import coordinator_pb2 as cpb
from shared.proto import coordinator_pb2_grpc as cpb_grpc
from shared.proto import tidelog_pb2 as pb
from shared.proto import tidelog_pb2_grpc as pb_grpc
from shared.proto import transactions_pb2 as tpb
from shared.proto import transactions_pb2_grpc as tpb_grpc
from shared.records.builder import encode_batch
from shared.records.decoder import control_record_type, decode_records, records_section
from shared.records.header import iter_batches
from tests.conftest import Cluster, kill_cluster, start_cluster, wait_for

E = ErrorCode
TOPIC = "txn-out"
STALL = "txn-stall"
CONTROL_ABORT, CONTROL_COMMIT = 0, 1
ENV = {"TIDELOG_TRANSACTION_ABORT_TIMED_OUT_TRANSACTION_CLEANUP_INTERVAL_MS": "200"}
#: answers a client retries (at the coordinator FindCoordinator names then)
RETRIABLE = {E.NOT_COORDINATOR, E.COORDINATOR_LOAD_IN_PROGRESS, E.COORDINATOR_NOT_AVAILABLE, E.CONCURRENT_TRANSACTIONS}


@pytest.fixture(scope="module")
def txc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TxnClient]:
    c = start_cluster(str(tmp_path_factory.mktemp("txn-cluster")), controllers=1, brokers=2, coordinators=2,
                      cleaners=0, quotas=0, extra_env=ENV)
    client = TxnClient(c)
    try:
        client.admin.create_topic(TOPIC, partitions=2, replication_factor=2)
        yield client
    finally:
        client.admin.close()
        kill_cluster(c)


class TxnClient:
    """A raw transactional client: finds the coordinator of an id and retries what Kafka clients retry."""

    def __init__(self, c: Cluster) -> None:
        self.c = c
        self.bootstrap = ",".join(p.address for p in c.procs("broker"))
        self.admin = Admin(self.bootstrap)
        self.broker = pb_grpc.BrokerStub(grpc.insecure_channel(c.procs("broker")[0].address))
        self._channels: dict[str, grpc.Channel] = {}

    def channel(self, address: str) -> grpc.Channel:
        if address not in self._channels:
            self._channels[address] = grpc.insecure_channel(address)
        return self._channels[address]

    def find(self, txn_id: str) -> pb.GroupCoordinatorNode:
        def found() -> pb.GroupCoordinatorNode | None:
            for b in self.c.procs("broker"):  # the live ones
                try:
                    n = pb_grpc.BrokerStub(self.channel(b.address)).FindCoordinator(
                        pb.FindCoordinatorRequest(group_ids=[txn_id], key_type=1), timeout=5).coordinators[0]
                except grpc.RpcError:
                    continue
                return n if n.error_code == 0 else None
            return None
        return wait_for(found, 30, what=f"the coordinator of {txn_id}")

    def stub(self, txn_id: str) -> tpb_grpc.TransactionCoordinatorStub:
        return tpb_grpc.TransactionCoordinatorStub(self.channel(self.find(txn_id).address))

    def call(self, txn_id: str, method: str, request: Any, code: Callable[[Any], int] = lambda r: r.error_code,
             retry: set[ErrorCode] = RETRIABLE, timeout: float = 30) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            try:
                resp = getattr(self.stub(txn_id), method)(request, timeout=10)
            except grpc.RpcError as exc:  # a coordinator just killed
                if time.monotonic() > deadline:
                    raise
                resp, err = None, exc
            if resp is not None and code(resp) not in retry:
                return resp
            assert time.monotonic() < deadline, f"{method} of {txn_id}: still {resp or err}"
            time.sleep(0.1)

    def init(self, txn_id: str, timeout_ms: int = 60_000) -> tuple[int, int]:
        r = self.call(txn_id, "InitProducerId", tpb.TxnInitProducerIdRequest(
            transactional_id=txn_id, transaction_timeout_ms=timeout_ms, producer_id=-1, producer_epoch=-1))
        assert r.error_code == 0, r
        return r.producer_id, r.producer_epoch

    def add(self, txn_id: str, pid: int, epoch: int, partitions: list[int], topic: str = TOPIC) -> int:
        r = self.call(txn_id, "AddPartitionsToTxn", tpb.AddPartitionsToTxnRequest(
            transactional_id=txn_id, producer_id=pid, producer_epoch=epoch,
            topics=[tpb.TxnTopic(name=topic, partitions=partitions)]),
            code=lambda r: r.error_code or r.results[0].partitions[0].error_code)
        return r.error_code or max(p.error_code for t in r.results for p in t.partitions)

    def end(self, txn_id: str, pid: int, epoch: int, commit: bool) -> tpb.EndTxnResponse:
        return self.call(txn_id, "EndTxn", tpb.EndTxnRequest(transactional_id=txn_id, producer_id=pid,
                                                             producer_epoch=epoch, committed=commit),
                         retry=RETRIABLE - {E.CONCURRENT_TRANSACTIONS})

    def describe(self, txn_id: str) -> tpb.DescribedTransaction:
        r = self.call(txn_id, "DescribeTransactions", tpb.DescribeTransactionsRequest(transactional_ids=[txn_id]),
                      code=lambda r: r.transactions[0].error_code)
        return r.transactions[0]

    def leader(self, partition: int, topic: str = TOPIC) -> pb_grpc.BrokerStub:
        leader = self.admin.describe_topic(topic)["partitions"][partition]["leader"]
        address = {int(p.id): p.address for p in self.c.procs("broker")}[leader]
        return pb_grpc.BrokerStub(self.channel(address))

    def produce(self, txn_id: str, partition: int, pid: int, epoch: int, seq: int, values: list[bytes],
                topic: str = TOPIC) -> None:
        """A transactional batch; transactions V1 (the partition was added with AddPartitionsToTxn): the leader
        verifies it with the coordinator before appending (KIP-890 part 1)."""
        batch = encode_batch([(int(time.time() * 1000), None, v, None) for v in values], producer_id=pid,
                             producer_epoch=epoch, base_sequence=seq, transactional=True)

        def produced() -> bool:
            resp = self.leader(partition, topic).Produce(pb.ProduceRequest(
                acks=-1, timeout_ms=5000, transactional_id=txn_id, transaction_version=1, topics=[
                pb.ProduceTopicData(name=topic, partitions=[pb.ProducePartitionData(partition=partition, records=batch)])]),
                timeout=10).topics[0].partitions[0]
            assert resp.error_code in (0, E.NOT_LEADER_OR_FOLLOWER, E.UNKNOWN_TOPIC_OR_PARTITION), resp
            return resp.error_code == 0
        wait_for(produced, 30, what=f"a transactional batch in {topic}-{partition}")

    def log(self, partition: int, topic: str = TOPIC) -> list[tuple[int, bytes | None]]:
        """(control type, or -1 for data; the value of a data record) of every record of the partition,
        markers included."""
        resp = self.leader(partition, topic).Fetch(pb.FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, topics=[
            pb.FetchTopic(name=topic, partitions=[pb.FetchPartition(partition=partition, fetch_offset=0,
                                                                     partition_max_bytes=1 << 20)])]), timeout=10)
        buf = resp.topics[0].partitions[0].records
        out = []
        for pos, header in iter_batches(buf):
            for rec in decode_records(header, records_section(buf, header, pos)):
                out.append((control_record_type(rec), None) if header.is_control else (-1, rec.value))
        return out



def test_commit_reaches_the_leaders_and_a_consumer_sees_it(txc: TxnClient) -> None:
    pid, epoch = txc.init("tx-commit")
    assert txc.add("tx-commit", pid, epoch, [0, 1]) == 0
    for p in (0, 1):
        txc.produce("tx-commit", p, pid, epoch, 0, [f"c{p}-a".encode(), f"c{p}-b".encode()])
    assert txc.describe("tx-commit").state == "Ongoing"
    end = txc.end("tx-commit", pid, epoch, True)
    assert end.error_code == 0, end
    wait_for(lambda: txc.describe("tx-commit").state == "CompleteCommit", 20, what="CompleteCommit")
    for p in (0, 1):
        assert txc.log(p) == [(-1, f"c{p}-a".encode()), (-1, f"c{p}-b".encode()), (CONTROL_COMMIT, None)]
    consumer = Consumer(txc.bootstrap, auto_offset_reset="earliest")
    try:
        consumer.assign([TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)])
        seen: set[bytes] = set()
        deadline = time.monotonic() + 15
        while len(seen) < 4 and time.monotonic() < deadline:
            seen.update(r.value for r in consumer.poll(500) if r.value and r.value.startswith(b"c"))
        assert seen == {b"c0-a", b"c0-b", b"c1-a", b"c1-b"}
    finally:
        consumer.close()


def test_offsets_sent_to_the_transaction_are_committed_with_it(txc: TxnClient) -> None:
    """AddOffsetsToTxn, then TxnOffsetCommit at the group coordinator: the offsets become committed when
    the transaction coordinator completes the group's __consumer_offsets partition (CompleteTxnOffsets)."""
    pid, epoch = txc.init("tx-offsets")
    r = txc.call("tx-offsets", "AddOffsetsToTxn", tpb.AddOffsetsToTxnRequest(
        transactional_id="tx-offsets", producer_id=pid, producer_epoch=epoch, group_id="g-tx"))
    assert r.error_code == 0, r
    group = wait_for(lambda: (n := txc.broker.FindCoordinator(pb.FindCoordinatorRequest(group_ids=["g-tx"]),
                                                              timeout=5).coordinators[0]).error_code == 0 and n,
                     30, what="the group coordinator")
    gstub = cpb_grpc.GroupCoordinatorStub(txc.channel(group.address))
    commit = gstub.TxnOffsetCommit(cpb.TxnOffsetCommitRequest(
        transactional_id="tx-offsets", group_id="g-tx", producer_id=pid, producer_epoch=epoch, generation_id=-1,
        topics=[cpb.OffsetCommitTopic(name=TOPIC, partitions=[cpb.OffsetCommitPartition(
            partition=0, committed_offset=42, committed_leader_epoch=-1)])]), timeout=10)
    assert commit.error_code == 0, commit

    def committed() -> int:
        resp = gstub.OffsetFetch(cpb.OffsetFetchRequest(group_id="g-tx", partitions=[
            cpb.TopicPartitions(topic=TOPIC, partitions=[0])]), timeout=10)
        return resp.topics[0].partitions[0].committed_offset if resp.topics else -1

    assert committed() == -1  # pending until the transaction commits
    assert txc.end("tx-offsets", pid, epoch, True).error_code == 0
    wait_for(lambda: txc.describe("tx-offsets").state == "CompleteCommit", 20, what="CompleteCommit")
    assert committed() == 42


def test_a_second_producer_fences_the_first(txc: TxnClient) -> None:
    pid, first = txc.init("tx-fence")
    pid2, second = txc.init("tx-fence")  # a new producer instance of the same id
    assert pid2 == pid and second > first
    assert txc.add("tx-fence", pid, first, [0]) == E.PRODUCER_FENCED
    assert txc.end("tx-fence", pid, first, True).error_code == E.PRODUCER_FENCED
    # with a transaction open: the new producer's InitProducerId aborts it (CONCURRENT_TRANSACTIONS until done)
    assert txc.add("tx-fence", pid, second, [1]) == 0
    txc.produce("tx-fence", 1, pid, second, 0, [b"zombie"])
    pid3, third = txc.init("tx-fence")
    assert (pid3, third > second) == (pid, True)
    assert txc.describe("tx-fence").state in ("Empty", "CompleteAbort")
    assert txc.end("tx-fence", pid, second, True).error_code == E.PRODUCER_FENCED
    assert (CONTROL_ABORT, None) in txc.log(1)


def test_a_transaction_left_open_past_its_timeout_is_aborted(txc: TxnClient) -> None:
    pid, epoch = txc.init("tx-timeout", timeout_ms=1000)
    assert txc.add("tx-timeout", pid, epoch, [1]) == 0
    txc.produce("tx-timeout", 1, pid, epoch, 0, [b"never"])
    aborted = wait_for(lambda: (d := txc.describe("tx-timeout")).state in ("PrepareAbort", "CompleteAbort") and d,
                       15, what="the coordinator aborting the timed-out transaction")
    assert aborted.producer_epoch == epoch + 1  # bumped: the producer is fenced
    assert txc.end("tx-timeout", pid, epoch, True).error_code == E.PRODUCER_FENCED
    wait_for(lambda: txc.describe("tx-timeout").state == "CompleteAbort", 20, what="CompleteAbort")
    assert (CONTROL_ABORT, None) in txc.log(1)


def test_the_survivor_completes_a_transaction_its_killed_owner_prepared(make_cluster: Any) -> None:
    """Deterministic: one partition of the transaction is offline (its only replica's broker stopped), so
    its owner cannot finish the markers before it is killed; the survivor loads PrepareCommit and, once the
    partition is back, completes the commit. 3 brokers, so that __transaction_state (RF 3,
    min.insync.replicas 2) stays writable without the stopped one."""
    c = make_cluster(controllers=1, brokers=3, coordinators=2, cleaners=0, quotas=0, extra_env=ENV)
    txc = TxnClient(c)
    try:
        txc.admin.create_topic(TOPIC, partitions=1, replication_factor=3)
        txc.admin.create_topic(STALL, partitions=1, replication_factor=1)
        stall_broker = wait_for(lambda: txc.admin.describe_topic(STALL)["partitions"][0]["leader"] >= 0
                                and txc.admin.describe_topic(STALL)["partitions"][0]["leader"], 20, what="a leader")
        coords = {p.id: p for p in c.procs("coordinator")}
        wait_for(lambda: {txc.find(f"tx-kill-{i}").node_id for i in range(8)} == set(coords), 30,
                 what="both coordinators owning transactional ids")
        txn_id = "tx-kill-0"
        pid, epoch = txc.init(txn_id)
        assert txc.add(txn_id, pid, epoch, [0]) == 0
        assert txc.add(txn_id, pid, epoch, [0], topic=STALL) == 0
        txc.produce(txn_id, 0, pid, epoch, 0, [b"k0"])
        txc.produce(txn_id, 0, pid, epoch, 0, [b"s0"], topic=STALL)
        broker = c.proc("broker", stall_broker)
        os.kill(broker.pid, signal.SIGTERM)
        assert broker.popen is not None and broker.popen.wait(30) == 0
        owner = txc.find(txn_id)
        victim = coords[owner.node_id]
        survivor = next(p for i, p in coords.items() if i != owner.node_id)
        assert txc.end(txn_id, pid, epoch, True).error_code == 0  # PrepareCommit is durable
        time.sleep(0.5)
        assert txc.describe(txn_id).state == "PrepareCommit"  # STALL's marker cannot be written
        mark = os.path.getsize(survivor.log_path)
        os.kill(victim.pid, signal.SIGKILL)
        wait_for(lambda: txc.find(txn_id).node_id == survivor.id, 30, what="the survivor owning the id")
        d = txc.describe(txn_id)
        assert (d.state, d.producer_id, d.producer_epoch) == ("PrepareCommit", pid, epoch)
        wait_for(lambda: "resuming prepared transactions" in (t := _tail(survivor.log_path, mark)) and txn_id in t, 30,
                 what="the survivor resuming the commit")
        c.restart("broker", stall_broker)
        wait_for(lambda: txc.describe(txn_id).state == "CompleteCommit", 30, what="the survivor completing the commit")
        assert (CONTROL_COMMIT, None) in txc.log(0) and txc.log(0, STALL) == [(-1, b"s0"), (CONTROL_COMMIT, None)]
    finally:
        txc.admin.close()


def _tail(path: str, since: int) -> str:
    with open(path, "rb") as f:
        f.seek(since)
        return f.read().decode(errors="replace")


def test_leaders_verify_v1_batches_and_add_v2_partitions_with_the_coordinator(txc: TxnClient) -> None:
    """KIP-890: a V1 producer's batch for a partition it never added is refused (part 1); a V2 producer
    adds no partition itself: the leader adds it, so the commit's markers reach it (part 2)."""
    pid, epoch = txc.init("tx-verify")
    batch = encode_batch([(int(time.time() * 1000), None, b"stray", None)], producer_id=pid, producer_epoch=epoch,
                         base_sequence=0, transactional=True)

    def send(version: int) -> int:
        return txc.leader(0).Produce(pb.ProduceRequest(
            acks=-1, timeout_ms=5000, transactional_id="tx-verify", transaction_version=version, topics=[
                pb.ProduceTopicData(name=TOPIC, partitions=[pb.ProducePartitionData(partition=0, records=batch)])]),
            timeout=10).topics[0].partitions[0].error_code

    assert send(1) == E.TRANSACTION_ABORTABLE  # not in the transaction: nothing appended
    assert (-1, b"stray") not in txc.log(0)
    assert wait_for(lambda: send(2) == 0, 20, what="the leader adding the partition (V2)")
    assert [(t.name, list(t.partitions)) for t in txc.describe("tx-verify").topics] == [(TOPIC, [0])]
    assert txc.end("tx-verify", pid, epoch, True).error_code == 0
    wait_for(lambda: txc.describe("tx-verify").state == "CompleteCommit", 20, what="CompleteCommit")
    assert txc.log(0)[-2:] == [(-1, b"stray"), (CONTROL_COMMIT, None)]
