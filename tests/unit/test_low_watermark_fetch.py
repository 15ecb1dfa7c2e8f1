"""The follower's log start offset reaches its leader through follower fetch sessions, in process: the
follower's ``ReplicaFetcher`` builds its requests and handles the answers, the leader's
``StreamFetchSession`` serves them (two real replica managers over temp dirs, no sockets). A log start
offset moved by the leader's answer is named in the follower's next request even though its fetch offset
did not move, and a DeleteRecords on the leader answers only once that request arrived."""

from __future__ import annotations

import asyncio
from typing import Any

from services.broker.follower_sessions import StreamFetchSession
from services.broker.metadata_cache import ClusterView
from services.broker.replica_fetcher import ReplicaFetcher
from services.broker.replica_manager import ReplicaManager
from shared.metadata.types import PartitionState, TopicRecord
from shared.proto import tidelog_pb2 as pb
from shared.records.builder import encode_batch
from shared.types import TopicPartition
from tests.unit.test_low_watermark import delete_records

TP = TopicPartition("t", 0)
TS = 1_700_000_000_000
FOLLOWER_INCARNATION = "1700000000000-0badcafe"  # broker 2's registration: its fetches carry its epoch (KIP-380)


def view() -> ClusterView:
    return ClusterView(brokers={1: {"id": 1, "address": "127.0.0.1:1"},
                                2: {"id": 2, "address": "127.0.0.1:2", "incarnation": FOLLOWER_INCARNATION}},
                       topics={"t": TopicRecord("t", "id", {0: [1, 2]})},
                       partitions={TP: PartitionState(1, 0, [1, 2], 0)})


async def pair(path: Any) -> tuple[ReplicaManager, ReplicaManager, ReplicaFetcher]:
    """Broker 1 leads t-0, broker 2 follows it; the follower's divergence check is taken as done."""
    leader = ReplicaManager(1, str(path / "b1"))
    follower = ReplicaManager(2, str(path / "b2"), incarnation=FOLLOWER_INCARNATION)
    await leader.apply_metadata(view())
    await follower.apply_metadata(view())
    fetcher = follower.fetchers[1]
    fetcher.max_wait_ms = 0
    fetcher.partitions[TP].truncated = True
    fetcher._to_truncate.discard(TP)
    return leader, follower, fetcher


async def round_trip(fetcher: ReplicaFetcher, stream: StreamFetchSession) -> dict[int, int]:
    """One fetch: the follower's next request, served by the leader, handled by the follower; returns
    the ``{partition: log_start_offset}`` the request named."""
    plan, request = fetcher._request()
    named = {p.partition: p.log_start_offset for t in request.topics for p in t.partitions}
    response = pb.FetchResponse.FromString(await stream.fetch(request))
    assert fetcher.session.on_response(plan, response.error_code, response.session_id)
    for t in response.topics:
        for p in t.partitions:
            tp = TopicPartition(t.name, p.partition)
            fetcher.session.mark(tp)
            fetcher._handle(tp, fetcher.rm.partitions[tp], fetcher.partitions[tp], p)
    return named


def test_the_leader_learns_the_followers_log_start_and_delete_records_waits_for_it(tmp_path: Any) -> None:
    async def run() -> None:
        leader, follower, fetcher = await pair(tmp_path)
        stream = StreamFetchSession(leader)
        lpart, fpart = leader.partitions[TP], follower.partitions[TP]
        lpart.append_as_leader(encode_batch([(TS + i, None, b"v", None) for i in range(10)]), 1)
        try:
            assert await round_trip(fetcher, stream) == {0: 0}  # full: the records
            assert await round_trip(fetcher, stream) == {0: 0}  # at 10: the high watermark moves
            await round_trip(fetcher, stream)
            assert (fpart.log_end_offset, fpart.high_watermark, lpart.followers[2].log_start_offset) == (10, 10, 0)
            assert await round_trip(fetcher, stream) == {}  # idle: nothing to name

            answer = asyncio.ensure_future(delete_records(leader, 6, 10_000))
            for _ in range(5):
                await asyncio.sleep(0)
            assert not answer.done() and lpart.log.log_start_offset == 6
            assert await round_trip(fetcher, stream) == {}  # the leader answers its new log start offset
            assert fpart.log.log_start_offset == 6 and not answer.done()
            assert await round_trip(fetcher, stream) == {0: 6}  # named for it alone: same fetch offset
            assert lpart.followers[2].log_start_offset == 6
            assert await answer == [(0, 6)]
            assert await round_trip(fetcher, stream) == {}  # said once
        finally:
            stream.close()
            await fetcher.close()

    asyncio.run(run())


def test_a_new_session_tells_the_log_start_again(tmp_path: Any) -> None:
    async def run() -> None:
        leader, follower, fetcher = await pair(tmp_path)
        lpart, fpart = leader.partitions[TP], follower.partitions[TP]
        lpart.append_as_leader(encode_batch([(TS + i, None, b"v", None) for i in range(10)]), 1)
        stream = StreamFetchSession(leader)
        try:
            for _ in range(3):
                await round_trip(fetcher, stream)
            lpart.delete_records(4)
            await round_trip(fetcher, stream)
            assert fpart.log.log_start_offset == 4
            stream.close()  # the stream broke: the leader's states detach, the follower starts a new session
            fetcher.session.reset()
            stream = StreamFetchSession(leader)
            assert await round_trip(fetcher, stream) == {0: 4}
            assert lpart.followers[2].log_start_offset == 4 and lpart.followers[2].session is stream.session
        finally:
            stream.close()
            await fetcher.close()

    asyncio.run(run())
