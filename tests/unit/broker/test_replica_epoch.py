"""Issue 23, item 5 (KIP-380 on a plaintext cluster): a follower fetch moves the leader's view of the
follower (its log end, the high watermark) only when it carries that broker's current epoch and comes
from one of the partition's replicas; otherwise it is refused before anything is read or moved."""

from __future__ import annotations

import asyncio
import time

import pytest

from services.broker.api import BrokerApi
from services.broker.api import fetch as fetch_api
from services.broker.fetch_reader import broker_epoch, replica_refusal
from services.broker.follower_sessions import StreamFetchSession
from services.broker.metadata_cache import ClusterView
from services.broker.pipeline import RequestPipeline
from services.broker.replica_manager import ReplicaManager
from services.broker.replica_results import FetchSpec
from shared.errors import ErrorCode
from shared.metadata.types import PartitionState, TopicRecord
from shared.proto import tidelog_pb2 as pb
from shared.records.builder import encode_batch
from shared.types import TopicPartition

TP = TopicPartition("t", 0)
INC2, INC3, INC4 = "1700000000000-0badcafe", "1700000000001-deadbeef", "1700000000002-00c0ffee"


def test_broker_epoch_is_positive_and_grows_with_the_start_time() -> None:
    assert 0 < broker_epoch(INC2) < broker_epoch(INC3) < 2**63
    assert broker_epoch("1700000000000-0badcaff") != broker_epoch(INC2)
    assert broker_epoch("") == -1 and 0 < broker_epoch("some-other-form") < 2**63


@pytest.mark.parametrize("replica_id,epoch,code", [
    (2, broker_epoch(INC2), ErrorCode.NONE),
    (2, 0, ErrorCode.STALE_BROKER_EPOCH),  # absent
    (2, broker_epoch(INC2) - 1, ErrorCode.STALE_BROKER_EPOCH),  # a previous incarnation's
    (2, broker_epoch(INC3), ErrorCode.STALE_BROKER_EPOCH),  # another broker's
    (9, broker_epoch(INC2), ErrorCode.STALE_BROKER_EPOCH),  # not registered
    (5, -1, ErrorCode.STALE_BROKER_EPOCH),  # registered without an incarnation: nothing matches
])
def test_replica_refusal(replica_id: int, epoch: int, code: ErrorCode) -> None:
    brokers = {2: {"incarnation": INC2}, 3: {"incarnation": INC3}, 5: {}}
    assert replica_refusal(brokers, replica_id, epoch) == code


async def leader(path: str) -> ReplicaManager:
    """Broker 1 leads t-0 (RF 3: 1, 2, 3; ISR all, min.insync 2), broker 4 is registered but no replica;
    two records appended, so the HW moves only once a follower says it has them."""
    rm = ReplicaManager(1, path)
    view = ClusterView(brokers={1: {"address": "a:1", "incarnation": "1700000000000-00000001"},
                                2: {"address": "a:2", "incarnation": INC2},
                                3: {"address": "a:3", "incarnation": INC3},
                                4: {"address": "a:4", "incarnation": INC4}},
                       topics={"t": TopicRecord("t", "id", {0: [1, 2, 3]})},
                       partitions={TP: PartitionState(1, 3, [1, 2, 3], 1)})
    await rm.apply_metadata(view)
    part = rm.partitions[TP]
    part.min_insync_replicas = 2
    for _ in range(2):
        part.append_as_leader(encode_batch([(int(time.time() * 1000), None, b"v", None)]), 1)
    return rm


def session_request(replica_id: int, epoch: int, offset: int = 2) -> pb.FetchRequest:
    return pb.FetchRequest(replica_id=replica_id, replica_epoch=epoch, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20,
                           session_id=0, session_epoch=0,
                           topics=[pb.FetchTopic(name="t", partitions=[pb.FetchPartition(
                               partition=0, fetch_offset=offset, current_leader_epoch=3, partition_max_bytes=1 << 20)])])


def test_session_fetches_with_a_wrong_epoch_or_from_a_non_replica_move_nothing(tmp_path) -> None:
    async def run() -> None:
        rm = await leader(str(tmp_path))
        part = rm.partitions[TP]
        assert part.high_watermark == 0
        for replica_id, epoch in [(2, 0), (3, 0), (2, broker_epoch(INC3)), (3, broker_epoch(INC3) + 1)]:
            stream = StreamFetchSession(rm)
            resp = pb.FetchResponse.FromString(await stream.fetch(session_request(replica_id, epoch)))
            assert resp.error_code == ErrorCode.STALE_BROKER_EPOCH and not resp.topics
            stream.close()
        # Broker 4 with its own current epoch, but not a replica: no data, no state.
        stream = StreamFetchSession(rm)
        resp = pb.FetchResponse.FromString(await stream.fetch(session_request(4, broker_epoch(INC4), 0)))
        (p,) = [p for t in resp.topics for p in t.partitions]
        assert p.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER and not p.records
        assert 4 not in part.followers
        stream.close()
        assert part.high_watermark == 0 and all(f.log_end_offset <= 0 for f in part.followers.values())
        # The real followers with their current epochs move the HW.
        streams = [StreamFetchSession(rm), StreamFetchSession(rm)]
        for stream, (replica_id, inc) in zip(streams, [(2, INC2), (3, INC3)], strict=True):
            resp = pb.FetchResponse.FromString(await stream.fetch(session_request(replica_id, broker_epoch(inc))))
            assert resp.error_code == 0 and part.followers[replica_id].log_end_offset == 2
        assert part.high_watermark == 2
        for stream in streams:
            stream.close()
        await rm.close()

    asyncio.run(run())


def test_sessionless_fetches_with_a_wrong_epoch_or_from_a_non_replica_move_nothing(tmp_path) -> None:
    async def run() -> None:
        rm = await leader(str(tmp_path))
        part = rm.partitions[TP]
        b = BrokerApi(rm, RequestPipeline(), 1)
        ctx = b.pipeline.context("Fetch", "forger", "ipv4:127.0.0.1:1")

        def call(replica_id: int, epoch: int, offset: int = 2) -> fetch_api.FetchCall:
            return fetch_api.FetchCall(replica_id, 0, 1, 1 << 20, [FetchSpec(TP, offset, 1 << 20, 3)],
                                       replica_epoch=epoch)

        for replica_id, epoch in [(2, 0), (3, 0), (2, broker_epoch(INC3)), (7, broker_epoch(INC2))]:
            results, _ = await fetch_api.fetch(b, ctx, call(replica_id, epoch))
            assert results is not None and results[TP].error == ErrorCode.STALE_BROKER_EPOCH
            assert not results[TP].records
        results, _ = await fetch_api.fetch(b, ctx, call(4, broker_epoch(INC4), 0))  # not a replica
        assert results is not None and results[TP].error == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert not results[TP].records and 4 not in part.followers
        assert part.high_watermark == 0
        for replica_id, inc in [(2, INC2), (3, INC3)]:  # the real followers with their current epochs
            results, _ = await fetch_api.fetch(b, ctx, call(replica_id, broker_epoch(inc)))
            assert results is not None and results[TP].error == ErrorCode.NONE
        assert part.high_watermark == 2
        await rm.close()

    asyncio.run(run())
