"""Topics far over etcd's 128 operations per transaction: a 10,000-partition topic, a topic grown to
thousands of partitions, both usable end to end on a one-broker cluster."""

from __future__ import annotations

import time

import httpx

from shared.client import Admin, Consumer, Producer, TopicPartition
from tests.conftest import wait_for


def test_ten_thousand_partitions_and_growing_a_topic_past_the_etcd_transaction_limit(make_cluster) -> None:
    c = make_cluster(controllers=1, brokers=1, coordinators=0, cleaners=0, quotas=0)
    t0 = time.monotonic()
    r = httpx.post(f"{c.rest}/v1/topics", json={"name": "big", "partitions": 10_000}, timeout=120)
    assert r.status_code == 201, r.text
    created_s = time.monotonic() - t0
    parts = r.json()["partitions"]
    assert [p["partition"] for p in parts] == list(range(10_000))
    assert all(p["leader"] == 1 and p["isr"] == [1] for p in parts)
    assert created_s < 30, created_s
    r = httpx.post(f"{c.rest}/v1/topics", json={"name": "grown", "partitions": 3}, timeout=30)
    assert r.status_code == 201, r.text
    r = httpx.post(f"{c.rest}/v1/topics/grown/partitions", json={"partitions": 1_500}, timeout=60)
    assert r.status_code == 200, r.text
    assert len(r.json()["partitions"]) == 1_500
    r = httpx.post(f"{c.rest}/v1/topics/grown/partitions", json={"partitions": 10_001}, timeout=30)
    assert r.status_code == 400

    bootstrap = c.procs("broker")[0].address
    with Admin(bootstrap) as admin:
        wait_for(lambda: len(admin.describe_topic("big")["partitions"]) == 10_000, 30, what="big visible")
    producer = Producer(bootstrap, acks=-1)
    for topic, p in (("big", 9_999), ("big", 0), ("grown", 1_499)):
        producer.send(topic, b"v", key=f"{topic}-{p}".encode(), partition=p).get(60)
    producer.close()
    consumer = Consumer(bootstrap, auto_offset_reset="earliest")
    wanted = [TopicPartition("big", 9_999), TopicPartition("big", 0), TopicPartition("grown", 1_499)]
    consumer.assign(wanted)
    got: set[TopicPartition] = set()

    def read() -> bool:
        for r in consumer.poll(500):
            got.add(TopicPartition(r.topic, r.partition))
        return got == set(wanted)

    wait_for(read, 60, interval=0, what="a record from each partition")
    consumer.close()
    r = httpx.delete(f"{c.rest}/v1/topics/big", timeout=60)
    assert r.status_code == 204
