"""When an acks=all produce is answered at once (services/broker/api/produce.py ``ready``): over a real
replica manager in a temp dir, no network. With the leader alone in the ISR its append moves the high
watermark, so the answer needs no task and no wait; with a follower in the ISR it waits for that follower,
and a leader that lost its epoch meanwhile is not answered from the fast path."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

from services.broker.api import produce as produce_api
from services.broker.metadata_cache import ClusterView
from services.broker.replica_manager import ReplicaManager
from shared.errors import ErrorCode
from shared.metadata.types import PartitionState, TopicRecord
from shared.records.builder import encode_batch
from shared.types import TopicPartition

TP = TopicPartition("t", 0)
API = SimpleNamespace(pipeline=SimpleNamespace(metrics=None))  # what ``ready`` reads of the broker: no metrics


async def leader(path: str, isr: list[int]) -> ReplicaManager:
    """Broker 1 leads t-0 (epoch 3) with replicas [1, 2] and the given ISR."""
    rm = ReplicaManager(1, path)
    view = ClusterView(brokers={1: {"address": "127.0.0.1:1"}, 2: {"address": "127.0.0.1:2"}},
                       topics={"t": TopicRecord("t", "id", {0: [1, 2]})},
                       partitions={TP: PartitionState(1, 3, isr, 1)})
    await rm.apply_metadata(view)
    return rm


def pending(rm: ReplicaManager, acks: int) -> produce_api.PendingProduce:
    call = produce_api.ProduceCall(acks, 1000, [(TP, encode_batch([(int(time.time() * 1000), None, b"v", None)]))])
    results, waits = produce_api.append_all(rm, acks, call.data)
    return produce_api.PendingProduce(call, results, waits, 0, 0.0, 0.0)


def test_leader_alone_in_the_isr_is_answered_at_once(tmp_path) -> None:
    async def run() -> None:
        rm = await leader(str(tmp_path), isr=[1])
        for i in range(3):
            p = pending(rm, -1)
            assert p.waits  # acks=all: there is a wait, already satisfied
            results = produce_api.ready(API, p)
            assert results is not None and results[TP].error == 0 and results[TP].base_offset == i
            assert rm.partitions[TP].high_watermark == i + 1
    asyncio.run(run())


def test_a_follower_in_the_isr_is_waited_for(tmp_path) -> None:
    async def run() -> None:
        rm = await leader(str(tmp_path), isr=[1, 2])
        p = pending(rm, -1)
        assert produce_api.ready(API, p) is None  # the follower has not fetched: the high watermark is 0
        assert rm.partitions[TP].high_watermark == 0
        p = produce_api.PendingProduce(produce_api.ProduceCall(-1, 50, p.call.data), p.results, p.waits, 0, 0.0, 0.0)
        results = await produce_api.complete(API, p)  # and the slow path times out as before
        assert results[TP].error == ErrorCode.REQUEST_TIMED_OUT
        assert produce_api.ready(API, pending(rm, 1)) is not None  # acks=1 never waits
    asyncio.run(run())


def test_a_changed_leader_epoch_is_not_answered_at_once(tmp_path) -> None:
    async def run() -> None:
        rm = await leader(str(tmp_path), isr=[1])
        p = pending(rm, -1)
        rm.partitions[TP].leader_epoch += 1  # a new epoch between the append and the answer
        assert produce_api.ready(API, p) is None
        results = await produce_api.complete(API, p)  # wait_for_hw refuses the old epoch
        assert results[TP].error == ErrorCode.REQUEST_TIMED_OUT  # still the leader, of a newer epoch
    asyncio.run(run())
