"""Replication under faults, with real processes: SIGKILL and SIGSTOP of brokers (leaders included) and of
the active controller, while idempotent acks=all producers and a consumer run. Nothing acknowledged may be lost."""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time

import grpc
import pytest

from shared.client import Admin, Consumer, Producer, TopicPartition
from shared.errors import ErrorCode, TidelogError
from shared.proto import tidelog_pb2 as pb
from shared.proto import tidelog_pb2_grpc as pb_grpc
from shared.records.builder import encode_batch
from tests.conftest import TEST_SESSION_TIMEOUT_MS, wait_for
from tests.integration.chaos import Workload, check_no_loss, read_replica_logs, replicas_converged

LAG_MS = 3000
ENV = {"TIDELOG_REPLICA_LAG_TIME_MAX_MS": str(LAG_MS), "TIDELOG_LEADER_IMBALANCE_CHECK_INTERVAL_SECONDS": "5"}


@pytest.fixture
def replicated(make_cluster):
    c = make_cluster(controllers=2, brokers=3, cleaners=0, coordinators=0, quotas=0, extra_env=ENV)
    bootstrap = ",".join(p.address for p in c.procs("broker"))
    admin = Admin(bootstrap)
    yield c, bootstrap, admin
    admin.close()


def full_isr(admin: Admin, topic: str, rf: int = 3) -> bool:
    return all(len(p["isr"]) == rf and p["leader"] >= 0 for p in admin.describe_topic(topic)["partitions"])


def active_controller(c) -> int:
    return c.cluster_view()["controller"]["id"]


def broker_alive(c, bid: int) -> bool:
    return bid in [b["id"] for b in c.cluster_view()["brokers"]]


def test_no_acknowledged_record_is_lost_under_kills_and_pauses(replicated) -> None:
    c, bootstrap, admin = replicated
    topic = "chaos"
    admin.create_topic(topic, partitions=2, replication_factor=3, configs={"min.insync.replicas": 2})
    wait_for(lambda: full_isr(admin, topic), 20, what="full ISR")
    work = Workload(bootstrap, topic, partitions=2, producers=2, rate_per_producer=250)
    work.start()
    rng = random.Random(int(os.environ.get("TIDELOG_CHAOS_SEED", "20261122")))
    actions = ["kill-leader", "pause-leader", "kill-controller", "kill-broker", "pause-controller", "pause-broker"]
    log: list[str] = []
    try:
        time.sleep(1.5)
        for action in actions:
            desc = admin.describe_topic(topic)["partitions"]
            if action.endswith("leader"):
                victim = ("broker", rng.choice([p["leader"] for p in desc]))
            elif action.endswith("broker"):
                victim = ("broker", rng.choice([1, 2, 3]))
            else:
                victim = ("controller", active_controller(c))
            proc = c.proc(*victim)
            log.append(f"{action} {victim}")
            if action.startswith("kill"):
                os.kill(proc.pid, signal.SIGKILL)
                proc.popen.wait(10)
                time.sleep(rng.uniform(0.5, 2.0))
                c.restart(victim[0], victim[1])
            else:
                os.kill(proc.pid, signal.SIGSTOP)
                time.sleep(TEST_SESSION_TIMEOUT_MS / 1000 + rng.uniform(0.5, 1.5))  # long enough to lose its lease
                os.kill(proc.pid, signal.SIGCONT)
            wait_for(lambda: len(c.cluster_view()["brokers"]) == 3, 30, what="all brokers registered")
            wait_for(lambda: full_isr(admin, topic), 60, what=f"full ISR after {action}")
            time.sleep(1.0)
    finally:
        work.stop()
    assert not work.failed, f"{len(work.failed)} sends failed, e.g. {work.failed[:3]} after {log}"
    # Quiesce: every replica caught up, then stop cleanly and read every replica from disk.
    wait_for(lambda: full_isr(admin, topic), 60, what="final full ISR")
    wait_for(lambda: replicas_converged(c.info["data_dir"], [1, 2, 3], topic, [0, 1]), 30,
             what="every replica to hold the same records")
    c.lc.stop()
    final = {p: read_replica_logs(c.info["data_dir"], [1, 2, 3], topic, p) for p in range(2)}
    for p, replicas in final.items():
        lens = {b: len(v) for b, v in replicas.items()}
        assert len(set(lens.values())) == 1, f"partition {p} replicas differ in length after quiescing: {lens}"
    stats = check_no_loss(work, final)
    assert stats["acked"] > 1000 and stats["seen"] > 1000
    print(f"chaos {log}: {stats}")


def _raw_produce(address: str, topic: str, value: bytes, results: list[int]) -> None:
    stub = pb_grpc.BrokerStub(grpc.insecure_channel(address))
    try:
        resp = stub.Produce(pb.ProduceRequest(acks=-1, timeout_ms=3000, topics=[pb.ProduceTopicData(
            name=topic, partitions=[pb.ProducePartitionData(partition=0, records=encode_batch([(1, None, value, None)]))])]),
            timeout=15)
        results.append(resp.topics[0].partitions[0].error_code)
    except grpc.RpcError as exc:
        results.append(-1000 - exc.code().value[0])


def test_a_paused_leader_accepts_no_acks_all_write_when_it_resumes(replicated) -> None:
    c, bootstrap, admin = replicated
    topic = "paused"
    admin.create_topic(topic, partitions=1, replication_factor=3, configs={"min.insync.replicas": 2})
    wait_for(lambda: full_isr(admin, topic), 20, what="full ISR")
    with Producer(bootstrap) as p:
        for i in range(50):
            p.send(topic, f"before-{i}".encode())
    old = admin.describe_topic(topic)["partitions"][0]
    victim = c.proc("broker", old["leader"])
    os.kill(victim.pid, signal.SIGSTOP)
    try:
        wait_for(lambda: admin.describe_topic(topic)["partitions"][0]["leader"] not in (old["leader"], -1),
                 TEST_SESSION_TIMEOUT_MS / 1000 + 10, what="a new leader")
        with Producer(bootstrap) as p:  # the new leader takes writes
            assert p.send(topic, b"after-election").get(10).offset >= 50
        results: list[int] = []
        threads = [threading.Thread(target=_raw_produce, args=(victim.address, topic, f"zombie-{i}".encode(), results))
                   for i in range(5)]
        for t in threads:
            t.start()
    finally:
        os.kill(victim.pid, signal.SIGCONT)  # the requests are queued in its socket: they hit it first thing
    for t in threads:
        t.join(30)
    assert len(results) == 5
    assert ErrorCode.NONE not in results, (f"a resumed stale leader acknowledged an acks=all write: {results}\n"
                                           + open(victim.log_path).read()[-6000:])
    wait_for(lambda: full_isr(admin, topic), 60, what="full ISR after resume")
    wait_for(lambda: replicas_converged(c.info["data_dir"], [1, 2, 3], topic, [0]), 30,
             what="every replica to hold the same records")
    c.lc.stop()
    logs = read_replica_logs(c.info["data_dir"], [1, 2, 3], topic, 0)
    for b, lg in logs.items():
        assert not [v for _, v in lg if v.startswith(b"zombie")], f"broker {b} kept an unacknowledged write"
        assert lg == logs[1]


def test_a_batch_lost_to_a_paused_leader_does_not_block_the_idempotent_producer(replicated) -> None:
    """A batch sent to a leader that is then paused fails with an unknown outcome (request.timeout.ms,
    then delivery.timeout.ms). Its sequence number may or may not be written, so the producer takes a
    new producer id; without that, every later batch of the partition was refused as out of order."""
    c, bootstrap, admin = replicated
    topic = "lost-batch"
    admin.create_topic(topic, partitions=1, replication_factor=3, configs={"min.insync.replicas": 2})
    wait_for(lambda: full_isr(admin, topic), 20, what="full ISR")
    # Both timeouts end before the paused broker's lease (3 s, renewed every second) can expire, so
    # the lost batch fails before a new leader could take it.
    producer = Producer(bootstrap, acks="all", enable_idempotence=True, linger_ms=0, request_timeout_ms=800,
                        delivery_timeout_ms=1200, retry_backoff_ms=100)
    acked = [producer.send(topic, f"before-{i}".encode()).get(10) for i in range(5)]
    first_id = producer.producer_id
    old_leader = admin.describe_topic(topic)["partitions"][0]["leader"]
    victim = c.proc("broker", old_leader)
    os.kill(victim.pid, signal.SIGSTOP)
    try:
        lost = producer.send(topic, b"lost")
        with pytest.raises(TidelogError) as err:
            lost.get(20)
        assert err.value.code == ErrorCode.REQUEST_TIMED_OUT, err.value
        wait_for(lambda: admin.describe_topic(topic)["partitions"][0]["leader"] not in (old_leader, -1),
                 TEST_SESSION_TIMEOUT_MS / 1000 + 10, what="a new leader")
        # From here on sends get a usual delivery timeout: the producer may still send the next batch to
        # the paused broker once (its metadata is stale until that request times out), then it retries.
        producer.delivery_timeout_s = 30
        after = [producer.send(topic, f"after-{i}".encode()) for i in range(5)]
        acked += [f.get(30) for f in after]
    finally:
        os.kill(victim.pid, signal.SIGCONT)
    assert producer.producer_id not in (first_id, -1)
    producer.close()
    wait_for(lambda: full_isr(admin, topic), 60, what="full ISR after resume")
    consumer = Consumer(bootstrap, auto_offset_reset="earliest")
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        end = consumer.end_offsets([tp])[tp]
        values: list[bytes] = []
        deadline = time.monotonic() + 30
        while consumer.position(tp) < end and time.monotonic() < deadline:
            values += [r.value for r in consumer.poll(500)]
    finally:
        consumer.close()
    assert [v for v in values if v != b"lost"] == [f"{w}-{i}".encode() for w in ("before", "after") for i in range(5)]
    assert [md.offset for md in acked] == sorted(md.offset for md in acked)


def test_controlled_shutdown_moves_leadership_and_rolling_restart_keeps_partitions_available(replicated) -> None:
    c, bootstrap, admin = replicated
    topic = "rolling"
    admin.create_topic(topic, partitions=3, replication_factor=3, configs={"min.insync.replicas": 2})
    wait_for(lambda: full_isr(admin, topic), 20, what="full ISR")
    work = Workload(bootstrap, topic, partitions=3, producers=1, rate_per_producer=300)
    work.start()
    try:
        for bid in (1, 2, 3):
            time.sleep(1)
            proc = c.proc("broker", bid)
            led_before = [p["partition"] for p in admin.describe_topic(topic)["partitions"] if p["leader"] == bid]
            os.kill(proc.pid, signal.SIGTERM)
            assert proc.popen.wait(30) == 0
            text = open(proc.log_path).read()
            if led_before:
                assert "controlled shutdown done" in text
            # It stepped down before it stopped: nobody leads from a dead broker.
            assert all(p["leader"] != bid for p in admin.describe_topic(topic)["partitions"])
            c.restart("broker", bid)
            wait_for(lambda: full_isr(admin, topic), 60, what=f"full ISR after restarting {bid}")
    finally:
        work.stop()
    assert not work.failed, work.failed[:3]
    c.lc.stop()
    final = {p: read_replica_logs(c.info["data_dir"], [1, 2, 3], topic, p) for p in range(3)}
    stats = check_no_loss(work, final)
    assert stats["acked"] > 500


def test_not_enough_replicas_and_offline_partition_without_unclean_election(replicated) -> None:
    c, bootstrap, admin = replicated
    topic = "minisr"
    admin.create_topic(topic, partitions=1, replication_factor=3, configs={"min.insync.replicas": 3})
    wait_for(lambda: full_isr(admin, topic), 20, what="full ISR")
    leader = admin.describe_topic(topic)["partitions"][0]["leader"]
    follower = next(b for b in (1, 2, 3) if b != leader)
    os.kill(c.proc("broker", follower).pid, signal.SIGKILL)
    wait_for(lambda: len(admin.describe_topic(topic)["partitions"][0]["isr"]) == 2, 20, what="ISR shrink")
    leader_addr = c.proc("broker", leader).address
    stub = pb_grpc.BrokerStub(grpc.insecure_channel(leader_addr))
    resp = stub.Produce(pb.ProduceRequest(acks=-1, timeout_ms=2000, topics=[pb.ProduceTopicData(
        name=topic, partitions=[pb.ProducePartitionData(partition=0, records=encode_batch([(1, None, b"x", None)]))])]))
    assert resp.topics[0].partitions[0].error_code == ErrorCode.NOT_ENOUGH_REPLICAS
    resp = stub.Produce(pb.ProduceRequest(acks=1, timeout_ms=2000, topics=[pb.ProduceTopicData(
        name=topic, partitions=[pb.ProducePartitionData(partition=0, records=encode_batch([(1, None, b"x", None)]))])]))
    assert resp.topics[0].partitions[0].error_code == ErrorCode.NONE  # acks=1 does not need the ISR
    # Kill the rest: the partition goes offline (leader -1), and comes back only with an ISR member.
    others = [b for b in (1, 2, 3) if b != follower]
    for b in others:
        os.kill(c.proc("broker", b).pid, signal.SIGKILL)
    wait_for(lambda: admin.describe_topic(topic)["partitions"][0]["leader"] == -1, 20, what="offline partition")
    # The last ISR: the one that expired last, or both if their leases expired together
    # (both had every committed record, so either may lead again).
    last_isr = admin.describe_topic(topic)["partitions"][0]["isr"]
    assert last_isr and set(last_isr) <= set(others)
    c.restart("broker", follower)  # not in the last ISR: must not become leader (no unclean election)
    # Observable: the active controller has reconciled with the follower alive and kept the partition offline.
    wait_for(lambda: any(_logged_offline_with(p.log_path, topic, follower) for p in c.procs("controller")), 20,
             what="the controller to keep the partition offline with the follower back")
    assert admin.describe_topic(topic)["partitions"][0]["leader"] == -1
    c.restart("broker", last_isr[0])
    wait_for(lambda: admin.describe_topic(topic)["partitions"][0]["leader"] == last_isr[0], 20,
             what="the last ISR member back as leader")
    for other in others:
        if other != last_isr[0]:
            c.restart("broker", other)
    # Once it leads, the others catch up and rejoin the ISR.
    wait_for(lambda: full_isr(admin, topic), 30, what="full ISR again")


def _logged_offline_with(log_path: str, topic: str, broker: int) -> bool:
    """Did this controller log that ``topic``-0 stays offline while ``broker`` is live?"""
    with open(log_path) as f:
        for line in f:
            if "partition offline" in line:
                entry = json.loads(line)
                if entry.get("tp") == f"{topic}-0" and broker in json.loads(entry.get("live", "[]")):
                    return True
    return False


def test_unclean_leader_election_when_enabled(replicated) -> None:
    c, bootstrap, admin = replicated
    topic = "unclean"
    admin.create_topic(topic, partitions=1, replication_factor=2,
                       configs={"min.insync.replicas": 1, "unclean.leader.election.enable": "true"})
    wait_for(lambda: full_isr(admin, topic, rf=2), 20, what="full ISR")
    st = admin.describe_topic(topic)["partitions"][0]
    leader, follower = st["leader"], next(b for b in st["replicas"] if b != st["leader"])
    os.kill(c.proc("broker", follower).pid, signal.SIGKILL)
    wait_for(lambda: admin.describe_topic(topic)["partitions"][0]["isr"] == [leader], 20, what="ISR shrink")
    os.kill(c.proc("broker", leader).pid, signal.SIGKILL)
    wait_for(lambda: admin.describe_topic(topic)["partitions"][0]["leader"] == -1, 20, what="offline")
    c.restart("broker", follower)  # out of sync, but unclean election is allowed
    wait_for(lambda: admin.describe_topic(topic)["partitions"][0]["leader"] == follower, 20, what="unclean leader")


def test_a_producer_whose_only_broker_died_fails_its_batches_after_delivery_timeout(make_cluster) -> None:
    """With no broker left to hand out a producer id, unsent batches still expire after delivery.timeout.ms
    (they used to wait forever, and flush() with them)."""
    c = make_cluster(controllers=1, brokers=1, cleaners=0, coordinators=0, quotas=0)
    bootstrap = c.procs("broker")[0].address
    with Admin(bootstrap) as admin:
        admin.create_topic("lonely", partitions=1)
    producer = Producer(bootstrap, linger_ms=0, request_timeout_ms=1000, delivery_timeout_ms=2000)
    try:
        producer.send("lonely", b"first").get(10)
        os.kill(c.proc("broker", 1).pid, signal.SIGKILL)
        futures = [producer.send("lonely", b"lost-%d" % i) for i in range(2)]
        time.sleep(0.1)
        futures.append(producer.send("lonely", b"later"))
        for f in futures:
            with pytest.raises(TidelogError, match="expired"):
                f.get(15)
        producer.flush(5)
    finally:
        producer.close(1)
