"""``eligible_brokers``: who may lead or join an ISR (KIP-841: not a broker in controlled shutdown, until it
restarts; not a broker whose port refuses connections)."""

from __future__ import annotations

from services.controller.partitions import alter_partition, eligible_brokers, preferred_elections
from shared.errors import AlterPartitionError, ErrorCode
from shared.metadata.types import PartitionState, TopicRecord
from shared.types import TopicPartition

REGS = [{"id": 1, "incarnation": "a1"}, {"id": 2, "incarnation": "b1"}, {"id": 3, "incarnation": "c1"}]


def test_a_broker_in_controlled_shutdown_is_not_eligible_until_it_restarts() -> None:
    assert eligible_brokers(REGS, {}, set()) == {1, 2, 3}
    assert eligible_brokers(REGS, {1: "a1"}, set()) == {2, 3}
    restarted = [{"id": 1, "incarnation": "a2"}, *REGS[1:]]
    assert eligible_brokers(restarted, {1: "a1"}, set()) == {1, 2, 3}  # a new incarnation is a new process
    assert eligible_brokers(REGS, {1: "a1"}, {3}) == {2}  # refused ports stay out too


def test_it_is_neither_added_to_an_isr_nor_elected_preferred_leader() -> None:
    live = eligible_brokers(REGS, {1: "a1"}, set())
    st = PartitionState(2, 5, [2, 3], 9)  # after broker 1's controlled shutdown moved the leadership to 2
    try:
        alter_partition(st, [1, 2, 3], 2, 5, 9, [2, 3, 1], live)
    except AlterPartitionError as exc:
        assert exc.code == ErrorCode.INELIGIBLE_REPLICA
    else:
        raise AssertionError("broker 1 was added back to the ISR")
    topics = {"t": TopicRecord("t", "id", {0: [1, 2, 3]})}
    in_isr = {TopicPartition("t", 0): PartitionState(2, 5, [2, 3, 1], 9)}  # added before its shutdown
    assert preferred_elections(topics, in_isr, live) == {}
    assert preferred_elections(topics, in_isr, {1, 2, 3})[TopicPartition("t", 0)].leader == 1  # once restarted
