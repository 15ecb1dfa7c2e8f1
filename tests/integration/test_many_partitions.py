"""Topics far over etcd's 128 operations per transaction, created and grown, usable end to end on a
one-broker cluster. (10,000 partitions: ``tidelog bench partitions``; opening them takes the broker
~15 s here, too long for the suite.)"""

from __future__ import annotations

import grpc
import httpx

from shared.client import Consumer, Producer, TopicPartition
from shared.proto import tidelog_pb2 as pb
from shared.proto import tidelog_pb2_grpc as pb_grpc
from tests.conftest import wait_for

ENV = {"TIDELOG_CONTROLLED_SHUTDOWN_ENABLE": "false"}  # one broker: nowhere to move leaders at teardown


def test_creating_and_growing_a_topic_past_the_etcd_transaction_limit(make_cluster) -> None:
    c = make_cluster(controllers=1, brokers=1, coordinators=0, cleaners=0, quotas=0, extra_env=ENV)
    r = httpx.post(f"{c.rest}/v1/topics", json={"name": "big", "partitions": 2_000}, timeout=60)
    assert r.status_code == 201, r.text
    parts = r.json()["partitions"]
    assert [p["partition"] for p in parts] == list(range(2_000))
    assert all(p["leader"] == 1 and p["isr"] == [1] and p["leader_epoch"] == 0 for p in parts)
    r = httpx.post(f"{c.rest}/v1/topics/big/partitions", json={"partitions": 3_000}, timeout=60)
    assert r.status_code == 200, r.text
    assert len(r.json()["partitions"]) == 3_000
    r = httpx.post(f"{c.rest}/v1/topics/big/partitions", json={"partitions": 10_001}, timeout=30)
    assert r.status_code == 400
    r = httpx.post(f"{c.rest}/v1/topics", json={"name": "big", "partitions": 200}, timeout=30)
    assert r.status_code == 409

    bootstrap = c.procs("broker")[0].address
    stub = pb_grpc.BrokerStub(grpc.insecure_channel(bootstrap))

    def broker_sees_all() -> bool:
        topic = stub.Metadata(pb.MetadataRequest(topics=["big"]), timeout=10).topics[0]
        return len(topic.partitions) == 3_000 and all(p.leader == 1 for p in topic.partitions)

    wait_for(broker_sees_all, 30, what="the broker's metadata shows the grown topic")
    wanted = [TopicPartition("big", p) for p in (0, 1_999, 2_000, 2_999)]
    producer = Producer(bootstrap, acks=-1)
    for tp in wanted:
        producer.send(tp.topic, b"v", partition=tp.partition).get(60)
    producer.close()
    consumer = Consumer(bootstrap, auto_offset_reset="earliest")
    consumer.assign(wanted)
    got: set[TopicPartition] = set()

    def read() -> bool:
        got.update(TopicPartition(r.topic, r.partition) for r in consumer.poll(500))
        return got == set(wanted)

    wait_for(read, 60, interval=0, what="a record from each partition")
    consumer.close()
