"""Kafka's leader-imbalance rule (services/controller/leader_balance.py): table-driven, fake clock."""

from __future__ import annotations

import asyncio

import pytest

from services.controller.leader_balance import LeaderBalancer, leader_imbalance, rebalance_candidates
from shared.metadata.types import PartitionState, TopicRecord
from shared.types import TopicPartition

TP = TopicPartition


def topics(assignment: dict[int, list[int]]) -> dict[str, TopicRecord]:
    return {"t": TopicRecord("t", "id", assignment)}


def states(leaders: dict[int, int], isr: dict[int, list[int]] | None = None,
           assignment: dict[int, list[int]] | None = None) -> dict[TopicPartition, PartitionState]:
    out = {}
    for p, leader in leaders.items():
        members = (isr or {}).get(p) or (assignment or {}).get(p) or [1, 2, 3]
        out[TP("t", p)] = PartitionState(leader, 1, members, 1)
    return out


# 10 partitions: broker 1 prefers 0-4, broker 2 prefers 5-9.
TEN = {p: ([1, 2, 3] if p < 5 else [2, 3, 1]) for p in range(10)}


@pytest.mark.parametrize("leaders,live,pct,expected", [
    # balanced: nothing to do
    ({p: TEN[p][0] for p in range(10)}, {1, 2, 3}, 10, []),
    # broker 1 lost 1 of 5 (20 % > 10 %): give it back
    ({**{p: TEN[p][0] for p in range(10)}, 0: 2}, {1, 2, 3}, 10, [0]),
    # 20 % is not above 20 %: Kafka's check is strictly greater
    ({**{p: TEN[p][0] for p in range(10)}, 0: 2}, {1, 2, 3}, 20, []),
    # broker 1 lost everything, but it is down: nothing
    ({p: (2 if p < 5 else 2) for p in range(10)}, {2, 3}, 10, []),
    # broker 1 lost everything and is back: all five return; broker 2 untouched
    ({p: (3 if p < 5 else 2) for p in range(10)}, {1, 2, 3}, 10, [0, 1, 2, 3, 4]),
    # percentage 0: any single displaced leader counts
    ({**{p: TEN[p][0] for p in range(10)}, 7: 3}, {1, 2, 3}, 0, [7]),
    # offline partition (leader -1) whose preferred is alive and in ISR counts too
    ({**{p: TEN[p][0] for p in range(10)}, 6: -1, 8: 3}, {1, 2, 3}, 10, [6, 8]),
])
def test_rebalance_candidates(leaders: dict[int, int], live: set[int], pct: float, expected: list[int]) -> None:
    got = rebalance_candidates(topics(TEN), states(leaders, assignment=TEN), live, pct)
    assert got == [TP("t", p) for p in expected]


def test_preferred_not_in_isr_is_left_alone() -> None:
    leaders = {p: (3 if p < 5 else 2) for p in range(10)}
    isr = {p: ([2, 3] if p < 3 else [1, 2, 3]) for p in range(10)}  # broker 1 still catching up on 0-2
    got = rebalance_candidates(topics(TEN), states(leaders, isr, TEN), {1, 2, 3}, 10)
    assert got == [TP("t", 3), TP("t", 4)]


def test_imbalance_ratio_and_skip() -> None:
    leaders = {p: (3 if p < 2 else TEN[p][0]) for p in range(10)}
    imb = leader_imbalance(topics(TEN), states(leaders, assignment=TEN))
    assert (imb[1].preferred, imb[1].not_leading, imb[1].ratio) == (5, 2, 0.4)
    assert imb[2].ratio == 0.0
    # partitions being reassigned are left out of both the ratio and the elections
    assert leader_imbalance(topics(TEN), states(leaders, assignment=TEN), skip=[TP("t", 0)])[1].not_leading == 1
    assert rebalance_candidates(topics(TEN), states(leaders, assignment=TEN), {1, 2, 3}, 10,
                                skip=[TP("t", 0)]) == [TP("t", 1)]


def test_partition_of_unknown_topic_is_ignored() -> None:
    st = {TP("gone", 0): PartitionState(2, 1, [1, 2], 1)}
    assert leader_imbalance({}, st) == {}
    assert rebalance_candidates({}, st, {1, 2}, 0) == []


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FakePartitions:
    def __init__(self, leaders: dict[int, int]) -> None:
        self.st = states(leaders, assignment=TEN)
        self.elections: list[list[TopicPartition]] = []

    async def load(self):  # type: ignore[no-untyped-def]
        return topics(TEN), {tp: (s, 7) for tp, s in self.st.items()}, {1, 2, 3}

    async def elect_preferred(self, only):  # type: ignore[no-untyped-def]
        only = list(only)
        self.elections.append(only)
        for tp in only:
            s = self.st[tp]
            self.st[tp] = PartitionState(TEN[tp.partition][0], s.leader_epoch + 1, s.isr, s.partition_epoch + 1)
        return {tp: self.st[tp] for tp in only}


def test_balancer_runs_on_interval_with_injected_clock() -> None:
    clock = FakeClock()
    parts = FakePartitions({p: (3 if p < 5 else 2) for p in range(10)})
    bal = LeaderBalancer(parts, lambda: True, percentage=10, interval_s=300, clock=clock)
    assert not bal.due()
    clock.now += 299
    assert not bal.due()
    clock.now += 1
    assert bal.due()
    elected = asyncio.run(bal.check())
    assert elected == [TP("t", p) for p in range(5)]
    assert not bal.due()  # the interval starts again
    clock.now += 300
    assert asyncio.run(bal.check()) == []  # balanced now: no election
    assert parts.elections == [[TP("t", p) for p in range(5)]]


def test_partitions_being_reassigned_are_left_alone() -> None:
    parts = FakePartitions({p: (3 if p < 5 else 2) for p in range(10)})

    bal = LeaderBalancer(parts, lambda: True, percentage=10, interval_s=1, clock=FakeClock(),
                         reassigning=lambda: {TP("t", 0), TP("t", 1)})
    assert asyncio.run(bal.check()) == [TP("t", p) for p in range(2, 5)]


def test_disabled_balancer_is_never_due() -> None:
    clock = FakeClock()
    bal = LeaderBalancer(FakePartitions({}), lambda: True, enabled=False, interval_s=1, clock=clock)
    clock.now += 10
    assert not bal.due()
