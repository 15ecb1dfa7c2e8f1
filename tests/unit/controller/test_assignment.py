"""Replica assignment (pure): spread, rack awareness, validation."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from services.controller.assignment import (
    InvalidReplicationFactorError,
    assign_replicas,
    rack_alternating,
)
from shared.errors import InvalidTopicError
from shared.topic_names import find_collision, validate_topic_name


def test_round_robin_leaders_and_distinct_replicas() -> None:
    brokers = {i: None for i in range(1, 7)}
    a = assign_replicas(brokers, 12, 3, rng=random.Random(3))
    assert sorted(a) == list(range(12))
    for replicas in a.values():
        assert len(set(replicas)) == 3
    leaders = Counter(r[0] for r in a.values())
    assert set(leaders.values()) == {2}  # 12 partitions over 6 brokers: 2 leaderships each
    ids = sorted(brokers)
    first = ids.index(a[0][0])
    assert [a[p][0] for p in range(12)] == [ids[(first + p) % 6] for p in range(12)]  # leaders round-robin


def test_rack_alternating_order_from_the_definitive_guide() -> None:
    assert rack_alternating({0: "a", 1: "a", 2: "a", 3: "b", 4: "b", 5: "b"}) == [0, 3, 1, 4, 2, 5]


def test_rack_aware_puts_replicas_on_distinct_racks() -> None:
    brokers = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}
    for seed in range(20):
        a = assign_replicas(brokers, 10, 3, rng=random.Random(seed))
        for replicas in a.values():
            assert len({brokers[b] for b in replicas}) == 3
        a2 = assign_replicas(brokers, 10, 2, rng=random.Random(seed))
        for replicas in a2.values():
            assert len({brokers[b] for b in replicas}) == 2


def test_replication_factor_above_broker_count_is_refused() -> None:
    with pytest.raises(InvalidReplicationFactorError, match="larger than the 2 available brokers"):
        assign_replicas({1: None, 2: None}, 3, 3)


@pytest.mark.parametrize("name", ["", ".", "..", "a" * 250, "has space", "slash/es", "ümlaut"])
def test_illegal_topic_names(name: str) -> None:
    with pytest.raises(InvalidTopicError):
        validate_topic_name(name)


def test_legal_names_and_collisions() -> None:
    for name in ("a", "a.b_c-d", "A" * 249):
        validate_topic_name(name)
    assert find_collision("a.b", {"a_b", "x"}) == "a_b"
    assert find_collision("a.b", {"a.b"}) is None
