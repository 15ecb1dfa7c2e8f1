"""The read planner: ranges cover every offset once and reach ``minPartitions``."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pipelines.tidelog_source.offsets import Range, plan_ranges
from shared.client import TopicPartition


def _plan(sizes: list[int], min_partitions: int | None, first: int = 0) -> list[Range]:
    start = {TopicPartition("t", p): first for p in range(len(sizes))}
    end = {TopicPartition("t", p): first + n for p, n in enumerate(sizes)}
    return plan_ranges(start, end, min_partitions)


def test_three_equal_ranges_split_into_seven() -> None:
    # Rounding each share gives 2+2+2 = 6; the planner must give the 7 asked for.
    plan = _plan([1000, 1000, 1000], 7)
    assert len(plan) == 7
    assert sorted((r.partition, r.start, r.end) for r in plan)[:3] == [(0, 0, 333), (0, 333, 666), (0, 666, 1000)]


def test_no_split_without_min_partitions_or_when_already_enough() -> None:
    assert [(r.start, r.end) for r in _plan([5, 0, 7], None)] == [(0, 5), (0, 7)]
    assert len(_plan([5, 7, 9], 2)) == 3


def test_fewer_records_than_min_partitions_gives_one_range_per_record() -> None:
    assert [(r.partition, r.start, r.end) for r in _plan([2, 1], 10, first=4)] == [(0, 4, 5), (0, 5, 6), (1, 4, 5)]


@given(st.lists(st.integers(0, 5000), min_size=1, max_size=12), st.integers(1, 64), st.integers(0, 10**6))
def test_plan_covers_every_offset_once_and_reaches_the_minimum(sizes: list[int], min_partitions: int,
                                                               first: int) -> None:
    plan = _plan(sizes, min_partitions, first)
    total = sum(sizes)
    assert len(plan) >= min(min_partitions, total)
    for p, n in enumerate(sizes):
        mine = sorted((r.start, r.end) for r in plan if r.partition == p)
        assert all(a < b for a, b in mine)  # no empty range
        covered = [o for a, b in mine for o in range(a, b)]
        assert covered == list(range(first, first + n))
        if mine:  # pieces of one partition differ by at most one record
            lengths = [b - a for a, b in mine]
            assert max(lengths) - min(lengths) <= 1
