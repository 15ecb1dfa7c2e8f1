"""Follower fetch sessions with real processes: an idle follower whose fetch requests name no partition
stays in every ISR well past replica.lag.time.max.ms, and acks=all writes then still replicate."""

from __future__ import annotations

import uuid

from shared.client import Admin, Consumer, Producer, TopicPartition
from shared.metrics import scrape, total
from tests.conftest import wait_for

LAG_TIME_MAX_MS = 1000
ENV = {"TIDELOG_REPLICA_LAG_TIME_MAX_MS": str(LAG_TIME_MAX_MS), "TIDELOG_REPLICA_FETCH_WAIT_MAX_MS": "200"}
PARTITIONS = 4


def test_idle_followers_stay_in_sync_and_writes_replicate(make_cluster) -> None:
    c = make_cluster(controllers=1, brokers=2, coordinators=0, cleaners=0, quotas=0, extra_env=ENV)
    brokers = {int(p.id): p for p in c.procs("broker")}
    bootstrap = ",".join(p.address for p in brokers.values())
    admin = Admin(bootstrap)
    topic = f"fs-{uuid.uuid4().hex[:6]}"
    admin.create_topic(topic, PARTITIONS, 2)

    def isr_sizes() -> list[int]:
        return [len(p["isr"]) for p in admin.describe_topic(topic)["partitions"]]

    wait_for(lambda: isr_sizes() == [2] * PARTITIONS, 30, what="both replicas in sync")

    def follower_fetches() -> float:
        return sum(total(scrape(b.info["metrics"]), "tidelog_network_requests_total", request="FetchFollower")
                   for b in brokers.values())

    # Idle: after the first (full) request each fetch names nothing, yet every follower stays caught up.
    start = follower_fetches()
    wait_for(lambda: follower_fetches() - start >= 2 * 3 * LAG_TIME_MAX_MS / 200, 30,
             what="three lag times of idle follower fetches")
    assert isr_sizes() == [2] * PARTITIONS
    assert sum(total(scrape(b.info["metrics"]), "tidelog_replica_manager_isr_shrinks_total")
               for b in brokers.values()) == 0

    with Producer(bootstrap, acks=-1) as producer:  # acks=all: every write waits for the follower's fetch offset
        for i in range(40):
            producer.send(topic, b"v%d" % i, partition=i % PARTITIONS)
        producer.flush()
    with Consumer(bootstrap) as consumer:
        ends = consumer.end_offsets([TopicPartition(topic, p) for p in range(PARTITIONS)])
    assert sorted(ends.values()) == [10] * PARTITIONS
    assert isr_sizes() == [2] * PARTITIONS
