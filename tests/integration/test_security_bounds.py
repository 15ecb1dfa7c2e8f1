"""Issue 23's bounds that hold even on a plaintext cluster, on real processes (real etcd, controller,
brokers, quota service), each one of the issue's attacks replayed:

- forged follower fetches (``replica_id`` of both paused followers, a wrong or absent ``replica_epoch``)
  neither move the high watermark nor let ``acks=all`` sends of an RF 3, ``min.insync.replicas=2``
  partition succeed (KIP-380's broker epoch, checked by the leader);
- forged ``ReportUsage`` streams claiming to be brokers 1-3 with huge usage for client id ``victim``
  cannot make the quota service decide, nor a broker answer, a throttle above Kafka's cap
  (``quota.window.num`` × ``quota.window.size.seconds`` = 11 s);
- a 2 GB size prefix on the Kafka port closes the connection without the broker's memory moving, and
  the broker goes on serving produces.
"""

from __future__ import annotations

import os
import signal
import socket
import struct
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from shared.client import Admin
from shared.errors import ErrorCode
from shared.proto import quota_pb2 as qpb
from shared.proto import quota_pb2_grpc as qpb_grpc
from shared.proto import tidelog_pb2 as pb
from shared.proto import tidelog_pb2_grpc as pb_grpc
from shared.records.builder import encode_batch
from tests.conftest import Cluster, kill_cluster, start_cluster, wait_for
from tests.integration.kafka_util import KafkaWire, Rec, build_batch, decode_response, encode_request, kafka_bootstrap

FAST_STOP = {"TIDELOG_CONTROLLED_SHUTDOWN_ENABLE": "false"}
PRODUCE_KEY = 0
THROTTLE_CAP_MS = 11 * 1000  # quota.window.num x quota.window.size.seconds, Kafka's defaults


# -- forged follower fetches ------------------------------------------------------------------------------


def full_isr(admin: Admin, topic: str) -> bool:
    p = admin.describe_topic(topic)["partitions"][0]
    return p["leader"] >= 0 and len(p["isr"]) == 3


def high_watermark(stub: Any, topic: str) -> int:
    resp = stub.ListOffsets(pb.ListOffsetsRequest(replica_id=-1, topics=[pb.ListOffsetsTopic(
        name=topic, partitions=[pb.ListOffsetsPartition(partition=0, timestamp=-1)])]), timeout=10)
    return resp.topics[0].partitions[0].offset


def forged_fetch(stub: Any, topic: str, replica_id: int, epoch: int, offset: int, session: bool) -> None:
    """One fetch claiming to be follower ``replica_id`` at ``offset`` (the leader's log end)."""
    req = pb.FetchRequest(replica_id=replica_id, replica_epoch=epoch, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20,
                          session_id=0, session_epoch=0 if session else -1,
                          topics=[pb.FetchTopic(name=topic, partitions=[pb.FetchPartition(
                              partition=0, fetch_offset=offset, partition_max_bytes=1 << 20)])])
    try:
        if session:
            for _ in stub.FetchStream(iter([req]), timeout=2):
                break
        else:
            stub.Fetch(req, timeout=2)
    except grpc.RpcError:
        pass


@pytest.fixture
def three_brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    # A long session timeout: the paused followers keep their registrations (and ISR places) meanwhile.
    c = start_cluster(str(tmp_path_factory.mktemp("forged-fetch")), controllers=1, brokers=3, coordinators=0,
                      cleaners=0, quotas=0, session_timeout_ms=15_000, extra_env=FAST_STOP)
    try:
        yield c
    finally:
        kill_cluster(c)


def test_forged_follower_fetches_move_no_high_watermark_and_acks_all_sends_fail(three_brokers: Cluster) -> None:
    c = three_brokers
    admin = Admin(",".join(p.address for p in c.procs("broker")))
    topic = f"forged-{uuid.uuid4().hex[:6]}"
    admin.create_topic(topic, partitions=1, replication_factor=3, configs={"min.insync.replicas": 2})
    wait_for(lambda: full_isr(admin, topic), 30, what="full ISR")
    leader = admin.describe_topic(topic)["partitions"][0]["leader"]
    followers = [b for b in (1, 2, 3) if b != leader]
    stub = pb_grpc.BrokerStub(grpc.insecure_channel(c.proc("broker", leader).address))
    produce = pb.ProduceRequest(acks=-1, timeout_ms=500, topics=[pb.ProduceTopicData(name=topic, partitions=[
        pb.ProducePartitionData(partition=0, records=encode_batch([(int(time.time() * 1000), None, b"ok", None)]))])])
    assert stub.Produce(produce, timeout=10).topics[0].partitions[0].error_code == 0  # replication works
    wait_for(lambda: high_watermark(stub, topic) == 1, 10, what="HW 1")

    forged_leo = [1]
    stop = threading.Event()

    def forge() -> None:  # both followers, at the leader's log end, absent and made-up epochs, both fetch paths
        n = 0
        while not stop.is_set():
            for f in followers:
                forged_fetch(stub, topic, f, (0, 12345, 2**40)[n % 3], forged_leo[0], session=n % 2 == 0)
            n += 1
            time.sleep(0.01)

    for f in followers:
        os.kill(c.proc("broker", f).pid, signal.SIGSTOP)
    forger = threading.Thread(target=forge, daemon=True)
    forger.start()
    codes = []
    try:
        for i in range(5):
            forged_leo[0] = 2 + i  # the log end once this send is appended
            resp = stub.Produce(produce, timeout=10)
            codes.append(resp.topics[0].partitions[0].error_code)
        hw = high_watermark(stub, topic)
    finally:
        stop.set()
        forger.join(10)
        for f in followers:
            os.kill(c.proc("broker", f).pid, signal.SIGCONT)
    assert ErrorCode.NONE not in codes, f"acks=all sends acknowledged on forged fetches: {codes}"
    assert set(codes) <= {ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NOT_ENOUGH_REPLICAS}, codes
    assert hw == 1, f"forged fetches moved the high watermark to {hw}"
    # The real followers (with their current epochs) catch up once resumed: the HW covers every append.
    wait_for(lambda: high_watermark(stub, topic) == 6, 30, what="the real followers to move the HW")
    admin.close()


# -- one broker with a quota service, a Kafka listener ---------------------------------------------------------


@pytest.fixture(scope="module")
def one_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = start_cluster(str(tmp_path_factory.mktemp("bounds")), controllers=1, brokers=1, coordinators=0, cleaners=0,
                      quotas=1, extra_env=FAST_STOP)
    try:
        yield c
    finally:
        kill_cluster(c)


def test_forged_usage_reports_cannot_throttle_a_client_beyond_the_quota_window(one_broker: Cluster) -> None:
    c = one_broker
    admin = Admin(c.proc("broker", 1).address)
    topic = f"victim-{uuid.uuid4().hex[:6]}"
    admin.create_topic(topic, 1, 1)
    victims = {"victim": 1e6, "victim-huge": 1e12}  # claimed bytes per 100 ms report: the scale, and absurd
    for client_id in victims:
        admin.alter_client_quotas([{"entity": {"client-id": client_id}, "ops": [{"key": "producer_byte_rate",
                                                                                "value": 1024}]}])
    quota = qpb_grpc.QuotaServiceStub(grpc.insecure_channel(c.procs("quota")[0].address))
    stop = threading.Event()
    forged_decisions: list[int] = []

    def reports(broker_id: int) -> Iterator[qpb.UsageReport]:
        seq = 0
        while not stop.is_set():
            seq += 1
            yield qpb.UsageReport(broker_id=broker_id, sequence=seq, usage=[qpb.Usage(
                quota_type=PRODUCE_KEY, user="ANONYMOUS", client_id=client_id, amount=amount)
                for client_id, amount in victims.items()])
            time.sleep(0.1)

    def forge(broker_id: int) -> None:
        try:
            for resp in quota.ReportUsage(reports(broker_id), timeout=30):
                forged_decisions.extend(d.throttle_time_ms for d in resp.decisions if d.client_id in victims)
        except grpc.RpcError:
            pass

    threads = [threading.Thread(target=forge, args=(b,), daemon=True) for b in (1, 2, 3)]
    for t in threads:
        t.start()
    try:
        time.sleep(1.5)  # 15 forged reports on each stream (Kafka's formula alone: ~14.6 million ms for victim)
        broker = pb_grpc.BrokerStub(grpc.insecure_channel(c.proc("broker", 1).address))
        client_id = "victim"

        def throttled() -> int | None:
            resp = broker.Produce(pb.ProduceRequest(acks=1, timeout_ms=5000, client_id=client_id, topics=[
                pb.ProduceTopicData(name=topic, partitions=[pb.ProducePartitionData(
                    partition=0, records=encode_batch([(int(time.time() * 1000), None, b"v", None)]))])]), timeout=15)
            return resp.throttle_time_ms or None

        # A new channel per call: a throttled connection is held (KIP-219), a new one answers at once.
        applied = []
        for client_id in [*victims, *victims]:
            broker = pb_grpc.BrokerStub(grpc.insecure_channel(c.proc("broker", 1).address))
            applied.append(wait_for(throttled, 10, what=f"the broker to throttle {client_id}"))
        totals = [t for v in victims for t in quota.DescribeUsage(qpb.DescribeUsageRequest(client_id=v), timeout=10).totals]
    finally:
        stop.set()
        for t in threads:
            t.join(10)
    assert forged_decisions and max(forged_decisions) <= THROTTLE_CAP_MS, max(forged_decisions)
    assert all(0 < ms <= THROTTLE_CAP_MS for ms in applied), applied
    assert totals and max(t.throttle_time_ms for t in totals) <= THROTTLE_CAP_MS
    for client_id in victims:
        admin.alter_client_quotas([{"entity": {"client-id": client_id}, "ops": [{"key": "producer_byte_rate",
                                                                                "remove": True}]}])
    admin.close()


def vm_rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_a_2gb_size_prefix_is_refused_before_allocating(one_broker: Cluster) -> None:
    c = one_broker
    pid = c.proc("broker", 1).pid
    kafka = kafka_bootstrap(c)
    before = vm_rss_kib(pid)
    for size in (2**31 - 1, 2**31, 2**32 - 1, 100 * 1024 * 1024 + 1):  # 2 GB, as unsigned, -1, over the default
        for _ in range(5):
            with KafkaWire(kafka) as w:
                w.send(struct.pack(">I", size) + b"\x00" * 64)
                assert w.closed_by_peer(10), f"size {size}: connection left open"
    # A prefix within socket.request.max.bytes but no body: nothing is allocated for what has not arrived.
    host, port = kafka.rsplit(":", 1)
    held = [socket.create_connection((host, int(port)), timeout=5) for _ in range(5)]
    try:
        for s in held:
            s.sendall(struct.pack(">i", 100 * 1024 * 1024) + b"\x00" * 1024)
        time.sleep(1.0)
        grown_kib = vm_rss_kib(pid) - before
        assert grown_kib < 32 * 1024, f"broker RSS grew by {grown_kib} KiB"
    finally:
        for s in held:
            s.close()
    assert c.proc("broker", 1).popen is None or c.proc("broker", 1).popen.poll() is None
    admin = Admin(c.proc("broker", 1).address)
    topic = f"after-{uuid.uuid4().hex[:6]}"
    admin.create_topic(topic, 1, 1)
    admin.close()
    batch = build_batch([Rec(None, b"still-serving", (), int(time.time() * 1000))])

    def produced() -> bool:
        with KafkaWire(kafka) as w:
            w.send(encode_request(PRODUCE_KEY, 9, {"transactional_id": None, "acks": -1, "timeout": 5000,
                                                   "topic_data": [{"name": topic, "partition_data": [
                                                       {"index": 0, "records": batch}]}]}, 7))
            frame = w.read_frame()
        assert frame is not None
        _, body = decode_response(PRODUCE_KEY, 9, frame)
        return body.responses[0].partition_responses[0].error_code == 0

    wait_for(produced, 20, what="a produce on the Kafka port")


def test_a_grpc_message_over_the_receive_bound_is_refused(one_broker: Cluster) -> None:
    """gRPC's bound (``shared.service.GRPC_MAX_RECEIVE_MESSAGE_BYTES``, 64 MiB): a larger message is refused
    with RESOURCE_EXHAUSTED and the broker goes on serving."""
    from shared.service import GRPC_MAX_RECEIVE_MESSAGE_BYTES

    c = one_broker
    address = c.proc("broker", 1).address
    with grpc.insecure_channel(address, options=[("grpc.max_send_message_length", -1)]) as channel:
        stub = pb_grpc.BrokerStub(channel)
        big = pb.ProduceRequest(acks=1, timeout_ms=5000, topics=[pb.ProduceTopicData(name="nowhere", partitions=[
            pb.ProducePartitionData(partition=0, records=b"\x00" * (GRPC_MAX_RECEIVE_MESSAGE_BYTES + 1))])])
        with pytest.raises(grpc.RpcError) as err:
            stub.Produce(big, timeout=30)
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, err.value
        del big
    with grpc.insecure_channel(address) as channel:
        assert pb_grpc.BrokerStub(channel).Metadata(pb.MetadataRequest(), timeout=10).brokers
