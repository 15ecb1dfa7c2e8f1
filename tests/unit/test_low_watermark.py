"""The low watermark (Kafka's ``Partition.lowWatermarkIfLeader``) and DeleteRecords waiting for it (Kafka's
``DelayedDeleteRecords``): the pure rule over the leader and its replicas' log start offsets, the
leader partition's purgatory (woken by followers' fetches, by metadata, failed by lost leadership), and
the DeleteRecords handler answering once the replicas moved, REQUEST_TIMED_OUT or NOT_LEADER_OR_FOLLOWER.
No network: a real replica manager over a temp dir."""

from __future__ import annotations

import asyncio
from typing import Any

from kio.serial import entity_reader

from services.broker.api import BrokerApi
from services.broker.kafka import admin_records
from services.broker.kafka.apis import Connection
from services.broker.kafka.registry import kafka_apis
from services.broker.metadata_cache import ClusterView
from services.broker.pipeline import RequestContext, RequestPipeline
from services.broker.replica_manager import ReplicaManager
from services.broker.replication_rules import FollowerState, low_watermark
from shared.errors import ErrorCode
from shared.kafka.messages import RequestFrame, api, build, encode_response
from shared.metadata.types import PartitionState, TopicRecord
from shared.records.builder import encode_batch
from shared.types import TopicPartition

TP = TopicPartition("t", 0)
TS = 1_700_000_000_000


def everyone(_: int) -> bool:
    return True


# -- the rule ------------------------------------------------------------------------------------------------


def test_the_smallest_log_start_offset_over_the_leader_and_its_replicas() -> None:
    followers = {2: FollowerState(log_start_offset=7), 3: FollowerState(log_start_offset=4)}
    assert low_watermark(1, 9, [1, 2, 3], followers, everyone) == 4
    assert low_watermark(1, 3, [1, 2, 3], followers, everyone) == 3  # the leader's own counts too
    assert low_watermark(1, 9, [1], {}, everyone) == 9  # no other replica: the leader's log start offset


def test_only_replicas_on_live_brokers_count() -> None:
    followers = {2: FollowerState(log_start_offset=7), 3: FollowerState(log_start_offset=4)}
    assert low_watermark(1, 9, [1, 2, 3], followers, lambda b: b != 3) == 7
    assert low_watermark(1, 9, [1, 2, 3], followers, lambda b: b == 1) == 9


def test_a_live_replica_not_heard_from_is_unknown_and_holds_it_at_minus_one() -> None:
    assert low_watermark(1, 9, [1, 2, 3], {2: FollowerState(log_start_offset=7)}, everyone) == -1  # 3: no state
    assert low_watermark(1, 9, [1, 2], {2: FollowerState()}, everyone) == -1  # fetched nothing yet this leadership


def test_only_assigned_replicas_count() -> None:
    followers = {2: FollowerState(log_start_offset=7), 4: FollowerState(log_start_offset=0)}  # 4: not a replica
    assert low_watermark(1, 9, [1, 2], followers, everyone) == 7


def test_a_fetch_that_does_not_say_its_log_start_offset_keeps_the_last_one() -> None:
    st = FollowerState()
    st.fetched(100, 10, 10, 5)
    assert st.log_start_offset == 5
    st.fetched(200, 11, 11)
    assert st.log_start_offset == 5
    session = FollowerState()  # any object with last_fetch_ms is a session clock
    session.last_fetch_ms = 300
    st.attach(session, 12, 12, 6)
    assert (st.log_start_offset, st.log_end_offset) == (6, 12)
    st.attach(session, 13, 13)
    assert st.log_start_offset == 6


# -- the leader partition ------------------------------------------------------------------------------------


def view_of(brokers: list[int], isr: list[int], leader: int = 1, epoch: int = 0) -> ClusterView:
    return ClusterView(brokers={b: {"id": b, "address": f"127.0.0.1:{b}"} for b in brokers},
                       topics={"t": TopicRecord("t", "id", {0: [1, 2, 3]})},
                       partitions={TP: PartitionState(leader, epoch, isr, epoch)})


async def led_here(path: str, isr: list[int] | None = None) -> ReplicaManager:
    """Broker 1 leads t-0 (replicas 1, 2, 3) with 10 records committed; the followers said log start 0."""
    rm = ReplicaManager(1, path)
    await rm.apply_metadata(view_of([1, 2, 3], isr or [1, 2, 3]))
    part = rm.partitions[TP]
    part.append_as_leader(encode_batch([(TS + i, None, b"v", None) for i in range(10)]), 1)
    for r in (2, 3):
        part.update_follower(r, 10, 0)
    assert part.high_watermark == 10 and part.low_watermark(everyone) == 0
    return rm


async def stop_fetchers(rm: ReplicaManager) -> None:
    """Close the replica fetchers a leadership move started (towards brokers that do not exist here)."""
    for fetcher in list(rm.fetchers.values()):
        await fetcher.close()


def test_the_wait_ends_when_the_last_live_replica_reports_its_log_start(tmp_path: Any) -> None:
    async def run() -> None:
        rm = await led_here(str(tmp_path))
        part = rm.partitions[TP]
        part.delete_records(6)
        waiting = asyncio.ensure_future(part.wait_for_low_watermark(6, 10, part.leader_epoch, everyone))
        await asyncio.sleep(0)
        part.update_follower(2, 10, 6)
        await asyncio.sleep(0)
        assert not waiting.done()  # replica 3 still starts at 0
        part.update_follower(3, 10, 8)
        assert await waiting == 6  # the smallest: the leader's and replica 2's
        assert await part.wait_for_low_watermark(5, 10, part.leader_epoch, everyone) == 6  # reached already

    asyncio.run(run())


def test_a_replica_out_of_the_isr_but_alive_holds_it(tmp_path: Any) -> None:
    async def run() -> None:
        rm = await led_here(str(tmp_path), isr=[1, 2])
        part = rm.partitions[TP]
        part.delete_records(6)
        part.update_follower(2, 10, 6)
        assert part.low_watermark(everyone) == 0  # replica 3 is outside the ISR, but its broker is alive
        assert await part.wait_for_low_watermark(6, 0.05, part.leader_epoch, everyone) is None

    asyncio.run(run())


def test_a_broker_leaving_the_metadata_no_longer_holds_it(tmp_path: Any) -> None:
    async def run() -> None:
        rm = await led_here(str(tmp_path))
        part = rm.partitions[TP]
        part.delete_records(6)
        part.update_follower(2, 10, 6)

        def alive(b: int) -> bool:
            return b in rm.view.brokers

        waiting = asyncio.ensure_future(part.wait_for_low_watermark(6, 10, part.leader_epoch, alive))
        await asyncio.sleep(0)
        assert not waiting.done()
        await rm.apply_metadata(view_of([1, 2], [1, 2]))  # broker 3's registration expired
        assert await waiting == 6

    asyncio.run(run())


def test_lost_leadership_ends_the_wait_without_a_low_watermark(tmp_path: Any) -> None:
    async def run() -> None:
        rm = await led_here(str(tmp_path))
        part = rm.partitions[TP]
        part.delete_records(6)
        waiting = asyncio.ensure_future(part.wait_for_low_watermark(6, 10, part.leader_epoch, everyone))
        await asyncio.sleep(0)
        await rm.apply_metadata(view_of([1, 2, 3], [2, 3], leader=2, epoch=1))
        assert await waiting is None
        assert not part._lw_waiters
        await stop_fetchers(rm)

    asyncio.run(run())


# -- the DeleteRecords handler -------------------------------------------------------------------------------


def frame(offset: int, timeout_ms: int, partitions: tuple[int, ...] = (0,)) -> tuple[Any, RequestFrame]:
    a = api(21, 2)
    body = build(a.request, {"topics": [{"name": "t", "partitions": [{"partition_index": p, "offset": offset}
                                                                     for p in partitions]}], "timeout": timeout_ms})
    return a, RequestFrame(a, 1, "test", body)


async def delete_records(rm: ReplicaManager, offset: int, timeout_ms: int,
                         partitions: tuple[int, ...] = (0,)) -> list[tuple[int, int]]:
    """``[(error_code, low_watermark)]`` per partition of a DeleteRecords v2 handled by broker ``rm``."""
    apis = kafka_apis(BrokerApi(rm, RequestPipeline(), rm.broker_id, configs={}))
    admin_records.register(apis)
    a, f = frame(offset, timeout_ms, partitions)
    response, _ = await apis.handle(f, RequestContext(a.name, "test", "ANONYMOUS", "peer", 0.0), Connection("peer"))
    data = b"".join(encode_response(a, 1, response))[4:]
    _, n = entity_reader(a.response.__header_schema__)(data, 0)
    decoded, _ = entity_reader(a.response)(data, n)
    return [(int(p.error_code), int(p.low_watermark)) for p in decoded.topics[0].partitions]


def test_delete_records_answers_once_the_followers_moved(tmp_path: Any) -> None:
    async def run() -> None:
        rm = await led_here(str(tmp_path))
        part = rm.partitions[TP]
        answer = asyncio.ensure_future(delete_records(rm, 6, 10_000))
        for _ in range(5):
            await asyncio.sleep(0)
        assert part.log.log_start_offset == 6 and not answer.done()  # deleted here, waiting for the replicas
        part.update_follower(2, 10, 6)
        part.update_follower(3, 10, 6)
        assert await answer == [(0, 6)]
        assert await delete_records(rm, 4, 10_000) == [(0, 6)]  # reached already: at once, never backwards
        assert await delete_records(rm, 11, 10_000) == [(ErrorCode.OFFSET_OUT_OF_RANGE, -1)]
        assert await delete_records(rm, 0, 10_000, partitions=(5,)) == [(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1)]

    asyncio.run(run())


def test_delete_records_times_out_with_the_low_watermark_after_the_leaders_delete(tmp_path: Any) -> None:
    async def run() -> None:
        rm = await led_here(str(tmp_path))
        part = rm.partitions[TP]
        part.update_follower(2, 10, 3)
        assert await delete_records(rm, 6, 50) == [(ErrorCode.REQUEST_TIMED_OUT, 0)]  # replica 3 still at 0
        assert part.log.log_start_offset == 6  # the leader's delete stands
        part.update_follower(3, 10, 6)
        assert await delete_records(rm, 6, 50) == [(ErrorCode.REQUEST_TIMED_OUT, 3)]  # now replica 2 holds it
        part.update_follower(2, 10, 6)
        assert await delete_records(rm, -1, 50) == [(ErrorCode.REQUEST_TIMED_OUT, 6)]  # -1: the high watermark, 10

    asyncio.run(run())


def test_delete_records_answers_not_leader_when_the_leadership_moves_meanwhile(tmp_path: Any) -> None:
    async def run() -> None:
        rm = await led_here(str(tmp_path))
        answer = asyncio.ensure_future(delete_records(rm, 6, 10_000))
        for _ in range(5):
            await asyncio.sleep(0)
        await rm.apply_metadata(view_of([1, 2, 3], [2, 3], leader=2, epoch=1))
        assert await answer == [(ErrorCode.NOT_LEADER_OR_FOLLOWER, -1)]
        await stop_fetchers(rm)

    asyncio.run(run())
