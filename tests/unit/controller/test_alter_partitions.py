"""A batch of ISR proposals (services/controller/partitions.py ``alter_partitions``), pure: each item is
judged exactly as a single-partition AlterPartition, in order; unknown and repeated partitions are refused."""

from __future__ import annotations

from services.controller.partitions import alter_partition, alter_partitions
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
