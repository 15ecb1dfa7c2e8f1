"""Turns group and offset state into ``__consumer_offsets`` records (key bytes, value bytes or None
for a tombstone), converting topic names to the topic ids KIP-848 records carry. Pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from services.coordinator import records as r
from services.coordinator.group import ConsumerGroup, Member
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
    def __init__(self, topic_ids: Mapping[str, str]) -> None:
        self.topic_ids = topic_ids  # topic name -> topic id (hex), kept current by the shard
        # Members commit the same partitions again and again: their keys are encoded once.
        self._offset_keys: dict[tuple[str, TopicPartition], bytes] = {}

    def group_epoch(self, g: ConsumerGroup) -> Rec:
        return r.encode_key(r.RecordKey(r.GROUP_METADATA, g.group_id)), r.encode_group_metadata(g.epoch, g.metadata_hash)

    def target_epoch(self, g: ConsumerGroup) -> Rec:
        return r.encode_key(r.RecordKey(r.TARGET_ASSIGNMENT_METADATA, g.group_id)), r.encode_epoch(g.target_epoch)

    def member_metadata(self, g: ConsumerGroup, m: Member) -> Rec:
        value = r.MemberMetadataValue(m.instance_id, m.rack_id, m.client_id, m.client_host, list(m.subscribed_topics),
                                      m.regex, m.rebalance_timeout_ms, m.assignor)
        return r.encode_key(r.RecordKey(r.MEMBER_METADATA, g.group_id, m.member_id)), r.encode_member(value)

    def target_member(self, g: ConsumerGroup, member_id: str) -> Rec:
        tps = by_topic_id(g.target.get(member_id, ()), self.topic_ids)
        return r.encode_key(r.RecordKey(r.TARGET_ASSIGNMENT_MEMBER, g.group_id, member_id)), r.encode_target_member(tps)

    def target(self, g: ConsumerGroup) -> list[Rec]:
        """The whole target assignment: one record per member, then the epoch (Kafka's order)."""
        return [self.target_member(g, mid) for mid in sorted(g.target)] + [self.target_epoch(g)]

    def current(self, g: ConsumerGroup, m: Member) -> Rec:
        value = r.CurrentAssignmentValue(m.epoch, m.previous_epoch, m.state, by_topic_id(m.assigned, self.topic_ids),
                                         by_topic_id(m.pending_revocation, self.topic_ids))
        return r.encode_key(r.RecordKey(r.CURRENT_MEMBER_ASSIGNMENT, g.group_id, m.member_id)), r.encode_current(value)

    def member_tombstones(self, g: ConsumerGroup, member_id: str) -> list[Rec]:
        return [(r.encode_key(r.RecordKey(t, g.group_id, member_id)), None)
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
