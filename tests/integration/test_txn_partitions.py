"""The coordinator owns the partitions of two internal topics with one machinery: ``__consumer_offsets``
and ``__transaction_state`` (created on the first FindCoordinator for a transactional id). Two
coordinator instances share the partitions of both; SIGKILL one and the other takes all of them
over, each with a bumped producer epoch (its fencing marker), loads them and serves them."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from typing import Any

import grpc

from shared.metadata.store import MetadataStore
from shared.offsets_topic import OFFSETS_TOPIC
from shared.proto import coordinator_pb2_grpc as cpb_grpc
from shared.proto import tidelog_pb2 as pb
from shared.proto import tidelog_pb2_grpc as pb_grpc
from shared.settings import parse_endpoint
from shared.txn_topic import TRANSACTION_STATE_TOPIC
from tests.conftest import wait_for
from tests.integration.kafka_util import KafkaWire

FIND_COORDINATOR = 10
TXN_PARTITIONS = 50  # Kafka's transaction.state.log.num.partitions
OFFSETS_PARTITIONS = 6  # tests' __consumer_offsets (conftest.TEST_ENV)


def _etcd(c: Any) -> dict[str, dict[int, dict[str, Any]]]:
    """Owners and producer keys of both topics, by partition."""

    async def go() -> dict[str, dict[int, dict[str, Any]]]:
        store = MetadataStore(parse_endpoint(c.info["etcd"]), c.info["cluster"])
        await store.connect()
        try:
            k = store.keys
            out = {}
            for name, prefix in (("offsets", k.offsets_owners_prefix()), ("txn", k.txn_owners_prefix()),
                                 ("txn-producers", k.txn_producer(0)[:-1])):
                snap = await store.get_prefix(prefix)
                out[name] = {int(key.decode().rsplit("/", 1)[-1]): v for key, (v, _, _) in snap.items()}
            return out
        finally:
            await store.close()

    return asyncio.run(go())


def _loaded(proc: Any, topic: str, since: int = 0) -> set[int]:
    """Partitions of ``topic`` the process logged as loaded after byte ``since`` of its log."""
    out = set()
    with open(proc.log_path, "rb") as f:
        f.seek(since)
        for line in f.read().decode(errors="replace").splitlines():
            if '"partition loaded"' in line:
                rec = json.loads(line)
                if rec.get("topic") == topic:
                    out.add(int(rec["partition"]))
    return out


def test_two_kinds_of_partitions_are_shared_and_taken_over(make_cluster: Any) -> None:
    c = make_cluster(controllers=1, brokers=2, coordinators=2, cleaners=0, quotas=0)
    stub = pb_grpc.BrokerStub(grpc.insecure_channel(c.procs("broker")[0].address))

    def find(key_type: int, key: str) -> pb.GroupCoordinatorNode:
        req = pb.FindCoordinatorRequest(group_ids=[key], key_type=key_type)
        return stub.FindCoordinator(req, timeout=5).coordinators[0]

    first = find(1, "tx-1")  # no __transaction_state yet: this lookup asks for it
    assert first.error_code == 15 and TRANSACTION_STATE_TOPIC in first.error_message, first
    node = wait_for(lambda: (n := find(1, "tx-1")).error_code == 0 and n, 30, what="a transaction coordinator")
    assert find(5, "x").error_code == 42  # INVALID_REQUEST for an unknown coordinator type

    coords = {p.id: p for p in c.procs("coordinator")}
    both = set(coords)

    def balanced() -> bool:
        e = _etcd(c)
        return (len(e["offsets"]) == OFFSETS_PARTITIONS and len(e["txn"]) == TXN_PARTITIONS
                and {o["owner"] for o in e["offsets"].values()} == both
                and {o["owner"] for o in e["txn"].values()} == both)

    wait_for(balanced, 30, what="both kinds' partitions owned by both instances")
    owners = _etcd(c)
    for ident, proc in coords.items():
        mine_txn = {p for p, o in owners["txn"].items() if o["owner"] == ident}
        mine_offsets = {p for p, o in owners["offsets"].items() if o["owner"] == ident}
        wait_for(lambda proc=proc, m=mine_txn: _loaded(proc, TRANSACTION_STATE_TOPIC) >= m, 30,
                 what=f"coordinator {ident} loaded its __transaction_state partitions")
        wait_for(lambda proc=proc, m=mine_offsets: _loaded(proc, OFFSETS_TOPIC) >= m, 30,
                 what=f"coordinator {ident} loaded its __consumer_offsets partitions")
    assert node.node_id == owners["txn"][node.partition]["owner"] and node.address
    # a coordinator instance answers the same (its own FindCoordinator, which the broker's mirrors)
    cstub = cpb_grpc.GroupCoordinatorStub(grpc.insecure_channel(node.address))
    same = cstub.FindCoordinator(pb.FindCoordinatorRequest(group_ids=["tx-1"], key_type=1), timeout=5).coordinators[0]
    assert (same.error_code, same.node_id, same.partition) == (0, node.node_id, node.partition)
    # and the Kafka door (FindCoordinator v4, key_type 1 TRANSACTION) names a broker for it
    with KafkaWire(c.procs("broker")[0].info["kafka"]) as w:
        kc = w.request(FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": ["tx-1"]}).coordinators[0]
    assert (kc.key, kc.error_code) == ("tx-1", 0) and kc.node_id in {int(b.id) for b in c.procs("broker")}, kc

    victim = coords[node.node_id]
    survivor = next(p for i, p in coords.items() if i != node.node_id)
    moved_txn = {p for p, o in owners["txn"].items() if o["owner"] == victim.id}
    moved_offsets = {p for p, o in owners["offsets"].items() if o["owner"] == victim.id}
    epochs = {p: owners["txn-producers"][p]["producer_epoch"] for p in moved_txn}
    mark = os.path.getsize(survivor.log_path)
    os.kill(victim.pid, signal.SIGKILL)

    def all_taken() -> bool:
        e = _etcd(c)
        return ({o["owner"] for o in e["offsets"].values()} == {survivor.id} == {o["owner"] for o in e["txn"].values()}
                and len(e["txn"]) == TXN_PARTITIONS and len(e["offsets"]) == OFFSETS_PARTITIONS)

    wait_for(all_taken, 30, what="the survivor owning every partition of both topics")
    wait_for(lambda: _loaded(survivor, TRANSACTION_STATE_TOPIC, mark) >= moved_txn
             and _loaded(survivor, OFFSETS_TOPIC, mark) >= moved_offsets, 30,
             what="the survivor loaded the partitions it took over")
    after = _etcd(c)["txn-producers"]
    assert all(after[p]["producer_epoch"] > epochs[p] for p in moved_txn)  # the takeover fenced the old owner
    moved = wait_for(lambda: (n := find(1, "tx-1")).error_code == 0 and n.node_id == survivor.id and n, 10,
                     what="FindCoordinator naming the survivor")
    assert moved.partition == node.partition
    group = wait_for(lambda: (n := find(0, "g-1")).error_code == 0 and n.node_id == survivor.id and n, 10,
                     what="the group coordinator moved too")
    assert group.address == moved.address
