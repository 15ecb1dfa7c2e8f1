"""An ISR proposal stays counted in the leader's high watermark until it is settled.

A leader proposing to add a caught-up follower counts it in its high watermark from then on (Kafka's
maximal ISR): once the controller commits the new ISR, that follower may be elected, so the leader must
not acknowledge records it lacks. The proposal is settled by an answer judged at its epochs or by a
partition state newer than the epoch it was made at; a metadata refresh of the same epoch, a failed
request or a stale-epoch refusal settle nothing. (A refresh of the same epoch used to clear it, and a
reassignment test under kill -9 saw acknowledged records lost.)

The leader's side runs on a real ``ReplicaManager`` and log, with a stand-in for the controller's
AlterPartition answers: the controller's own rules are tested in tests/unit/controller.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import grpc
import pytest

from services.broker import isr_sender
from services.broker import replication_rules as rules
from services.broker.metadata_cache import ClusterView
from services.broker.partition import Partition
from services.broker.replica_manager import ReplicaManager
from shared.errors import ErrorCode
from shared.metadata.types import PartitionState, TopicRecord
from shared.proto import tidelog_pb2 as pb
from shared.records.builder import encode_batch
from shared.types import TopicPartition

TP = TopicPartition("t", 0)


def test_a_new_proposal_keeps_the_members_of_an_unsettled_one() -> None:
    assert rules.pending_isr_after_proposal(None, -1, 4, [3, 1, 2]) == ([1, 2, 3], 4)
    assert rules.pending_isr_after_proposal([1, 2, 4], 4, 4, [1, 2, 3]) == ([1, 2, 3, 4], 4)
    assert rules.pending_isr_after_proposal([1, 2, 4], 5, 4, [1, 2, 3]) == ([1, 2, 3, 4], 5)  # state went back
    assert rules.pending_isr_after_proposal([1, 2, 4], 3, 4, [1, 2, 3]) == ([1, 2, 3], 4)  # settled by epoch 4


@pytest.mark.parametrize(("pending_epoch", "partition_epoch", "leadership_changed", "keeps"), [
    (4, 4, False, True),  # a refresh of what the leader knew: says nothing of the proposal
    (4, 3, False, True),
    (4, 5, False, False),  # the proposal applied, or something else did and refused it
    (4, 4, True, False),  # a new leader epoch fences the old proposals
])
def test_which_partition_states_settle_a_proposal(pending_epoch: int, partition_epoch: int,
                                                  leadership_changed: bool, keeps: bool) -> None:
    assert rules.keeps_pending_isr(pending_epoch, partition_epoch, leadership_changed) is keeps


@pytest.mark.parametrize(("code", "settles"), [
    (ErrorCode.NONE, True),  # applied: the answer's newer state is applied with it
    (ErrorCode.INELIGIBLE_REPLICA, True),  # judged at the proposal's epochs: nothing made at them applied
    (ErrorCode.INVALID_REQUEST, True),
    (ErrorCode.OPERATION_NOT_ATTEMPTED, True),
    (ErrorCode.INVALID_UPDATE_VERSION, False),  # the state moved on: maybe through an earlier proposal
    (ErrorCode.FENCED_LEADER_EPOCH, False),
    (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, False),  # anything else waits for the newer state, as Kafka
    (ErrorCode.NOT_CONTROLLER, False),
])
def test_which_answers_settle_a_proposal(code: ErrorCode, settles: bool) -> None:
    assert rules.answer_settles_pending_isr(code) is settles


class Clock:
    def __init__(self) -> None:
        self.ms = int(time.time() * 1000)

    def __call__(self) -> int:
        return self.ms


class Controller:
    """Answers AlterPartition as told: ``answer(item)`` gives an item's result, or raises to fail the call;
    while ``hold`` is cleared, requests wait (in flight)."""

    def __init__(self, answer: Callable[[pb.AlterPartitionItem], pb.AlterPartitionItemResult]) -> None:
        self.answer = answer
        self.hold = asyncio.Event()
        self.hold.set()
        self.requests: list[list[int]] = []

    async def AlterPartition(self, request: pb.AlterPartitionRequest, timeout: float) -> pb.AlterPartitionResponse:
        self.requests.append(list(request.items[0].new_isr))
        await self.hold.wait()
        return pb.AlterPartitionResponse(items=[self.answer(i) for i in request.items])


def accept(item: pb.AlterPartitionItem) -> pb.AlterPartitionItemResult:
    return pb.AlterPartitionItemResult(topic=item.topic, partition=item.partition, leader=1,
                                       leader_epoch=item.leader_epoch, isr=sorted(item.new_isr),
                                       partition_epoch=item.partition_epoch + 1)


def refuse(code: ErrorCode) -> Callable[[pb.AlterPartitionItem], pb.AlterPartitionItemResult]:
    return lambda item: pb.AlterPartitionItemResult(topic=item.topic, partition=item.partition, error_code=code)


def fail(item: pb.AlterPartitionItem) -> pb.AlterPartitionItemResult:
    raise grpc.aio.AioRpcError(grpc.StatusCode.DEADLINE_EXCEEDED, grpc.aio.Metadata(), grpc.aio.Metadata(),
                               "the controller died before answering")


def view(isr: list[int], partition_epoch: int, leader_epoch: int = 3) -> ClusterView:
    """Broker 1 leads t-0 on replicas 1, 2, 3."""
    return ClusterView(brokers={b: {"address": f"127.0.0.1:{b}"} for b in (1, 2, 3)},
                       topics={"t": TopicRecord("t", "id", {0: [1, 2, 3]})},
                       partitions={TP: PartitionState(1, leader_epoch, isr, partition_epoch)})


def append(part: Partition, n: int) -> None:
    part.append_as_leader(encode_batch([(int(time.time() * 1000), None, b"v", None)] * n), 1)


async def sent(controller: Controller, n: int) -> None:
    """Let the sender task run until the controller has seen ``n`` requests."""
    for _ in range(100):
        if len(controller.requests) >= n:
            return
        await asyncio.sleep(0)


async def answered(rm: ReplicaManager) -> None:
    task = rm.isr_sender._task
    if task is not None:
        await task


async def proposing_to_add_3(rm: ReplicaManager, controller: Controller) -> Partition:
    """ISR [1, 2] at partition epoch 1; all three replicas hold offsets 0-4; the leader proposes adding 3
    (the request stays in flight), then 5 more records reach broker 2 only."""

    async def stub() -> Controller:
        return controller

    rm.isr_sender.controller_stub = stub  # type: ignore[method-assign]
    await rm.apply_metadata(view([1, 2], 1))
    part = rm.partitions[TP]
    append(part, 5)
    part.update_follower(2, 5)
    part.update_follower(3, 5)
    assert part.high_watermark == 5
    controller.hold.clear()
    rm.maintain_isr()
    await sent(controller, 1)
    assert part.isr_change_in_flight and part.pending_isr == [1, 2, 3] and controller.requests == [[1, 2, 3]]
    append(part, 5)
    part.update_follower(2, 10)
    assert part.high_watermark == 5  # broker 3 (maybe in the ISR soon) has only 5
    return part


Scenario = Callable[[ReplicaManager, Controller, Clock, Partition], Awaitable[None]]


def play(tmp_path, monkeypatch: pytest.MonkeyPatch,
         answer: Callable[[pb.AlterPartitionItem], pb.AlterPartitionItemResult], scenario: Scenario) -> None:
    """Run ``scenario`` on broker 1 proposing to add 3 (``proposing_to_add_3``), the controller answering
    with ``answer``; failed requests are retried at once unless the scenario says otherwise."""
    monkeypatch.setattr(isr_sender, "ISR_RETRY_BACKOFF_S", 0.0)

    async def run() -> None:
        clock = Clock()
        rm, controller = ReplicaManager(1, str(tmp_path), clock), Controller(answer)
        try:
            await scenario(rm, controller, clock, await proposing_to_add_3(rm, controller))
        finally:
            await rm.close()

    asyncio.run(run())


def test_a_metadata_refresh_does_not_settle_a_proposal_in_flight(tmp_path, monkeypatch) -> None:
    async def run(rm: ReplicaManager, controller: Controller, clock: Clock, part: Partition) -> None:
        await rm.apply_metadata(view([1, 2], 1))  # any watch event re-applies the same state
        assert part.pending_isr == [1, 2, 3] and part.high_watermark == 5
        controller.hold.set()
        await answered(rm)  # accepted: ISR [1, 2, 3] at epoch 2
        assert part.pending_isr is None and part.isr == [1, 2, 3] and part.partition_epoch == 2
        assert part.high_watermark == 5
        part.update_follower(3, 10)
        assert part.high_watermark == 10

    play(tmp_path, monkeypatch, accept, run)


def test_a_failed_request_is_proposed_again_unchanged_until_an_answer_settles_it(tmp_path, monkeypatch) -> None:
    async def run(rm: ReplicaManager, controller: Controller, clock: Clock, part: Partition) -> None:
        controller.hold.set()
        await answered(rm)  # failed: the controller may have applied it
        assert not part.isr_change_in_flight and part.pending_isr == [1, 2, 3] and part.high_watermark == 5
        # Broker 3 stops fetching: no longer a candidate, so only the unsettled proposal makes the leader
        # propose, its ISR unchanged, to learn where it stands.
        clock.ms += 20_000
        part.update_follower(2, 10)
        assert part.isr_expansion_candidates(rm.replica_lag_time_max_ms) == []
        controller.answer = accept
        rm.maintain_isr()
        await sent(controller, 2)
        assert controller.requests[-1] == [1, 2]
        await answered(rm)  # accepted at epoch 1: the failed one had not been applied
        assert part.pending_isr is None and part.isr == [1, 2] and part.high_watermark == 10
        rm.maintain_isr()
        await sent(controller, 3)
        assert len(controller.requests) == 2  # settled: nothing more to propose

    play(tmp_path, monkeypatch, fail, run)


def test_a_newer_state_settles_the_proposal(tmp_path, monkeypatch) -> None:
    async def run(rm: ReplicaManager, controller: Controller, clock: Clock, part: Partition) -> None:
        controller.hold.set()
        await answered(rm)
        await rm.apply_metadata(view([1, 2], 0))  # older than what the leader applied: ignored
        assert part.pending_isr == [1, 2, 3] and part.high_watermark == 5
        await rm.apply_metadata(view([1, 2], 2))  # something else moved the epoch: it was not applied
        assert part.pending_isr is None and part.high_watermark == 10

    play(tmp_path, monkeypatch, fail, run)


def test_a_new_leader_epoch_settles_the_proposal(tmp_path, monkeypatch) -> None:
    async def run(rm: ReplicaManager, controller: Controller, clock: Clock, part: Partition) -> None:
        await rm.apply_metadata(view([1, 2], 1, leader_epoch=4))  # re-elected: old proposals are fenced
        assert part.pending_isr is None
        controller.answer = refuse(ErrorCode.FENCED_LEADER_EPOCH)
        controller.hold.set()
        await answered(rm)
        assert part.pending_isr is None and not part.isr_change_in_flight

    play(tmp_path, monkeypatch, accept, run)


def test_two_unsettled_proposals_count_both(tmp_path, monkeypatch) -> None:
    async def run(rm: ReplicaManager, controller: Controller, clock: Clock, part: Partition) -> None:
        controller.hold.set()
        await answered(rm)
        part.propose_isr([1, 2])  # a later proposal at the same epoch: the first may still have applied
        assert part.pending_isr == [1, 2, 3] and part.high_watermark == 5
        part.isr_proposal_done(ErrorCode.INELIGIBLE_REPLICA)  # judged at epoch 1: neither was applied
        assert part.pending_isr is None and part.high_watermark == 10

    play(tmp_path, monkeypatch, fail, run)


@pytest.mark.parametrize(("code", "settled"), [
    (ErrorCode.INELIGIBLE_REPLICA, True),
    (ErrorCode.INVALID_UPDATE_VERSION, False),
    (ErrorCode.FENCED_LEADER_EPOCH, False),
])
def test_a_refusal_settles_the_proposal_only_when_judged_at_its_epochs(tmp_path, monkeypatch, code: ErrorCode,
                                                                       settled: bool) -> None:
    async def run(rm: ReplicaManager, controller: Controller, clock: Clock, part: Partition) -> None:
        monkeypatch.setattr(isr_sender, "ISR_RETRY_BACKOFF_S", 0.5)
        controller.hold.set()
        await answered(rm)
        assert not part.isr_change_in_flight
        if settled:
            assert part.pending_isr is None and part.high_watermark == 10
        else:
            assert part.pending_isr == [1, 2, 3] and part.high_watermark == 5
            rm.maintain_isr()  # waits a moment for the newer state before proposing again
            await sent(controller, 2)
            assert len(controller.requests) == 1
            clock.ms += 500
            rm.maintain_isr()
            await sent(controller, 2)
            assert len(controller.requests) == 2
            await answered(rm)

    play(tmp_path, monkeypatch, refuse(code), run)


def test_a_fenced_leader_ignores_an_older_state_and_waits_for_the_current_one(tmp_path, monkeypatch) -> None:
    async def run(rm: ReplicaManager, controller: Controller, clock: Clock, part: Partition) -> None:
        controller.hold.set()
        await answered(rm)  # accepted: ISR [1, 2, 3] at epoch 2, ahead of the watch
        rm.fence()  # the etcd lease is lost
        await rm.apply_metadata(view([1, 2], 1))  # the watch's older event arrives meanwhile
        assert part.fenced and part.isr == [1, 2, 3] and part.partition_epoch == 2
        await rm.apply_metadata(view([1, 2, 3], 2))  # the re-read's current state
        assert part.is_leader and part.isr == [1, 2, 3] and part.high_watermark == 5

    play(tmp_path, monkeypatch, accept, run)
