"""The reassignment state rules (KIP-455) and plans: pure, table-driven."""

from __future__ import annotations

import random

import pytest

from services.controller.reassignment import (
    ReassignmentError,
    Step,
    advance,
    advance_all,
    alter_reassignments,
    cancel,
    describe,
    start,
)
from services.controller.reassignment_plans import (
    decommission_plan,
    generate_plan,
    plan_json,
    replication_factor_plan,
)
from shared.errors import ErrorCode, InvalidReplicationFactorError, TidelogError, UnknownTopicOrPartitionError
from shared.metadata.types import PartitionState, ReassignmentRecord, TopicRecord
from shared.types import TopicPartition

TP = TopicPartition("t", 0)
LIVE = {1, 2, 3, 4, 5}


def st(leader: int, isr: list[int], leader_epoch: int = 3, partition_epoch: int = 7) -> PartitionState:
    return PartitionState(leader, leader_epoch, isr, partition_epoch)


# (name, replicas, state, target, expected replicas, expected record (target, adding, removing) or None,
#  expected leader, leader epoch, ISR)
START_CASES = [
    ("move one replica", [1, 2], st(1, [1, 2]), [1, 3], [1, 2, 3], ([1, 3], [3], [2]), 1, 3, [1, 2]),
    ("move both", [1, 2], st(1, [1, 2]), [3, 4], [1, 2, 3, 4], ([3, 4], [3, 4], [1, 2]), 1, 3, [1, 2]),
    ("grow", [1, 2], st(1, [1, 2]), [1, 2, 3], [1, 2, 3], ([1, 2, 3], [3], []), 1, 3, [1, 2]),
    # Only removing, target in the ISR: completes at once; the leader stays (it is kept).
    ("shrink", [1, 2, 3], st(1, [1, 2, 3]), [1, 2], [1, 2], None, 1, 3, [1, 2]),
    # Only removing, the leader removed: the first target replica in the ISR leads, epoch bumped.
    ("shrink off the leader", [1, 2, 3], st(1, [1, 2, 3]), [3, 2], [3, 2], None, 3, 4, [3, 2]),
    # Same set, new order: done at once (the preferred leader changes, the leader does not).
    ("reorder", [1, 2, 3], st(1, [1, 2, 3]), [2, 1, 3], [2, 1, 3], None, 1, 3, [2, 1, 3]),
    # Shrink with a target replica out of the ISR: waits.
    ("shrink, target lagging", [1, 2, 3], st(1, [1, 3]), [1, 2], [1, 2, 3], ([1, 2], [], [3]), 1, 3, [1, 3]),
]


@pytest.mark.parametrize(("name", "replicas", "state", "target", "want_replicas", "want_record", "leader",
                          "leader_epoch", "isr"), START_CASES, ids=[c[0] for c in START_CASES])
def test_start(name, replicas, state, target, want_replicas, want_record, leader, leader_epoch, isr) -> None:
    step = start(TP, replicas, state, None, target, LIVE, LIVE)
    assert step is not None
    assert step.replicas == want_replicas
    assert (step.reassignment and (step.reassignment.target, step.reassignment.adding,
                                   step.reassignment.removing)) == (want_record and tuple(want_record))
    assert (step.state.leader, step.state.leader_epoch, step.state.isr) == (leader, leader_epoch, isr)
    assert step.state.partition_epoch >= state.partition_epoch + (step.replicas != replicas)


def test_no_op_when_target_is_the_replica_set() -> None:
    assert start(TP, [1, 2], st(1, [1, 2]), None, [1, 2], LIVE, LIVE) is None


@pytest.mark.parametrize(("target", "code"), [
    ([], ErrorCode.INVALID_REPLICA_ASSIGNMENT),
    ([1, 1], ErrorCode.INVALID_REPLICA_ASSIGNMENT),
    ([1, 9], ErrorCode.INVALID_REPLICA_ASSIGNMENT),
])
def test_invalid_targets(target: list[int], code: ErrorCode) -> None:
    with pytest.raises(ReassignmentError) as err:
        start(TP, [1, 2], st(1, [1, 2]), None, target, LIVE, LIVE)
    assert err.value.code == code
    assert err.value.code.value == 39


def test_catch_up_then_complete_moving_the_leader() -> None:
    step = start(TP, [1, 2], st(1, [1, 2]), None, [3, 4], LIVE, LIVE)
    assert step is not None and step.reassignment is not None
    r = step.reassignment
    # New replicas catch up one by one: nothing happens until both are in the ISR.
    assert advance(step.replicas, st(1, [1, 2, 3], partition_epoch=9), r, LIVE) is None
    done = advance(step.replicas, st(1, [1, 2, 3, 4], partition_epoch=10), r, LIVE)
    assert done == Step([3, 4], PartitionState(3, 4, [3, 4], 11), None)


def test_complete_keeps_a_leader_that_stays() -> None:
    r = ReassignmentRecord([1, 3], [3], [2])
    done = advance([1, 2, 3], st(1, [1, 2, 3]), r, LIVE)
    assert done == Step([1, 3], PartitionState(1, 3, [1, 3], 8), None)


def test_complete_waits_for_a_live_leader_candidate() -> None:
    r = ReassignmentRecord([3], [3], [1])
    assert advance([1, 3], st(1, [1, 3]), r, {1}) is None
    assert advance([1, 3], st(-1, [1, 3]), r, LIVE) is None  # offline: the broker rules elect first


def test_cancel_returns_to_the_original_replicas() -> None:
    r = ReassignmentRecord([3, 4], [3, 4], [1, 2])
    got = cancel(TP, [1, 2, 3, 4], st(1, [1, 2, 3]), r, LIVE)
    assert got == Step([1, 2], PartitionState(1, 3, [1, 2], 8), None)


def test_cancel_moves_leadership_back_from_an_adding_replica() -> None:
    r = ReassignmentRecord([3], [3], [1, 2])
    got = cancel(TP, [1, 2, 3], st(3, [2, 3]), r, LIVE)
    assert got == Step([1, 2], PartitionState(2, 4, [2], 8), None)


def test_cancel_without_a_reassignment_is_refused() -> None:
    with pytest.raises(ReassignmentError) as err:
        cancel(TP, [1, 2], st(1, [1, 2]), None, LIVE)
    assert err.value.code == ErrorCode.NO_REASSIGNMENT_IN_PROGRESS and err.value.code.value == 85


def test_cancel_refused_when_only_adding_replicas_are_in_sync() -> None:
    r = ReassignmentRecord([3], [3], [1])
    with pytest.raises(ReassignmentError):
        cancel(TP, [1, 3], st(3, [3]), r, LIVE)


def test_replacing_a_reassignment_keeps_the_original_replicas() -> None:
    first = start(TP, [1, 2], st(1, [1, 2]), None, [1, 3], LIVE, LIVE)
    assert first is not None and first.reassignment is not None
    second = start(TP, first.replicas, first.state, first.reassignment, [1, 4], LIVE, LIVE)
    assert second is not None and second.reassignment is not None
    assert second.replicas == [1, 2, 3, 4]
    assert second.reassignment == ReassignmentRecord([1, 4], [3, 4], [2, 3])
    back = cancel(TP, second.replicas, second.state, second.reassignment, LIVE)
    assert back.replicas == [1, 2]


def test_resubmitting_the_same_target_is_a_no_op() -> None:
    first = start(TP, [1, 2], st(1, [1, 2]), None, [1, 3], LIVE, LIVE)
    assert first is not None
    assert start(TP, first.replicas, first.state, first.reassignment, [1, 3], LIVE, LIVE) is None


def topics() -> dict[str, TopicRecord]:
    return {"t": TopicRecord("t", "id", {0: [1, 2], 1: [2, 3]})}


def states() -> dict[TopicPartition, PartitionState]:
    return {TopicPartition("t", 0): st(1, [1, 2]), TopicPartition("t", 1): st(2, [2, 3])}


def test_batch_mixed_start_cancel_and_no_op() -> None:
    ongoing = {TopicPartition("t", 1): ReassignmentRecord([4], [4], [2, 3])}
    tps = topics()
    tps["t"].assignment[1] = [2, 3, 4]
    steps = alter_reassignments(tps, states(), ongoing, [(TopicPartition("t", 0), [1, 2]),
                                                          (TopicPartition("t", 1), None)], LIVE, LIVE)
    assert list(steps) == [TopicPartition("t", 1)]
    assert steps[TopicPartition("t", 1)].replicas == [2, 3]


@pytest.mark.parametrize(("requests", "code"), [
    ([(TopicPartition("nope", 0), [1])], ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    ([(TopicPartition("t", 5), [1])], ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    ([(TopicPartition("t", 0), None)], ErrorCode.NO_REASSIGNMENT_IN_PROGRESS),
    ([(TopicPartition("t", 0), [1, 3]), (TopicPartition("t", 0), [1, 4])], ErrorCode.INVALID_REQUEST),
    ([(TopicPartition("t", 0), [1, 3]), (TopicPartition("t", 1), [7])], ErrorCode.INVALID_REPLICA_ASSIGNMENT),
])
def test_batch_refused_whole(requests, code) -> None:
    with pytest.raises(TidelogError) as err:
        alter_reassignments(topics(), states(), {}, requests, LIVE, LIVE)
    assert err.value.code == code


def test_advance_all_and_describe() -> None:
    tps = topics()
    tps["t"].assignment[0] = [1, 2, 3]
    ongoing = {TopicPartition("t", 0): ReassignmentRecord([1, 3], [3], [2]),
               TopicPartition("gone", 0): ReassignmentRecord([1], [], [2])}
    assert describe(tps, ongoing) == [{"topic": "t", "partition": 0, "replicas": [1, 2, 3], "adding_replicas": [3],
                                       "removing_replicas": [2], "target_replicas": [1, 3]}]
    assert advance_all(tps, states(), ongoing, LIVE) == {}
    s = states()
    s[TopicPartition("t", 0)] = st(2, [1, 2, 3])
    steps = advance_all(tps, s, ongoing, LIVE)
    assert steps[TopicPartition("t", 0)] == Step([1, 3], PartitionState(1, 4, [1, 3], 8), None)


# -- plans -----------------------------------------------------------------------------------------------

def current() -> dict[TopicPartition, list[int]]:
    return {TopicPartition("a", p): r for p, r in enumerate([[1, 2], [2, 3], [3, 1]])} | {
        TopicPartition("b", 0): [1, 2, 3]}


def test_generate_plan_spreads_over_the_broker_list() -> None:
    racks = {b: None for b in (1, 2, 3, 4)}
    cur, proposed = generate_plan(current(), ["a"], [2, 3, 4], racks, rng=random.Random(1))
    assert cur == {tp: r for tp, r in current().items() if tp.topic == "a"}
    assert set(proposed) == set(cur)
    assert all(len(r) == 2 and set(r) <= {2, 3, 4} and len(set(r)) == 2 for r in proposed.values())
    leaders = [r[0] for r in proposed.values()]
    assert len(set(leaders)) == 3  # Kafka's round robin


def test_generate_plan_is_rack_aware() -> None:
    racks = {1: "x", 2: "x", 3: "y", 4: "y"}
    _, proposed = generate_plan(current(), ["a", "b"], [1, 2, 3, 4], racks, rng=random.Random(2))
    for tp, r in proposed.items():
        if len(r) == 2:
            assert {racks[b] for b in r} == {"x", "y"}, (tp, r)


@pytest.mark.parametrize(("topics_", "brokers", "exc"), [
    (["zzz"], [1, 2], UnknownTopicOrPartitionError),
    (["b"], [1, 2], InvalidReplicationFactorError),
    (["a"], [1, 1], TidelogError),
    (["a"], [1, 9], TidelogError),
    ([], [1, 2], TidelogError),
])
def test_generate_plan_errors(topics_, brokers, exc) -> None:
    with pytest.raises(exc):
        generate_plan(current(), topics_, brokers, {1: None, 2: None, 3: None}, rng=random.Random(0))


def test_plan_json_is_kafkas_format() -> None:
    assert plan_json({TopicPartition("a", 1): [2, 3]}) == {
        "version": 1, "partitions": [{"topic": "a", "partition": 1, "replicas": [2, 3], "log_dirs": ["any", "any"]}]}


def test_decommission_moves_every_replica_to_the_least_loaded() -> None:
    racks = {2: None, 3: None, 4: None}
    plan = decommission_plan(current(), 1, racks)
    assert set(plan) == {TopicPartition("a", 0), TopicPartition("a", 2), TopicPartition("b", 0)}
    assert all(1 not in r for r in plan.values())
    assert plan[TopicPartition("a", 0)] == [4, 2]  # in the broker's place; 4 holds nothing yet
    assert all(4 in r for r in plan.values())  # the empty broker takes them (load stays lowest)


def test_decommission_prefers_another_rack() -> None:
    cur = {TopicPartition("a", 0): [1, 2]}
    racks = {2: "x", 3: "x", 4: "y"}
    assert decommission_plan(cur, 1, racks) == {TopicPartition("a", 0): [4, 2]}


def test_decommission_with_too_few_brokers() -> None:
    with pytest.raises(InvalidReplicationFactorError):
        decommission_plan(current(), 1, {2: None, 3: None})


def test_replication_factor_up_and_down() -> None:
    racks = {b: None for b in (1, 2, 3, 4)}
    up = replication_factor_plan(current(), "a", 3, racks)
    assert all(len(r) == 3 and r[:2] == current()[tp] for tp, r in up.items())
    assert sorted(r[2] for r in up.values()).count(4) >= 2  # 4 is the least loaded
    down = replication_factor_plan(current(), "b", 1, racks)
    assert down == {TopicPartition("b", 0): [1]}
    keep_leader = replication_factor_plan(current(), "b", 2, racks, {TopicPartition("b", 0): 3})
    assert keep_leader == {TopicPartition("b", 0): [1, 3]}
    assert replication_factor_plan(current(), "b", 3, racks) == {}
    with pytest.raises(InvalidReplicationFactorError):
        replication_factor_plan(current(), "a", 5, racks)
    with pytest.raises(UnknownTopicOrPartitionError):
        replication_factor_plan(current(), "zzz", 2, racks)
