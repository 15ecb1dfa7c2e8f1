"""An ISR proposal stays counted in the leader's high watermark until it is settled.

A leader proposing to add a caught-up follower counts it in its high watermark from then on (Kafka's
maximal ISR): once the controller commits the new ISR, that follower may be elected, so the leader must
not acknowledge records it lacks. The proposal is settled by the controller's answer or by a partition
state newer than the epoch it was made at; a metadata refresh of the same epoch, a failed request or a
refusal saying the state moved on settle nothing. (A refresh of the same epoch used to clear it, and a
reassignment test under kill -9 saw acknowledged records lost.)
"""

from __future__ import annotations

import asyncio
import time

import pytest

from services.broker import replication_rules as rules
from services.broker.isr_sender import ISR_RETRY_BACKOFF_S
from services.broker.metadata_cache import ClusterView
from services.broker.partition import Partition
from services.broker.replica_manager import ReplicaManager
from shared.errors import ErrorCode
from shared.metadata.types import PartitionState, TopicRecord
from shared.records.builder import encode_batch
from shared.types import TopicPartition

TP = TopicPartition("t", 0)


def test_a_new_proposal_keeps_the_members_of_an_unsettled_one_of_the_same_epoch() -> None:
    assert rules.pending_isr_after_proposal(None, -1, 4, [3, 1, 2]) == [1, 2, 3]
    assert rules.pending_isr_after_proposal([1, 2, 4], 4, 4, [1, 2, 3]) == [1, 2, 3, 4]
    assert rules.pending_isr_after_proposal([1, 2, 4], 3, 4, [1, 2, 3]) == [1, 2, 3]  # settled by epoch 4


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
    (ErrorCode.INELIGIBLE_REPLICA, True),
    (ErrorCode.INVALID_REQUEST, True),
    (ErrorCode.INVALID_UPDATE_VERSION, False),  # the state moved on: maybe through an earlier proposal
    (ErrorCode.FENCED_LEADER_EPOCH, False),
    (ErrorCode.NONE, False),  # applied: the answer's newer state settles it
])
def test_which_refusals_settle_a_proposal(code: ErrorCode, settles: bool) -> None:
    assert rules.refusal_settles_pending_isr(code) is settles


def view(isr: list[int], partition_epoch: int) -> ClusterView:
    """Broker 1 leads t-0 (leader epoch 3) on replicas 1, 2, 3; no controller is registered, so every
    AlterPartition request fails (its outcome unknown)."""
    return ClusterView(brokers={b: {"address": f"127.0.0.1:{b}"} for b in (1, 2, 3)},
                       topics={"t": TopicRecord("t", "id", {0: [1, 2, 3]})},
                       partitions={TP: PartitionState(1, 3, isr, partition_epoch)})


def append(part: Partition, n: int) -> None:
    part.append_as_leader(encode_batch([(int(time.time() * 1000), None, b"v", None)] * n), 1)


async def proposing_to_add_3(rm: ReplicaManager) -> Partition:
    """ISR [1, 2] at epoch 1; all three replicas hold offsets 0-4; the leader proposes adding 3, then 5
    more records reach broker 2 only."""
    await rm.apply_metadata(view([1, 2], 1))
    part = rm.partitions[TP]
    append(part, 5)
    part.update_follower(2, 5)
    part.update_follower(3, 5)
    assert part.high_watermark == 5
    rm.maintain_isr()
    assert part.isr_change_in_flight and part.pending_isr == [1, 2, 3]
    append(part, 5)
    part.update_follower(2, 10)
    assert part.high_watermark == 5  # broker 3 (maybe in the ISR soon) has only 5
    return part


def test_a_metadata_refresh_or_a_failed_request_does_not_let_the_hw_pass_the_proposed_replica(tmp_path) -> None:
    async def run() -> None:
        rm = ReplicaManager(1, str(tmp_path))
        part = await proposing_to_add_3(rm)
        await rm.apply_metadata(view([1, 2], 1))  # any watch event re-applies the same state
        assert part.pending_isr == [1, 2, 3] and part.high_watermark == 5
        deadline = time.monotonic() + ISR_RETRY_BACKOFF_S + 5
        while part.isr_change_in_flight and time.monotonic() < deadline:  # the request fails: no controller
            await asyncio.sleep(0.05)
        assert not part.isr_change_in_flight and part.pending_isr == [1, 2, 3] and part.high_watermark == 5
        rm.maintain_isr()  # proposed again, to settle it
        assert part.isr_change_in_flight and part.pending_isr == [1, 2, 3]
        await rm.apply_metadata(view([1, 2, 3], 2))  # the controller had applied it
        assert part.pending_isr is None and part.isr == [1, 2, 3] and part.high_watermark == 5
        part.update_follower(3, 10)
        assert part.high_watermark == 10
        await rm.close()

    asyncio.run(run())


def test_a_newer_state_without_the_replica_settles_the_proposal(tmp_path) -> None:
    async def run() -> None:
        rm = ReplicaManager(1, str(tmp_path))
        part = await proposing_to_add_3(rm)
        await rm.apply_metadata(view([1, 2], 2))  # something else moved the epoch: the proposal was refused
        assert part.pending_isr is None and part.high_watermark == 10
        await rm.close()

    asyncio.run(run())


@pytest.mark.parametrize(("code", "hw"), [(ErrorCode.INELIGIBLE_REPLICA, 10), (ErrorCode.INVALID_UPDATE_VERSION, 5)])
def test_a_refusal_at_the_proposals_epoch_settles_it(tmp_path, code: ErrorCode, hw: int) -> None:
    async def run() -> None:
        rm = ReplicaManager(1, str(tmp_path))
        part = await proposing_to_add_3(rm)
        part.isr_proposal_done(code)
        assert not part.isr_change_in_flight and part.high_watermark == hw
        await rm.close()

    asyncio.run(run())
