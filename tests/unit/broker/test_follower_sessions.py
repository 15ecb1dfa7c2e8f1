"""The leader's side of follower fetch sessions (services/broker/follower_sessions.py) over a real replica
manager in a temp dir, no network: what full, idle and incremental requests are answered with, a partition
left without room read again, session errors, and the follower's state attached to the session."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable

from services.broker.fetch_reader import broker_epoch
from services.broker.follower_sessions import StreamFetchSession
from services.broker.metadata_cache import ClusterView
from services.broker.replica_manager import ReplicaManager
from shared.errors import ErrorCode
from shared.metadata.types import PartitionState, TopicRecord
from shared.proto import tidelog_pb2 as pb
from shared.records.builder import encode_batch
from shared.types import TopicPartition

P0, P1 = TopicPartition("t", 0), TopicPartition("t", 1)
FOLLOWER_INCARNATION = "1700000000000-0badcafe"  # broker 2's registration: its fetches carry its epoch


async def leader_of_two(path: str) -> ReplicaManager:
    """Broker 1 leads t-0 and t-1 (epoch 3), broker 2 follows both."""
    rm = ReplicaManager(1, path)
    assign = {0: [1, 2], 1: [1, 2]}
    view = ClusterView(brokers={1: {"address": "127.0.0.1:1"},
                                2: {"address": "127.0.0.1:2", "incarnation": FOLLOWER_INCARNATION}},
                       topics={"t": TopicRecord("t", "id", assign)},
                       partitions={TopicPartition("t", p): PartitionState(1, 3, [1, 2], 1) for p in assign})
    await rm.apply_metadata(view)
    return rm


def request(session_id: int, epoch: int, changed: Iterable[tuple[int, int]] = (), forgotten: Iterable[int] = (),
            max_bytes: int = 1 << 20) -> pb.FetchRequest:
    return pb.FetchRequest(
        replica_id=2, replica_epoch=broker_epoch(FOLLOWER_INCARNATION), max_wait_ms=0, min_bytes=1, max_bytes=max_bytes, session_id=session_id, session_epoch=epoch,
        topics=[pb.FetchTopic(name="t", partitions=[pb.FetchPartition(partition=p, fetch_offset=o, current_leader_epoch=3,
                                                                      partition_max_bytes=1 << 20) for p, o in changed])],
        forgotten_topics=[pb.FetchTopic(name="t", partitions=[pb.FetchPartition(partition=p) for p in forgotten])])


def answered(raw: bytes) -> tuple[pb.FetchResponse, dict[int, pb.FetchPartitionResponse]]:
    resp = pb.FetchResponse.FromString(raw)
    return resp, {p.partition: p for t in resp.topics for p in t.partitions}


def test_full_idle_and_incremental_requests(tmp_path) -> None:
    async def run() -> None:
        rm = await leader_of_two(str(tmp_path))
        stream = StreamFetchSession(rm)
        resp, parts = answered(await stream.fetch(request(0, 0, [(0, 0), (1, 0)])))
        sid = resp.session_id
        assert sid and resp.error_code == 0 and set(parts) == {0, 1}  # full: every partition, with its HW
        follower = rm.partitions[P0].followers[2]
        assert follower.session is stream.session and follower.log_end_offset == 0
        assert (await stream.fetch(request(sid, 1))) == request_free(sid)  # idle: nothing to say

        value = b"v" * 600
        for tp in (P0, P1):
            for _ in range(2):
                rm.partitions[tp].append_as_leader(encode_batch([(int(time.time() * 1000), None, value, None)]), 1)
        _, parts = answered(await stream.fetch(request(sid, 2, max_bytes=700)))  # room for one batch only
        full = [p for p, r in parts.items() if r.records]
        assert len(full) == 1 and parts[full[0]].next_offset == 1
        other = 1 - full[0]
        _, parts = answered(await stream.fetch(request(sid, 3, max_bytes=700)))
        assert set(parts) == {other} and parts[other].records  # left without room: read again, though unchanged
        _, parts = answered(await stream.fetch(request(sid, 4, [(full[0], 1)])))
        assert set(parts) == {full[0]} and parts[full[0]].fetch_offset == 1 and parts[full[0]].records
        assert rm.partitions[TopicPartition("t", full[0])].followers[2].log_end_offset == 1

        _, parts = answered(await stream.fetch(request(sid, 5, [(0, 2), (1, 2)])))  # caught up: the HW moves
        assert {p: (r.high_watermark, r.records) for p, r in parts.items()} == {0: (2, b""), 1: (2, b"")}
        assert (await stream.fetch(request(sid, 6))) == request_free(sid)

        resp, _ = answered(await stream.fetch(request(sid, 9)))
        assert resp.error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH
        resp, _ = answered(await stream.fetch(request(sid + 1, 7)))
        assert resp.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
        _, parts = answered(await stream.fetch(request(sid, 7, forgotten=[0])))
        assert rm.partitions[P0].followers[2].session is None  # forgotten: its times stop following the session
        stream.close()
        assert rm.partitions[P1].followers[2].session is None and not rm.fetch_sessions
        await rm.close()

    asyncio.run(run())


def request_free(session_id: int) -> bytes:
    """An empty response of ``session_id``."""
    return pb.FetchResponse(session_id=session_id).SerializeToString()


def test_a_replica_removed_and_added_back_under_its_session_is_attached_again(tmp_path) -> None:
    """The leader forgets a removed replica's state; when the replica is added back while its session still
    holds the partition (its own metadata skipped the removal), the session must read the partition again so
    the follower's state is attached anew and it can rejoin the ISR, although no record is appended."""
    async def run() -> None:
        rm = await leader_of_two(str(tmp_path))
        stream = StreamFetchSession(rm)
        resp, _ = answered(await stream.fetch(request(0, 0, [(0, 0), (1, 0)])))
        sid = resp.session_id
        rm.partitions[P0].append_as_leader(encode_batch([(int(time.time() * 1000), None, b"v", None)]), 1)
        await stream.fetch(request(sid, 1, [(0, 1)]))  # caught up
        brokers = rm.view.brokers

        def view(replicas: list[int], isr: list[int], partition_epoch: int) -> ClusterView:
            assign = {0: replicas, 1: [1, 2]}
            return ClusterView(brokers=brokers, topics={"t": TopicRecord("t", "id", assign)},
                               partitions={P0: PartitionState(1, 3, isr, partition_epoch),
                                           P1: PartitionState(1, 3, [1, 2], 1)})

        await rm.apply_metadata(view([1], [1], 2))
        assert 2 not in rm.partitions[P0].followers
        await rm.apply_metadata(view([1, 2], [1], 3))
        for epoch in (2, 3):  # the follower's idle requests: it names nothing, its position has not moved
            await stream.fetch(request(sid, epoch))
        part = rm.partitions[P0]
        assert 2 in part.followers and part.followers[2].log_end_offset == 1
        assert part.isr_expansion_candidates(rm.replica_lag_time_max_ms) == [2]

    asyncio.run(run())
