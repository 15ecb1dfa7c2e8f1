"""Server-side assignors: uniform (balanced, sticky) and range."""

from __future__ import annotations

import pytest

from services.coordinator.assignors import AssignmentMember, range_assign, uniform
from shared.types import TopicPartition as TP


def members(*ids: str, topics: tuple[str, ...] = ("t",)) -> list[AssignmentMember]:
    return [AssignmentMember(m, frozenset(topics), m) for m in ids]


@pytest.mark.parametrize(("n_members", "n_parts"), [(1, 6), (3, 6), (4, 6), (10, 1000), (7, 3)])
def test_uniform_is_balanced_and_complete(n_members: int, n_parts: int) -> None:
    ms = members(*(f"m{i}" for i in range(n_members)))
    out = uniform(ms, {"t": n_parts}, {})
    sizes = sorted(len(v) for v in out.values())
    assert sizes[-1] - sizes[0] <= 1
    assert sorted(tp for v in out.values() for tp in v) == [TP("t", p) for p in range(n_parts)]


def test_uniform_moves_only_what_the_new_member_needs() -> None:
    before = uniform(members(*(f"m{i}" for i in range(10))), {"t": 1000}, {})
    after = uniform(members(*(f"m{i}" for i in range(11))), {"t": 1000}, before)
    moved = sum(len(before[m] - after[m]) for m in before)
    assert moved == len(after["m10"]) in (90, 91)
    assert all(after[m] <= before[m] for m in before)  # nobody gains, nobody swaps


def test_uniform_respects_subscriptions() -> None:
    ms = [AssignmentMember("a", frozenset({"x"})), AssignmentMember("b", frozenset({"x", "y"}))]
    out = uniform(ms, {"x": 2, "y": 4}, {})
    assert all(tp.topic == "x" for tp in out["a"])
    assert len(out["a"]) + len(out["b"]) == 6
    assert len(out["a"]) == 2  # a takes all of x it can while b holds y


def test_uniform_drops_partitions_of_unsubscribed_or_deleted_topics() -> None:
    prev = {"a": {TP("gone", 0), TP("t", 0)}}
    out = uniform(members("a"), {"t": 2}, prev)
    assert out == {"a": {TP("t", 0), TP("t", 1)}}


def test_range_is_kafkas_classic_range() -> None:
    out = range_assign(members("c", "a", "b"), {"t": 7}, {})
    assert out["a"] == {TP("t", p) for p in (0, 1, 2)}
    assert out["b"] == {TP("t", p) for p in (3, 4)}
    assert out["c"] == {TP("t", p) for p in (5, 6)}
