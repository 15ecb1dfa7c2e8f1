"""Rack-aware placement: replicas of new topics across racks (services/controller/assignment.py) and the
group assignors keeping members' fetches in their rack without unbalancing (KIP-881,
services/coordinator/assignors.py)."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from services.controller.assignment import assign_replicas
from services.coordinator.assignors import AssignmentMember, partition_racks, range_assign, uniform
from shared.types import TopicPartition

TP = TopicPartition
BROKER_RACKS = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}


@pytest.mark.parametrize("seed", range(20))
def test_new_topic_replicas_span_three_racks(seed: int) -> None:
    got = assign_replicas(BROKER_RACKS, 24, 3, rng=random.Random(seed))
    for p, replicas in got.items():
        assert len(set(replicas)) == 3
        assert {BROKER_RACKS[b] for b in replicas} == {"a", "b", "c"}, (p, replicas)
    leaders = Counter(r[0] for r in got.values())
    assert max(leaders.values()) - min(leaders.values()) <= 1  # leaders spread over the brokers
    replicas = Counter(b for r in got.values() for b in r)
    assert max(replicas.values()) - min(replicas.values()) <= 1


def test_rf2_on_three_racks_never_doubles_a_rack() -> None:
    got = assign_replicas(BROKER_RACKS, 30, 2, rng=random.Random(7))
    assert all(BROKER_RACKS[r[0]] != BROKER_RACKS[r[1]] for r in got.values())


def test_partition_racks_from_assignment() -> None:
    racks = partition_racks({"t": {0: [1, 3], 1: [5]}, "u": {0: [9]}}, BROKER_RACKS)
    assert racks == {TP("t", 0): frozenset({"a", "b"}), TP("t", 1): frozenset({"c"})}


def members(*spec: tuple[str, str | None], topics: frozenset[str] = frozenset({"t"})) -> list[AssignmentMember]:
    return [AssignmentMember(mid, topics, mid, rack) for mid, rack in spec]


# Single-replica partitions on racks a, b, c in turn: partition p lives on rack "abc"[p % 3].
def single_replica_racks(n: int, topic: str = "t") -> dict[TopicPartition, frozenset[str]]:
    return {TP(topic, p): frozenset({"abc"[p % 3]}) for p in range(n)}


def in_rack_share(assignment: dict[str, set[TopicPartition]], ms: list[AssignmentMember],
                  racks: dict[TopicPartition, frozenset[str]]) -> float:
    rack = {m.member_id: m.rack for m in ms}
    total = sum(len(v) for v in assignment.values())
    return sum(1 for mid, tps in assignment.items() for tp in tps if rack[mid] in racks[tp]) / total


@pytest.mark.parametrize("assignor", [uniform, range_assign])
def test_every_fetch_in_rack_when_balance_allows(assignor) -> None:  # type: ignore[no-untyped-def]
    ms = members(("m1", "a"), ("m2", "b"), ("m3", "c"))
    racks = single_replica_racks(9)
    got = assignor(ms, {"t": 9}, {}, racks)
    assert sorted(len(v) for v in got.values()) == [3, 3, 3]
    assert in_rack_share(got, ms, racks) == 1.0
    assert got["m1"] == {TP("t", 0), TP("t", 3), TP("t", 6)}


@pytest.mark.parametrize("assignor", [uniform, range_assign])
def test_balance_wins_over_racks(assignor) -> None:  # type: ignore[no-untyped-def]
    # Every partition lives on rack a; only m1 is there. It still gets only its share.
    ms = members(("m1", "a"), ("m2", "b"), ("m3", "c"))
    racks = {TP("t", p): frozenset({"a"}) for p in range(9)}
    got = assignor(ms, {"t": 9}, {}, racks)
    assert sorted(len(v) for v in got.values()) == [3, 3, 3]


@pytest.mark.parametrize("assignor", [uniform, range_assign])
def test_without_racks_the_assignment_is_unchanged(assignor) -> None:  # type: ignore[no-untyped-def]
    plain = [AssignmentMember(m, frozenset({"t", "u"}), m) for m in ("m1", "m2", "m3")]
    racked_members = [AssignmentMember(m, frozenset({"t", "u"}), m, "a") for m in ("m1", "m2", "m3")]
    topics = {"t": 10, "u": 4}
    base = assignor(plain, topics, {})
    assert assignor(plain, topics, {}, single_replica_racks(10)) == base  # members name no rack
    assert assignor(racked_members, topics, {}, {}) == base  # partitions have no racks
    assert assignor(plain, topics, {}, None) == base


def test_uniform_stays_sticky_and_in_rack_when_a_member_joins() -> None:
    racks = {TP("t", p): frozenset({"ab"[p % 2]}) for p in range(12)}
    two = members(("m1", "a"), ("m2", "b"))
    before = uniform(two, {"t": 12}, {}, racks)
    assert in_rack_share(before, two, racks) == 1.0
    three = members(("m1", "a"), ("m2", "b"), ("m3", "a"))
    after = uniform(three, {"t": 12}, before, racks)
    assert sorted(len(v) for v in after.values()) == [4, 4, 4]
    moved = sum(len(before[m] - after[m]) for m in before)
    assert moved == 4  # only what m3 takes
    # m1 (rack a) can give m3 (rack a) only two without falling below its share: those are in-rack;
    # the two from m2 (rack b) cannot be, and no extra move is made to chase racks.
    assert sum(racks[tp] == {"a"} for tp in after["m3"]) == 2
    assert in_rack_share(after, three, racks) == 10 / 12


def test_uniform_rack_aware_random_cases_stay_balanced() -> None:
    rng = random.Random(881)
    for _ in range(50):
        n_members, n_parts = rng.randint(1, 6), rng.randint(0, 40)
        ms = members(*((f"m{i}", rng.choice(["a", "b", "c", None])) for i in range(n_members)))
        racks = {TP("t", p): frozenset(rng.sample(["a", "b", "c"], rng.randint(1, 2))) for p in range(n_parts)}
        got = uniform(ms, {"t": n_parts}, {}, racks)
        sizes = [len(v) for v in got.values()]
        assert max(sizes) - min(sizes) <= 1
        assert sorted(tp for v in got.values() for tp in v) == [TP("t", p) for p in range(n_parts)]
        r = range_assign(ms, {"t": n_parts}, {}, racks)
        assert sorted(len(v) for v in r.values()) == sorted(sizes)
        assert sorted(tp for v in r.values() for tp in v) == [TP("t", p) for p in range(n_parts)]


@pytest.mark.parametrize("existing,count,rack,expected", [
    (["r1"], 2, "r2", ["r2", "r2"]),  # --rack wins
    (["a", "a", "b"], 3, None, ["b", "a", "b"]),  # least-used racks in turn: racks stay even
    ([None, None], 1, None, [None]),  # a cluster without racks gets none
    (["a", None], 1, None, [None]),  # partly racked: no guess
])
def test_racks_of_added_brokers(existing: list[str | None], count: int, rack: str | None,
                                expected: list[str | None]) -> None:
    from shared.cli.brokers_cmds import next_racks

    assert next_racks(existing, count, rack) == expected
