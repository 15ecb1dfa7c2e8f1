"""Transactional offset commits (TxnOffsetCommit, KIP-447) on real processes: pending until the
transaction coordinator's CompleteTxnOffsets, invisible to OffsetFetch meanwhile (UNSTABLE_OFFSET_COMMIT
with require_stable), and surviving a kill -9 of the group's coordinator."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import grpc

from shared.client.cluster import ClusterClient
from shared.client.group_coordinator import GroupCoordinatorClient
from shared.errors import ErrorCode
from shared.offsets_topic import partition_for
from shared.proto import coordinator_pb2 as cpb
from shared.proto import tidelog_pb2 as pb
from shared.proto import tidelog_pb2_grpc as pb_grpc
from tests.conftest import wait_for
from tests.integration.test_groups import find_coordinator, owner_proc, small_cluster

GROUP = "txg"
TOPIC = "txin"
OFFSETS_PARTITIONS = 6  # GROUP_ENV's __consumer_offsets


def txn_commit(gc: GroupCoordinatorClient, pid: int, epoch: int, offsets: dict[int, int], member: str = "",
               generation: int = -1) -> cpb.TxnOffsetCommitResponse:
    return gc.call("TxnOffsetCommit", cpb.TxnOffsetCommitRequest(
        transactional_id="tx-1", group_id=GROUP, producer_id=pid, producer_epoch=epoch, generation_id=generation,
        member_id=member, topics=[cpb.OffsetCommitTopic(name=TOPIC, partitions=[
            cpb.OffsetCommitPartition(partition=p, committed_offset=o) for p, o in sorted(offsets.items())])]))


def complete(gc: GroupCoordinatorClient, pid: int, marker_epoch: int, committed: bool) -> cpb.CompleteTxnOffsetsResponse:
    """What the transaction coordinator sends once the transaction's PrepareCommit/PrepareAbort is durable."""
    resp = gc.call("CompleteTxnOffsets", cpb.CompleteTxnOffsetsRequest(
        transactional_id="tx-1", producer_id=pid, producer_epoch=marker_epoch, committed=committed,
        transaction_version=2, offsets_partition=partition_for(GROUP, OFFSETS_PARTITIONS)))
    assert resp.error_code == 0, resp
    return resp


def fetch(gc: GroupCoordinatorClient, require_stable: bool = False) -> dict[int, tuple[int, int]]:
    """partition -> (committed offset, error code)."""
    resp = gc.call("OffsetFetch", cpb.OffsetFetchRequest(
        group_id=GROUP, partitions=[cpb.TopicPartitions(topic=TOPIC, partitions=[0, 1])], require_stable=require_stable))
    assert resp.error_code == 0, resp
    return {p.partition: (p.committed_offset, p.error_code) for t in resp.topics for p in t.partitions}


def ok(resp: Any) -> bool:
    return resp.error_code == 0 and all(p.error_code == 0 for t in resp.topics for p in t.partitions)


def test_txn_offsets_pending_then_committed_or_aborted_and_surviving_a_coordinator_kill(make_cluster) -> None:
    started = time.monotonic()
    c, bootstrap, admin = small_cluster(make_cluster, coordinators=2)
    admin.create_topic(TOPIC, partitions=2)
    broker = pb_grpc.BrokerStub(grpc.insecure_channel(bootstrap.split(",")[0]))
    ids = broker.InitProducerId(pb.InitProducerIdRequest(), timeout=10)
    assert ids.error_code == 0, ids
    pid, epoch = ids.producer_id, ids.producer_epoch
    find_coordinator(bootstrap, GROUP)
    gc = GroupCoordinatorClient(ClusterClient(bootstrap, "txn-test"), GROUP)

    # A member of the consumer group commits in its transaction at its member epoch; a zombie cannot.
    joined = gc.call("ConsumerGroupHeartbeat", cpb.ConsumerGroupHeartbeatRequest(
        group_id=GROUP, member_epoch=0, subscribed_topic_names=[TOPIC], rebalance_timeout_ms=5000))
    assert joined.error_code == 0, joined
    member, member_epoch = joined.member_id, joined.member_epoch
    stale = txn_commit(gc, pid, epoch, {0: 1}, member=member, generation=member_epoch + 1)
    assert stale.error_code == ErrorCode.ILLEGAL_GENERATION, stale
    assert txn_commit(gc, pid, epoch, {0: 1}, member="zombie", generation=member_epoch).error_code \
        == ErrorCode.UNKNOWN_MEMBER_ID
    assert ok(txn_commit(gc, pid, epoch, {0: 10}, member=member, generation=member_epoch))

    # Pending: not visible; require_stable says so.
    assert fetch(gc) == {0: (-1, 0), 1: (-1, 0)}
    assert fetch(gc, require_stable=True)[0] == (-1, ErrorCode.UNSTABLE_OFFSET_COMMIT)
    # Committed (markers at the bumped epoch, transactions V2), then a retry that finds nothing left.
    assert complete(gc, pid, epoch + 1, committed=True).completed == 1
    assert complete(gc, pid, epoch + 1, committed=True).completed == 0
    assert fetch(gc, require_stable=True) == {0: (10, 0), 1: (-1, 0)}

    # The next transaction aborts: its offsets are dropped.
    assert ok(txn_commit(gc, pid, epoch + 1, {0: 20, 1: 20}))
    assert complete(gc, pid, epoch + 2, committed=False).completed == 2
    assert fetch(gc, require_stable=True) == {0: (10, 0), 1: (-1, 0)}

    # kill -9 the coordinator between TxnOffsetCommit and the completion: the next owner has them pending.
    assert ok(txn_commit(gc, pid, epoch + 2, {0: 30, 1: 31}))
    owner = owner_proc(c, find_coordinator(bootstrap, GROUP))
    os.kill(owner.pid, signal.SIGKILL)
    wait_for(lambda: find_coordinator(bootstrap, GROUP).address != owner.address, 30, what="another coordinator")
    unstable = wait_for(lambda: fetch(gc, require_stable=True), 30, what="the group served again")
    assert unstable == {0: (-1, ErrorCode.UNSTABLE_OFFSET_COMMIT), 1: (-1, ErrorCode.UNSTABLE_OFFSET_COMMIT)}
    assert fetch(gc) == {0: (10, 0), 1: (-1, 0)}
    assert complete(gc, pid, epoch + 3, committed=True).completed == 2
    assert fetch(gc, require_stable=True) == {0: (30, 0), 1: (31, 0)}
    gc.close()
    admin.close()
    print(f"took {time.monotonic() - started:.1f}s")
