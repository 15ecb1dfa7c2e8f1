"""Turns group and offset state into ``__consumer_offsets`` records (key bytes, value bytes or None
for a tombstone), converting topic names to the topic ids KIP-848 records carry. Pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from services.coordinator import records as r
from services.coordinator.group import CurrentAssignment, Member
from shared.types import TopicPartition

Rec = tuple[bytes, bytes | None]


def by_topic_id(tps: Iterable[TopicPartition], topic_ids: Mapping[str, str]) -> r.TopicIdPartitions:
    out: r.TopicIdPartitions = {}
    for tp in tps:
        tid = topic_ids.get(tp.topic)
        if tid is not None:
            out.setdefault(tid, []).append(tp.partition)
    return {t: sorted(ps) for t, ps in out.items()}


def by_topic_name(tps: r.TopicIdPartitions, topic_names: Mapping[str, str]) -> set[TopicPartition]:
    """The reverse; partitions of topics that no longer exist are dropped."""
    return {TopicPartition(topic_names[t], p) for t, ps in tps.items() if t in topic_names for p in ps}


class RecordBuilder:
    """Encodes the records a decision yields, from values (a group is never read here)."""

    def __init__(self, topic_ids: Mapping[str, str]) -> None:
        self.topic_ids = topic_ids  # topic name -> topic id (hex), kept current by the shard
        # Members commit the same partitions again and again: their keys are encoded once.
        self._offset_keys: dict[tuple[str, TopicPartition], bytes] = {}

    def group_epoch(self, group_id: str, epoch: int, metadata_hash: int) -> Rec:
        return r.encode_key(r.RecordKey(r.GROUP_METADATA, group_id)), r.encode_group_metadata(epoch, metadata_hash)

    def target_epoch(self, group_id: str, epoch: int) -> Rec:
        return r.encode_key(r.RecordKey(r.TARGET_ASSIGNMENT_METADATA, group_id)), r.encode_epoch(epoch)

    def member_metadata(self, group_id: str, m: Member) -> Rec:
        value = r.MemberMetadataValue(m.instance_id, m.rack_id, m.client_id, m.client_host, list(m.subscribed_topics),
                                      m.regex, m.rebalance_timeout_ms, m.assignor)
        return r.encode_key(r.RecordKey(r.MEMBER_METADATA, group_id, m.member_id)), r.encode_member(value)

    def target_member(self, group_id: str, member_id: str, tps: Iterable[TopicPartition]) -> Rec:
        value = r.encode_target_member(by_topic_id(tps, self.topic_ids))
        return r.encode_key(r.RecordKey(r.TARGET_ASSIGNMENT_MEMBER, group_id, member_id)), value

    def target(self, group_id: str, target: Mapping[str, Iterable[TopicPartition]], epoch: int) -> list[Rec]:
        """A whole target assignment: one record per member, then the epoch (Kafka's order)."""
        return [self.target_member(group_id, mid, target[mid]) for mid in sorted(target)] + [self.target_epoch(group_id, epoch)]

    def current(self, group_id: str, member_id: str, c: CurrentAssignment) -> Rec:
        value = r.CurrentAssignmentValue(c.epoch, c.previous_epoch, c.state, by_topic_id(c.assigned, self.topic_ids),
                                         by_topic_id(c.pending_revocation, self.topic_ids))
        return r.encode_key(r.RecordKey(r.CURRENT_MEMBER_ASSIGNMENT, group_id, member_id)), r.encode_current(value)

    def member_tombstones(self, group_id: str, member_id: str) -> list[Rec]:
        return [(r.encode_key(r.RecordKey(t, group_id, member_id)), None)
                for t in (r.CURRENT_MEMBER_ASSIGNMENT, r.TARGET_ASSIGNMENT_MEMBER, r.MEMBER_METADATA)]

    def group_tombstones(self, group_id: str) -> list[Rec]:
        return [(r.encode_key(r.RecordKey(t, group_id)), None) for t in (r.TARGET_ASSIGNMENT_METADATA, r.GROUP_METADATA)]

    def offset(self, group_id: str, tp: TopicPartition, value: r.OffsetValue | None) -> Rec:
        key = self._offset_keys.get((group_id, tp))
        if key is None:
            if len(self._offset_keys) > 100_000:
                self._offset_keys.clear()
            key = self._offset_keys[(group_id, tp)] = r.encode_key(
                r.RecordKey(r.OFFSET_COMMIT, group_id, topic=tp.topic, partition=tp.partition))
        return key, None if value is None else r.encode_offset(value)

    def pending_offset(self, group_id: str, tp: TopicPartition, producer_id: int,
                       value: r.PendingOffsetValue | None) -> Rec:
        """A transaction's pending offset commit (Tidelog's record type, ``records.PENDING_TXN_OFFSET``)."""
        key = r.encode_key(r.RecordKey(r.PENDING_TXN_OFFSET, group_id, topic=tp.topic, partition=tp.partition,
                                       producer_id=producer_id))
        return key, None if value is None else r.encode_pending_offset(value)
