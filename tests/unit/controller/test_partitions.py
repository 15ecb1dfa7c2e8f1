"""The controller's partition decisions (services/controller/partitions.py), pure: leader election from
the ISR when brokers go, offline partitions and unclean election, controlled shutdown, preferred leaders,
and the validation of a leader's AlterPartition."""

from __future__ import annotations

import pytest

from services.controller.partitions import (
    AlterPartitionError,
    alter_partition,
    on_brokers_changed,
    on_controlled_shutdown,
    preferred_elections,
)
from shared.errors import ErrorCode
from shared.metadata.types import PartitionState as S
from shared.metadata.types import TopicRecord
from shared.types import TopicPartition

TP = TopicPartition("t", 0)
TOPICS = {"t": TopicRecord("t", "id", {0: [1, 2, 3]})}


def never(_topic: str) -> bool:
    return False


def always(_topic: str) -> bool:
    return True


def test_a_dead_leader_is_replaced_by_the_first_live_isr_member_in_replica_order() -> None:
    out = on_brokers_changed(TOPICS, {TP: S(1, 5, [3, 2, 1], 9)}, live={2, 3}, unclean=never)
    assert out == {TP: S(2, 6, [3, 2], 10)}  # replica order picks 2; epochs move on


def test_a_dead_follower_leaves_the_isr_without_a_new_leader_epoch() -> None:
    assert on_brokers_changed(TOPICS, {TP: S(1, 5, [1, 2, 3], 9)}, live={1, 2}, unclean=never) == \
        {TP: S(1, 5, [1, 2], 10)}
    assert on_brokers_changed(TOPICS, {TP: S(1, 5, [1, 2], 9)}, live={1, 2, 3}, unclean=never) == {}


def test_no_live_isr_member_takes_the_partition_offline_keeping_the_last_isr() -> None:
    out = on_brokers_changed(TOPICS, {TP: S(1, 5, [1], 9)}, live={2, 3}, unclean=never)
    assert out == {TP: S(-1, 6, [1], 10)}
    offline = out[TP]
    assert on_brokers_changed(TOPICS, {TP: offline}, live={2, 3}, unclean=never) == {}  # stays offline
    assert on_brokers_changed(TOPICS, {TP: offline}, live={1, 2}, unclean=never) == {TP: S(1, 7, [1], 11)}


def test_unclean_election_takes_any_live_replica_when_allowed() -> None:
    out = on_brokers_changed(TOPICS, {TP: S(-1, 6, [1], 10)}, live={3}, unclean=always)
    assert out == {TP: S(3, 7, [3], 11)}


def test_controlled_shutdown_moves_leadership_and_counts_what_cannot_move() -> None:
    tp1 = TopicPartition("t", 1)
    topics = {"t": TopicRecord("t", "id", {0: [1, 2, 3], 1: [1, 2, 3]})}
    out, stuck = on_controlled_shutdown(topics, {TP: S(1, 5, [1, 2, 3], 9), tp1: S(1, 2, [1], 4)}, 1, {1, 2, 3})
    assert out == {TP: S(2, 6, [2, 3], 10)} and stuck == 1
    out, stuck = on_controlled_shutdown(topics, {TP: S(2, 5, [1, 2, 3], 9)}, 1, {1, 2, 3})
    assert out == {TP: S(2, 5, [2, 3], 10)} and stuck == 0


def test_preferred_election_only_when_the_first_replica_is_live_and_in_sync() -> None:
    assert preferred_elections(TOPICS, {TP: S(2, 5, [1, 2], 9)}, {1, 2}) == {TP: S(1, 6, [1, 2], 10)}
    assert preferred_elections(TOPICS, {TP: S(2, 5, [2, 3], 9)}, {1, 2, 3}) == {}  # 1 is not in the ISR
    assert preferred_elections(TOPICS, {TP: S(2, 5, [1, 2], 9)}, {2}) == {}  # 1 is not alive
    assert preferred_elections(TOPICS, {TP: S(2, 5, [1, 2], 9)}, {1, 2}, only=[TopicPartition("t", 1)]) == {}


@pytest.mark.parametrize(("args", "code"), [
    ((2, 5, 9, [1, 2], {1, 2, 3}), ErrorCode.FENCED_LEADER_EPOCH),  # not the leader
    ((1, 4, 9, [1, 2], {1, 2, 3}), ErrorCode.FENCED_LEADER_EPOCH),  # an old leader epoch
    ((1, 5, 8, [1, 2], {1, 2, 3}), ErrorCode.INVALID_UPDATE_VERSION),  # a stale partition epoch
    ((1, 5, 9, [2, 3], {1, 2, 3}), ErrorCode.INVALID_REQUEST),  # drops the leader
    ((1, 5, 9, [1, 4], {1, 2, 3, 4}), ErrorCode.INVALID_REQUEST),  # not a replica
    ((1, 5, 9, [1, 3], {1, 2}), ErrorCode.INELIGIBLE_REPLICA),  # adds an offline broker
])
def test_alter_partition_refusals(args, code) -> None:
    broker, leader_epoch, partition_epoch, new_isr, live = args
    with pytest.raises(AlterPartitionError) as err:
        alter_partition(S(1, 5, [1, 2], 9), [1, 2, 3], broker, leader_epoch, partition_epoch, new_isr, live)
    assert err.value.code == code


def test_alter_partition_accepts_and_orders_the_isr_by_replicas() -> None:
    assert alter_partition(S(1, 5, [1], 9), [1, 2, 3], 1, 5, 9, [3, 1], {1, 2, 3}) == S(1, 5, [1, 3], 10)
    assert alter_partition(S(1, 5, [1, 3], 9), [1, 2, 3], 1, 5, 9, [1], {1}) == S(1, 5, [1], 10)  # shrink: no liveness needed
