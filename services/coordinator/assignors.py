"""Server-side partition assignors of KIP-848: ``uniform`` (sticky) and ``range``. Pure.

An assignor maps each member to the partitions it should own, given every
member's subscribed topics and the partition counts of those topics. ``uniform``
moves as few partitions as possible: it keeps each member's current target
partitions it is still subscribed to, gives unowned partitions to the least
loaded eligible member, then moves partitions one at a time from a member that
has at least two more than an eligible peer (so counts differ by at most one
among members with the same subscription). ``range`` is Kafka's classic range:
per topic, members sorted by instance id (else member id), consecutive ranges,
the first ``n % k`` members one partition more.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from shared.types import TopicPartition

Assignment = dict[str, set[TopicPartition]]


@dataclass(frozen=True)
class AssignmentMember:
    member_id: str
    subscribed: frozenset[str]  # topic names, regex already resolved
    sort_key: str = ""  # instance id if static, else member id (range order)


def _eligible(members: list[AssignmentMember], topics: Mapping[str, int]) -> dict[TopicPartition, list[str]]:
    out: dict[TopicPartition, list[str]] = {}
    for topic in sorted({t for m in members for t in m.subscribed if t in topics}):
        subs = sorted(m.member_id for m in members if topic in m.subscribed)
        for p in range(topics[topic]):
            out[TopicPartition(topic, p)] = subs
    return out


def uniform(members: list[AssignmentMember], topics: Mapping[str, int], current: Mapping[str, set[TopicPartition]]) -> Assignment:
    """Sticky, balanced assignment; ``current`` is the previous target assignment."""
    eligible = _eligible(members, topics)
    out: Assignment = {m.member_id: set() for m in members}
    owner: dict[TopicPartition, str] = {}
    for mid in sorted(out):
        for tp in sorted(current.get(mid, ())):
            if tp in eligible and mid in eligible[tp] and tp not in owner:
                owner[tp] = mid
                out[mid].add(tp)
    count = {mid: len(tps) for mid, tps in out.items()}

    def least(tp: TopicPartition) -> str:
        return min(eligible[tp], key=lambda m: (count[m], m))

    for tp in sorted(t for t in eligible if t not in owner):
        mid = least(tp)
        owner[tp] = mid
        out[mid].add(tp)
        count[mid] += 1
    _balance(out, count, least)
    return out


def _balance(out: Assignment, count: dict[str, int], least: Callable[[TopicPartition], str]) -> None:
    """Move partitions from overloaded members to eligible peers with at least two fewer, one at a
    time, most loaded member first. Each member's partitions are sorted once; a move costs one scan
    of the eligible members, so a thousand partitions rebalance in milliseconds."""
    held = {mid: sorted(tps) for mid, tps in out.items()}
    while True:
        floor = min(count.values(), default=0)
        moved = False
        for mid in sorted(out, key=lambda m: (-count[m], m)):
            if count[mid] <= floor + 1:
                break  # no one left who could give a partition away
            lst = held[mid]
            for i in range(len(lst) - 1, -1, -1):
                tp = lst[i]
                target = least(tp)
                if count[mid] > count[target] + 1:
                    lst.pop(i)
                    held[target].append(tp)
                    out[mid].discard(tp)
                    out[target].add(tp)
                    count[mid] -= 1
                    count[target] += 1
                    moved = True
                    break
            if moved:
                break
        if not moved:
            return


def range_assign(members: list[AssignmentMember], topics: Mapping[str, int],
                 current: Mapping[str, set[TopicPartition]]) -> Assignment:
    out: Assignment = {m.member_id: set() for m in members}
    for topic in sorted({t for m in members for t in m.subscribed if t in topics}):
        subs = sorted((m for m in members if topic in m.subscribed), key=lambda m: (m.sort_key or m.member_id, m.member_id))
        n, k = topics[topic], len(subs)
        per, extra = divmod(n, k)
        start = 0
        for i, m in enumerate(subs):
            size = per + (1 if i < extra else 0)
            out[m.member_id].update(TopicPartition(topic, p) for p in range(start, start + size))
            start += size
    return out


ASSIGNORS: dict[str, Callable[[list[AssignmentMember], Mapping[str, int], Mapping[str, set[TopicPartition]]], Assignment]] = {
    "uniform": uniform,
    "range": range_assign,
}
DEFAULT_ASSIGNOR = "uniform"  # the first of group.consumer.assignors, as in Kafka
