"""Partition reassignment state rules (Kafka's KIP-455). Pure functions, no I/O.

A partition under reassignment has a ``ReassignmentRecord``: its ``target`` replicas,
the ``adding`` replicas (in the target, not among the original ones) and the ``removing``
ones (not in the target). Meanwhile the replica set is the union: the original replicas in
their order, then the adding ones; the adding replicas fetch as followers outside the ISR.

    start    replicas := union, ISR and leader unchanged, partition epoch + 1
    advance  once every target replica is in the ISR: if the leader is being removed, the
             first target replica in the ISR (and alive) leads (leader epoch + 1); the replica
             set becomes the target, the removed replicas leave the ISR, the record is dropped
    cancel   replicas := union minus adding (the original ones), adding replicas leave the ISR;
             leadership goes back to an original replica if an adding one led

A reassignment that only removes replicas completes as it starts when the target is in the ISR.
Resubmitting for a partition under reassignment keeps its original replicas (a later cancel
returns to them). The adapter (``replication.py``) writes each ``Step`` — topic assignment,
partition state and reassignment record — in one fenced etcd transaction.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from shared.errors import ErrorCode, ReassignmentError
from shared.metadata.types import PartitionState, ReassignmentRecord, TopicRecord
from shared.types import TopicPartition


@dataclass(frozen=True)
class Step:
    """What one partition becomes: its replica set (the topic record's), its state, and its
    reassignment record (None: no reassignment in progress any more)."""

    replicas: list[int]
    state: PartitionState
    reassignment: ReassignmentRecord | None


def original_replicas(replicas: Sequence[int], r: ReassignmentRecord) -> list[int]:
    return [b for b in replicas if b not in r.adding]


def validate_target(tp: TopicPartition, target: Sequence[int], brokers: Iterable[int]) -> None:
    """Kafka's checks of a manual assignment: not empty, no duplicates, only registered brokers."""
    if not target:
        raise ReassignmentError(f"{tp}: the target replica list is empty")
    if len(set(target)) != len(target):
        raise ReassignmentError(f"{tp}: the target replicas {list(target)} name a broker twice")
    known = set(brokers)
    if unknown := sorted(b for b in target if b not in known):
        raise ReassignmentError(f"{tp}: the target replicas {list(target)} include brokers {unknown}, "
                                f"which are not registered")


def start(tp: TopicPartition, replicas: Sequence[int], st: PartitionState, ongoing: ReassignmentRecord | None,
          target: Sequence[int], brokers: Iterable[int], live: set[int]) -> Step | None:
    """Begin (or replace) a reassignment of ``tp`` towards ``target``; None when there is nothing to do
    (the target is already the replica set and nothing is in progress)."""
    validate_target(tp, target, brokers)
    target = list(target)
    original = original_replicas(replicas, ongoing) if ongoing else list(replicas)
    if ongoing is None and target == list(replicas):
        return None
    full = list(replicas) + [b for b in target if b not in replicas]
    record = ReassignmentRecord(target, [b for b in full if b not in original], [b for b in full if b not in target])
    changed = full != list(replicas)
    state = PartitionState(st.leader, st.leader_epoch, list(st.isr), st.partition_epoch + 1) if changed else st
    if (done := advance(full, state, record, live)) is not None:
        return done
    return Step(full, state, record) if changed or record != ongoing else None


def advance(replicas: Sequence[int], st: PartitionState, r: ReassignmentRecord, live: set[int]) -> Step | None:
    """Complete the reassignment once every target replica is in the ISR; None while it must wait
    (a target replica still catching up, or no live target replica in the ISR to lead)."""
    if any(b not in st.isr for b in r.target) or st.leader == -1:
        return None
    isr = [b for b in r.target if b in st.isr]
    leader, leader_epoch = st.leader, st.leader_epoch
    if leader not in r.target:
        candidates = [b for b in isr if b in live]
        if not candidates:
            return None
        leader, leader_epoch = candidates[0], st.leader_epoch + 1
    return Step(list(r.target), PartitionState(leader, leader_epoch, isr, st.partition_epoch + 1), None)


def cancel(tp: TopicPartition, replicas: Sequence[int], st: PartitionState, r: ReassignmentRecord | None,
           live: set[int]) -> Step:
    """Return ``tp`` to its original replicas (NO_REASSIGNMENT_IN_PROGRESS when none is in progress)."""
    if r is None:
        raise ReassignmentError(f"{tp} has no reassignment in progress", code=ErrorCode.NO_REASSIGNMENT_IN_PROGRESS)
    original = original_replicas(replicas, r)
    isr = [b for b in original if b in st.isr]
    if not isr:
        raise ReassignmentError(f"{tp}: every ISR member {st.isr} is a replica being added; cancelling now "
                                f"would need an unclean election", code=ErrorCode.INVALID_REQUEST)
    leader, leader_epoch = st.leader, st.leader_epoch
    if leader not in original:
        candidates = [b for b in isr if b in live]
        leader = candidates[0] if candidates else -1
        leader_epoch += 1
    return Step(original, PartitionState(leader, leader_epoch, isr, st.partition_epoch + 1), None)


# -- batches --------------------------------------------------------------------------------------------

Request = tuple[TopicPartition, list[int] | None]  # target replicas, None to cancel (Kafka's null replicas)


def alter_reassignments(topics: Mapping[str, TopicRecord], states: Mapping[TopicPartition, PartitionState],
                        ongoing: Mapping[TopicPartition, ReassignmentRecord], requests: Iterable[Request],
                        brokers: Iterable[int], live: set[int]) -> dict[TopicPartition, Step]:
    """Validate a whole AlterPartitionReassignments request and return each partition's step (no-ops
    left out). The first invalid partition refuses the whole request (nothing is applied)."""
    brokers = set(brokers)
    out: dict[TopicPartition, Step] = {}
    seen: set[TopicPartition] = set()
    for tp, target in requests:
        if tp in seen:
            raise ReassignmentError(f"{tp} is named twice", code=ErrorCode.INVALID_REQUEST)
        seen.add(tp)
        topic = topics.get(tp.topic)
        st = states.get(tp)
        if topic is None or tp.partition not in topic.assignment or st is None:
            raise ReassignmentError(f"{tp} does not exist", code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        replicas = topic.assignment[tp.partition]
        if target is None:
            out[tp] = cancel(tp, replicas, st, ongoing.get(tp), live)
        elif (step := start(tp, replicas, st, ongoing.get(tp), target, brokers, live)) is not None:
            out[tp] = step
    return out


def advance_all(topics: Mapping[str, TopicRecord], states: Mapping[TopicPartition, PartitionState],
                ongoing: Mapping[TopicPartition, ReassignmentRecord], live: set[int]) -> dict[TopicPartition, Step]:
    """The reassignments that can complete now. A record whose topic or partition is gone is dropped."""
    out: dict[TopicPartition, Step] = {}
    for tp, r in ongoing.items():
        topic = topics.get(tp.topic)
        st = states.get(tp)
        if topic is None or st is None or tp.partition not in topic.assignment:
            continue
        if (step := advance(topic.assignment[tp.partition], st, r, live)) is not None:
            out[tp] = step
    return out


def describe(topics: Mapping[str, TopicRecord], ongoing: Mapping[TopicPartition, ReassignmentRecord]
             ) -> list[dict[str, object]]:
    """Kafka's ListPartitionReassignments: per partition the full replica set, adding and removing."""
    out: list[dict[str, object]] = []
    for tp, r in sorted(ongoing.items()):
        topic = topics.get(tp.topic)
        if topic is None or tp.partition not in topic.assignment:
            continue
        out.append({"topic": tp.topic, "partition": tp.partition, "replicas": topic.assignment[tp.partition],
                    "adding_replicas": r.adding, "removing_replicas": r.removing, "target_replicas": r.target})
    return out
