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

Racks (KIP-881): a member may name its rack (``rack_id``) and each partition has the racks of its
replicas (``partition_racks``, from the brokers' ``broker.rack``). Where both are known, both assignors
prefer giving a member partitions with a replica in its rack, so it can fetch in-rack (KIP-392), but
never at the cost of balance: ``uniform`` sends an unowned partition to an in-rack member only while
that member is below its fair share, and its balancing moves out-of-rack partitions first and to
in-rack members first; ``range`` fills each member's usual quota with in-rack partitions first, then
the rest in order. Without racks both give exactly the assignments described above.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from shared.types import TopicPartition

Assignment = dict[str, set[TopicPartition]]
#: partition -> the racks of its replicas (partitions without racks are absent)
PartitionRacks = Mapping[TopicPartition, frozenset[str]]


@dataclass(frozen=True)
class AssignmentMember:
    member_id: str
    subscribed: frozenset[str]  # topic names, regex already resolved
    sort_key: str = ""  # instance id if static, else member id (range order)
    rack: str | None = None  # the consumer's client.rack (rack_id in its heartbeat)


def partition_racks(assignment: Mapping[str, Mapping[int, list[int]]],
                    broker_racks: Mapping[int, str | None]) -> dict[TopicPartition, frozenset[str]]:
    """Each partition's replica racks, from topic assignments and the brokers' racks."""
    out: dict[TopicPartition, frozenset[str]] = {}
    for topic, parts in assignment.items():
        for p, replicas in parts.items():
            racks = frozenset(r for b in replicas if (r := broker_racks.get(b)))
            if racks:
                out[TopicPartition(topic, p)] = racks
    return out


def _in_rack(member_rack: str | None, tp: TopicPartition, racks: PartitionRacks) -> bool:
    return member_rack is not None and member_rack in racks.get(tp, frozenset())


def _eligible(members: list[AssignmentMember], topics: Mapping[str, int]) -> dict[TopicPartition, list[str]]:
    out: dict[TopicPartition, list[str]] = {}
    for topic in sorted({t for m in members for t in m.subscribed if t in topics}):
        subs = sorted(m.member_id for m in members if topic in m.subscribed)
        for p in range(topics[topic]):
            out[TopicPartition(topic, p)] = subs
    return out


def uniform(members: list[AssignmentMember], topics: Mapping[str, int], current: Mapping[str, set[TopicPartition]],
            racks: PartitionRacks | None = None) -> Assignment:
    """Sticky, balanced assignment; ``current`` is the previous target assignment; ``racks`` (optional)
    the partitions' replica racks, for members that name theirs."""
    eligible = _eligible(members, topics)
    racks = racks or {}
    rack_of = {m.member_id: m.rack for m in members}
    rack_aware = bool(racks) and any(m.rack for m in members)
    out: Assignment = {m.member_id: set() for m in members}
    owner: dict[TopicPartition, str] = {}
    for mid in sorted(out):
        for tp in sorted(current.get(mid, ())):
            if tp in eligible and mid in eligible[tp] and tp not in owner:
                owner[tp] = mid
                out[mid].add(tp)
    count = {mid: len(tps) for mid, tps in out.items()}

    def least(tp: TopicPartition) -> str:
        # Among the least loaded, an in-rack member first.
        return min(eligible[tp], key=lambda m: (count[m], not _in_rack(rack_of[m], tp, racks), m))

    def share(tp: TopicPartition) -> int:
        """A member's fair share among the members eligible for ``tp`` (same subscription: exact)."""
        subs = eligible[tp]
        return math.ceil(sum(1 for t, e in eligible.items() if e == subs) / len(subs))

    for tp in sorted(t for t in eligible if t not in owner):
        mid = least(tp)
        if rack_aware and not _in_rack(rack_of[mid], tp, racks):
            fair = share(tp)
            in_rack = [m for m in eligible[tp] if _in_rack(rack_of[m], tp, racks) and count[m] < fair]
            if in_rack:
                mid = min(in_rack, key=lambda m: (count[m], m))
        owner[tp] = mid
        out[mid].add(tp)
        count[mid] += 1
    _balance(out, count, least, (lambda m, tp: _in_rack(rack_of[m], tp, racks)) if rack_aware else None)
    return out


def _balance(out: Assignment, count: dict[str, int], least: Callable[[TopicPartition], str],
             in_rack: Callable[[str, TopicPartition], bool] | None = None) -> None:
    """Move partitions from overloaded members to eligible peers with at least two fewer, one at a
    time, most loaded member first. Each member's partitions are sorted once; a move costs one scan
    of the eligible members, so a thousand partitions rebalance in milliseconds. With racks, a
    member gives away its out-of-rack partitions first (they are tried from the end of its list)."""
    if in_rack is None:
        held = {mid: sorted(tps) for mid, tps in out.items()}
    else:
        held = {mid: sorted(tps, key=lambda tp, mid=mid: (not in_rack(mid, tp), tp)) for mid, tps in out.items()}
    def move_one(wanted: Callable[[str, TopicPartition], bool], most_loaded_only: bool) -> bool:
        floor = min(count.values(), default=0)
        top = max(count.values(), default=0)
        for mid in sorted(out, key=lambda m: (-count[m], m)):
            if count[mid] <= floor + 1 or (most_loaded_only and count[mid] < top):
                return False  # no one left who could give a partition away
            lst = held[mid]
            for i in range(len(lst) - 1, -1, -1):
                tp = lst[i]
                target = least(tp)
                if count[mid] > count[target] + 1 and wanted(target, tp):
                    lst.pop(i)
                    held[target].append(tp)
                    out[mid].discard(tp)
                    out[target].add(tp)
                    count[mid] -= 1
                    count[target] += 1
                    return True
        return False

    # With racks, a move from a most loaded member that lands in the new owner's rack is looked for first
    # (only from the most loaded: a lighter member giving would cost an extra move later).
    while (in_rack is not None and move_one(in_rack, True)) or move_one(lambda _m, _tp: True, False):
        pass


def range_assign(members: list[AssignmentMember], topics: Mapping[str, int],
                 current: Mapping[str, set[TopicPartition]], racks: PartitionRacks | None = None) -> Assignment:
    out: Assignment = {m.member_id: set() for m in members}
    racks = racks or {}
    for topic in sorted({t for m in members for t in m.subscribed if t in topics}):
        subs = sorted((m for m in members if topic in m.subscribed), key=lambda m: (m.sort_key or m.member_id, m.member_id))
        n, k = topics[topic], len(subs)
        per, extra = divmod(n, k)
        quota = [per + (1 if i < extra else 0) for i in range(k)]
        if not racks or not any(m.rack for m in subs):
            start = 0
            for m, size in zip(subs, quota):
                out[m.member_id].update(TopicPartition(topic, p) for p in range(start, start + size))
                start += size
            continue
        # KIP-881: each member's quota filled with in-rack partitions first (in partition order), then the rest.
        free = [TopicPartition(topic, p) for p in range(n)]
        taken: list[list[TopicPartition]] = [[] for _ in subs]
        for i, m in enumerate(subs):
            for tp in [tp for tp in free if _in_rack(m.rack, tp, racks)][:quota[i]]:
                taken[i].append(tp)
                free.remove(tp)
        for i in range(k):
            while len(taken[i]) < quota[i] and free:
                taken[i].append(free.pop(0))
        for m, tps in zip(subs, taken):
            out[m.member_id].update(tps)
    return out


ASSIGNORS: dict[str, Callable[[list[AssignmentMember], Mapping[str, int], Mapping[str, set[TopicPartition]],
                                PartitionRacks | None], Assignment]] = {
    "uniform": uniform,
    "range": range_assign,
}
DEFAULT_ASSIGNOR = "uniform"  # the first of group.consumer.assignors, as in Kafka
