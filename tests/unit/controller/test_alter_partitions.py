"""A batch of ISR proposals (services/controller/partitions.py ``alter_partitions``), pure: each item is
judged exactly as a single-partition AlterPartition, in order; unknown and repeated partitions are refused."""

from __future__ import annotations

import asyncio
import contextlib

from services.controller.partitions import alter_partition, alter_partitions
from services.controller.replication import run_to_the_end
from shared.errors import ErrorCode, TidelogError
from shared.metadata.types import PartitionState as S
from shared.metadata.types import TopicRecord
from shared.types import TopicPartition

TOPICS = {"t": TopicRecord("t", "id", {p: [1, 2, 3] for p in range(4)})}
STATES = {TopicPartition("t", 0): S(1, 5, [1], 9), TopicPartition("t", 1): S(1, 5, [1, 2], 3),
          TopicPartition("t", 2): S(2, 7, [2], 4), TopicPartition("t", 3): S(1, 5, [1, 2, 3], 8)}


def code(result: S | TidelogError) -> ErrorCode:
    assert isinstance(result, TidelogError), result
    return result.code


def test_each_item_gets_its_own_result_in_order() -> None:
    items = [
        (TopicPartition("t", 0), 5, 9, [3, 1, 2]),  # expansion: accepted, ordered by replicas
        (TopicPartition("t", 1), 5, 2, [1, 2, 3]),  # stale partition epoch
        (TopicPartition("t", 2), 7, 4, [2, 1]),  # broker 1 does not lead it
        (TopicPartition("t", 3), 5, 8, [1]),  # shrink: accepted
        (TopicPartition("u", 0), 1, 1, [1]),  # no such topic
    ]
    out = alter_partitions(TOPICS, STATES, 1, items, live={1, 2, 3})
    assert out[0] == S(1, 5, [1, 2, 3], 10)
    assert code(out[1]) == ErrorCode.INVALID_UPDATE_VERSION
    assert code(out[2]) == ErrorCode.FENCED_LEADER_EPOCH
    assert out[3] == S(1, 5, [1], 9)
    assert code(out[4]) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_a_batch_decides_as_single_requests_would() -> None:
    items = [(tp, st.leader_epoch, st.partition_epoch, [1, 2, 3]) for tp, st in STATES.items()]
    batch = alter_partitions(TOPICS, STATES, 1, items, live={1, 2})
    for (tp, le, pe, isr), got in zip(items, batch):
        try:
            single: S | TidelogError = alter_partition(STATES[tp], [1, 2, 3], 1, le, pe, isr, {1, 2})
        except TidelogError as exc:
            single = exc
        assert type(got) is type(single)
        assert (code(got) == code(single)) if isinstance(got, TidelogError) else got == single


def test_a_partition_named_twice_is_refused_the_second_time() -> None:
    tp = TopicPartition("t", 0)
    out = alter_partitions(TOPICS, STATES, 1, [(tp, 5, 9, [1, 2]), (tp, 5, 9, [1, 3])], live={1, 2, 3})
    assert out[0] == S(1, 5, [1, 2], 10)
    assert code(out[1]) == ErrorCode.INVALID_REQUEST


def test_the_epochs_are_checked_before_the_proposal_itself() -> None:
    """A leader settles its pending ISR on INVALID_REQUEST or INELIGIBLE_REPLICA (nothing made at its epochs
    was applied) and keeps it on a stale-epoch refusal: so a proposal that is both stale and invalid must
    be refused as stale."""
    st = S(1, 5, [1, 2], 9)
    for leader_epoch, partition_epoch, want in ((4, 9, ErrorCode.FENCED_LEADER_EPOCH),
                                                (5, 8, ErrorCode.INVALID_UPDATE_VERSION)):
        for isr, live in (([2, 3], {1, 2, 3}), ([1, 2, 4], {1, 2, 3}), ([1, 2, 3], {1, 2})):
            try:
                alter_partition(st, [1, 2, 3], 1, leader_epoch, partition_epoch, isr, live)
            except TidelogError as exc:
                assert exc.code == want, (leader_epoch, partition_epoch, isr, live)
            else:
                raise AssertionError("accepted")


def test_an_unchanged_isr_is_accepted_with_a_new_partition_epoch() -> None:
    """A leader proposes its ISR unchanged to settle a proposal whose request failed: the answer's newer
    partition epoch is what settles it."""
    assert alter_partition(S(1, 5, [1, 2], 9), [1, 2, 3], 1, 5, 9, [2, 1], {1, 2, 3}) == S(1, 5, [1, 2], 10)


def test_a_cancelled_alter_partition_still_runs_its_locked_write_to_the_end() -> None:
    """The handler's deadline cancels the caller, not the read-check-write under the lock: the next request
    waits for that write, so it is judged against the state the write left."""

    async def run() -> None:
        lock = asyncio.Lock()
        writes: list[str] = []
        entered = asyncio.Event()

        async def locked(name: str) -> str:
            async with lock:
                entered.set()
                await asyncio.sleep(0.05)  # the etcd transaction
                writes.append(name)
                return name

        first = asyncio.ensure_future(run_to_the_end(locked("first")))
        await entered.wait()
        first.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await first
        assert lock.locked() and writes == []  # still writing, lock held
        assert await run_to_the_end(locked("second")) == "second"
        assert writes == ["first", "second"]

    asyncio.run(run())
