"""Reassignment plans: what replicas should move where. Pure functions, randomness injected.

``generate_plan`` is ``kafka-reassign-partitions.sh --generate``: the named topics' partitions are
assigned afresh over the given brokers with Kafka's (rack-aware) assignment, keeping each topic's
partition count and replication factor. ``decommission_plan`` moves every replica off one broker,
``replication_factor_plan`` grows or shrinks a topic's replica lists; both place new replicas on the
least-loaded brokers, on racks the partition does not use yet when there is one.

Plans are ``{TopicPartition: [replicas]}``; ``plan_json`` writes Kafka's reassignment JSON.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence

from services.controller.assignment import assign_replicas
from shared.errors import ErrorCode, InvalidReplicationFactorError, TidelogError, UnknownTopicOrPartitionError
from shared.types import TopicPartition

Assignment = Mapping[TopicPartition, Sequence[int]]
Plan = dict[TopicPartition, list[int]]
Racks = Mapping[int, str | None]  # broker -> rack


def plan_json(plan: Mapping[TopicPartition, Sequence[int]]) -> dict[str, object]:
    """Kafka's reassignment file: ``{"version":1,"partitions":[{topic, partition, replicas, log_dirs}]}``."""
    return {"version": 1, "partitions": [
        {"topic": tp.topic, "partition": tp.partition, "replicas": list(r), "log_dirs": ["any"] * len(r)}
        for tp, r in sorted(plan.items())]}


def generate_plan(current: Assignment, topics: Iterable[str], broker_list: Sequence[int], racks: Racks,
                  rng: random.Random | None = None) -> tuple[Plan, Plan]:
    """(current, proposed) assignment of ``topics``' partitions over ``broker_list`` (Kafka's --generate)."""
    topics = list(dict.fromkeys(topics))
    if not topics:
        raise TidelogError("name at least one topic to move", code=ErrorCode.INVALID_REQUEST)
    if not broker_list:
        raise TidelogError("the broker list is empty", code=ErrorCode.INVALID_REQUEST)
    if len(set(broker_list)) != len(broker_list):
        raise TidelogError(f"the broker list {list(broker_list)} names a broker twice", code=ErrorCode.INVALID_REQUEST)
    if unknown := sorted(b for b in broker_list if b not in racks):
        raise TidelogError(f"brokers {unknown} are not registered", code=ErrorCode.BROKER_NOT_AVAILABLE)
    rng = rng or random.Random()
    chosen = {b: racks[b] for b in broker_list}
    cur: Plan = {}
    proposed: Plan = {}
    for topic in topics:
        parts = {tp.partition: list(r) for tp, r in current.items() if tp.topic == topic}
        if not parts:
            raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
        rf = len(parts[min(parts)])
        assigned = assign_replicas(chosen, len(parts), rf, rng=rng)  # INVALID_REPLICATION_FACTOR if too few
        for p, replicas in parts.items():
            cur[TopicPartition(topic, p)] = replicas
            proposed[TopicPartition(topic, p)] = assigned[p]
    return cur, proposed


def replica_counts(current: Assignment, brokers: Iterable[int]) -> dict[int, int]:
    counts = dict.fromkeys(brokers, 0)
    for replicas in current.values():
        for b in replicas:
            if b in counts:
                counts[b] += 1
    return counts


def _pick(candidates: Iterable[int], keep: Sequence[int], racks: Racks, load: dict[int, int]) -> int | None:
    """The least-loaded candidate, preferring racks none of ``keep`` is on (then the lowest id)."""
    used = {racks.get(b) for b in keep if racks.get(b)}
    ranked = sorted((bool(racks.get(c)) and racks.get(c) in used, load.get(c, 0), c) for c in candidates if c not in keep)
    return ranked[0][2] if ranked else None


def decommission_plan(current: Assignment, broker: int, racks: Racks) -> Plan:
    """Move every replica off ``broker``: each takes its place in the replica list on the least-loaded
    other broker (``racks`` lists the brokers that may take replicas) the partition does not use yet,
    preferring a rack the partition is not on. Partitions without the broker are left out."""
    others = sorted(b for b in racks if b != broker)
    load = replica_counts(current, others)
    plan: Plan = {}
    for tp, replicas in sorted(current.items()):
        if broker not in replicas:
            continue
        keep = [b for b in replicas if b != broker]
        dest = _pick(others, keep, racks, load)
        if dest is None:
            raise InvalidReplicationFactorError(
                f"cannot move {tp} off broker {broker}: its {len(replicas)} replicas need {len(replicas)} "
                f"brokers and only {len(others)} others are available")
        load[dest] += 1
        plan[tp] = [dest if b == broker else b for b in replicas]
    return plan


def replication_factor_plan(current: Assignment, topic: str, rf: int, racks: Racks,
                            leaders: Mapping[TopicPartition, int] | None = None) -> Plan:
    """Grow ``topic``'s replica lists to ``rf`` (new replicas appended on the least-loaded brokers) or
    shrink them (dropping from the tail, keeping the first replica and the current leader)."""
    parts = {tp: list(r) for tp, r in current.items() if tp.topic == topic}
    if not parts:
        raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
    if rf < 1:
        raise InvalidReplicationFactorError(f"replication factor must be at least 1, got {rf}")
    if rf > len(racks):
        raise InvalidReplicationFactorError(f"replication factor {rf} is larger than the {len(racks)} available brokers")
    load = replica_counts(current, racks)
    leaders = leaders or {}
    plan: Plan = {}
    for tp, replicas in sorted(parts.items()):
        if len(replicas) == rf:
            continue
        if len(replicas) < rf:
            new = list(replicas)
            while len(new) < rf:
                dest = _pick((b for b in sorted(racks)), new, racks, load)
                if dest is None:  # unreachable: rf <= brokers
                    break
                load[dest] += 1
                new.append(dest)
        else:
            must = [replicas[0]] + ([leaders[tp]] if leaders.get(tp) in replicas[1:] else [])
            rest = [b for b in replicas if b not in must][: rf - len(must)] if rf > len(must) else []
            chosen = set((must + rest)[:rf])
            new = [b for b in replicas if b in chosen]
        plan[tp] = new
    return plan
