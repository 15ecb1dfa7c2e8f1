"""Metrics mean something: real processes, real etcd, figures read back from each /metrics endpoint.

One small cluster (1 controller, 2 brokers, 1 coordinator) for every check, in order: bytes and
records in, consumer lag, under-replicated partitions while a follower is paused, a leader election.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid

import grpc

from shared.client import Admin, Consumer, Producer, TopicPartition
from shared.metrics import scrape, total
from shared.proto import coordinator_pb2 as cpb
from shared.proto import coordinator_pb2_grpc as cpb_grpc
from shared.proto import tidelog_pb2 as pb
from shared.proto import tidelog_pb2_grpc as pb_grpc
from tests.conftest import REPO, wait_for

LAG_TIME_MAX_MS = 1500
FETCH_WAIT_MAX_MS = 500  # an idle follower was last caught up at its last fetch, up to this long before the pause
ENV = {
    "TIDELOG_OFFSETS_TOPIC_NUM_PARTITIONS": "2",
    "TIDELOG_OFFSETS_TOPIC_REPLICATION_FACTOR": "1",
    "TIDELOG_REPLICA_LAG_TIME_MAX_MS": str(LAG_TIME_MAX_MS),
    "TIDELOG_REPLICA_FETCH_WAIT_MAX_MS": str(FETCH_WAIT_MAX_MS),
    "TIDELOG_METRICS_LAG_INTERVAL_MS": "200",
}
N, B, K = 300, 100, 17
# Bytes in counts record batches as received (as Kafka's BytesInPerSec): the values plus each record's
# framing (a few varints: at most 16 bytes for records this small) plus a 61-byte header per batch.
RECORD_FRAMING, BATCH_HEADER = 16, 61


def one(c, role: str):
    return c.procs(role)[0]


def metrics_of(c, role: str, ident: int | str | None = None) -> dict:
    procs = c.procs(role)
    proc = procs[0] if ident is None else next(p for p in procs if p.id == str(ident))
    return scrape(proc.info["metrics"])


def test_metrics_follow_produce_lag_replication_and_elections(make_cluster) -> None:
    c = make_cluster(controllers=1, brokers=2, coordinators=1, cleaners=0, quotas=0, extra_env=ENV)
    for p in c.info["processes"]:
        assert p["role"] == "etcd" or p["metrics"].startswith("127.0.0.1:"), p  # listed in cluster.json
    brokers = {int(p.id): p for p in c.procs("broker")}
    bootstrap = ",".join(p.address for p in brokers.values())
    admin = Admin(bootstrap)
    topic = f"m-{uuid.uuid4().hex[:6]}"
    admin.create_topic(topic, 1, 2, {"segment.bytes": 16384})  # a few segment rolls
    desc = wait_for(lambda: (d := admin.describe_topic(topic)) and len(d["partitions"][0]["isr"]) == 2 and d,
                    30, what="both replicas in sync")
    leader = desc["partitions"][0]["leader"]
    follower = next(b for b in brokers if b != leader)

    # -- bytes and records in ------------------------------------------------------------------------
    before = metrics_of(c, "broker", leader)
    assert total(before, "tidelog_broker_topic_bytes_in_total", topic=topic) == 0
    with Producer(bootstrap, linger_ms=20) as producer:
        for i in range(N):
            producer.send(topic, bytes([65 + i % 26]) * B)
        producer.flush()
        pm = producer.metrics()
    assert pm["record-send-total"] == N and pm["request-latency-avg"] > 0 and pm["record-send-rate"] > 0
    assert B < pm["batch-size-avg"] <= N * (B + RECORD_FRAMING) + BATCH_HEADER
    after = metrics_of(c, "broker", leader)
    got = total(after, "tidelog_broker_topic_bytes_in_total", topic=topic)
    produces = total(after, "tidelog_network_requests_total", request="Produce") - \
        total(before, "tidelog_network_requests_total", request="Produce")
    assert N * B <= got <= N * (B + RECORD_FRAMING) + produces * BATCH_HEADER, (got, produces)
    assert total(after, "tidelog_broker_topic_messages_in_total", topic=topic) == N
    assert total(after, "tidelog_partition_high_watermark", topic=topic, partition="0") == N
    rolls = total(after, "tidelog_log_segment_rolls_total", topic=topic, partition="0")
    assert rolls >= 1 and total(after, "tidelog_log_segments", topic=topic, partition="0") == rolls + 1
    assert total(after, "tidelog_network_request_total_time_seconds_count", request="Produce") >= produces >= 1
    wait_for(lambda: total(metrics_of(c, "broker", leader), "tidelog_network_requests_total",
                           request="FetchFollower") > 0, 10, what="follower fetches counted on the leader")

    consumer = Consumer(bootstrap, auto_offset_reset="earliest")
    consumer.assign([TopicPartition(topic, 0)])
    wait_for(lambda: consumer.poll(200) is not None and consumer.position(TopicPartition(topic, 0)) == N, 30,
             what="consumed to the end")
    cm = consumer.metrics()
    consumer.close()
    assert cm["fetch-total"] >= 1 and cm["fetch-rate"] > 0 and cm["records-lag-max"] == 0
    bench = subprocess.run([sys.executable, "-m", "shared.cli.main", "bench", "produce", "--topic", topic,
                            "--records", "500", "--record-size", "50", "--no-progress", "--json", "--metrics",
                            "--batch-size", "8192",  # batches within the topic's segment.bytes, as Kafka requires
                            "--bootstrap-server", bootstrap], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert bench.returncode == 0, bench.stderr
    assert json.loads(bench.stdout.strip().splitlines()[-1])["client_metrics"]["record-send-total"] == 500
    n_total = N + 500

    # -- consumer lag: a group that consumed all but K records ------------------------------------------
    stub = pb_grpc.BrokerStub(grpc.insecure_channel(brokers[leader].address))

    def coordinator() -> str | None:
        node = stub.FindCoordinator(pb.FindCoordinatorRequest(group_ids=["lagging"]), timeout=5).coordinators[0]
        return node.address if node.error_code == 0 else None

    address = wait_for(coordinator, 30, what="a coordinator for the group")
    group = cpb_grpc.GroupCoordinatorStub(grpc.insecure_channel(address))
    wait_for(lambda: group.OffsetCommit(cpb.OffsetCommitRequest(group_id="lagging", member_epoch=-1, topics=[
        cpb.OffsetCommitTopic(name=topic, partitions=[cpb.OffsetCommitPartition(partition=0, committed_offset=n_total - K)])]),
        timeout=10).topics[0].partitions[0].error_code == 0, 30, what="the commit accepted")
    wait_for(lambda: total(metrics_of(c, "coordinator"), "tidelog_consumer_group_lag", group="lagging", topic=topic,
                           partition="0") == K, 15, what=f"lag {K}")
    assert total(metrics_of(c, "coordinator"), "tidelog_coordinator_offset_commits_total") >= 1

    # -- tidelog top --once: from cluster.json, and through the brokers (REST /v1/cluster) ---------------
    for where in (["--data-dir", c.lc.data_dir], ["--bootstrap-server", bootstrap, "--data-dir", "/nonexistent"]):
        out = subprocess.run([sys.executable, "-m", "shared.cli.main", "top", "--once", "--interval", "0.3", *where],
                             capture_output=True, text=True, cwd=REPO, timeout=60,
                             env={**os.environ, "COLUMNS": "200"})
        assert out.returncode == 0, out.stderr
        assert "under-replicated" in out.stdout and "lagging" in out.stdout, out.stdout
        assert re.search(rf"lagging\s+│?\s*{K}\b", out.stdout), out.stdout

    # -- under-replicated while the follower is paused ----------------------------------------------
    def urp() -> float:
        return total(metrics_of(c, "broker", leader), "tidelog_replica_manager_under_replicated_partitions")

    assert urp() == 0
    os.kill(brokers[follower].pid, signal.SIGSTOP)
    paused = time.monotonic()
    try:
        wait_for(lambda: urp() == 1, LAG_TIME_MAX_MS / 1000 + 5, interval=0.2, what="under-replicated 1")
        seen_after = time.monotonic() - paused
    finally:
        os.kill(brokers[follower].pid, signal.SIGCONT)
    wait_for(lambda: urp() == 0, 30, interval=0.2, what="under-replicated back to 0")
    isr = metrics_of(c, "broker", leader)
    assert total(isr, "tidelog_replica_manager_isr_shrinks_total") >= 1
    assert total(isr, "tidelog_replica_manager_isr_expands_total") >= 1
    # Not before the follower could count as lagging: replica.lag.time.max.ms after its last catch-up.
    assert seen_after >= (LAG_TIME_MAX_MS - FETCH_WAIT_MAX_MS) / 1000 * 0.9, seen_after

    # -- a leader election: the leader stops (controlled shutdown moves its leadership) -----------------
    def elections() -> float:
        return total(metrics_of(c, "controller"), "tidelog_controller_leader_elections_total")

    wait_for(lambda: len(admin.describe_topic(topic)["partitions"][0]["isr"]) == 2, 30, what="ISR whole again")
    base = elections()
    assert total(metrics_of(c, "controller"), "tidelog_controller_active_controller_count") == 1
    os.kill(brokers[leader].pid, signal.SIGTERM)
    wait_for(lambda: elections() > base, 30, what="the election counted")
    wait_for(lambda: admin.describe_topic(topic)["partitions"][0]["leader"] == follower, 30, what="the new leader")
    admin.close()
