"""ConsumerGroupHeartbeat of KIP-848 on one group: join, static rejoin, leave, epoch checks,
target assignment and reconciliation, session expiry. Pure (``now_ms`` passed in).

Every function returns the records to write to ``__consumer_offsets`` in the order
Kafka writes them; the caller answers only once they are committed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from services.coordinator.config import GroupConfig
from services.coordinator.group import (
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    ConsumerGroup,
    Member,
    check_assignor,
    fail,
    validate_regex,
)
from services.coordinator.reconcile import reconcile
from services.coordinator.record_builder import Rec, RecordBuilder
from shared.errors import ErrorCode
from shared.types import TopicPartition


@dataclass
class HeartbeatRequest:
    group_id: str
    member_id: str = ""
    member_epoch: int = 0
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = 300_000
    subscribed_topic_names: list[str] = field(default_factory=list)
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: set[TopicPartition] | None = None
    client_id: str = ""
    client_host: str = ""


@dataclass
class HeartbeatResult:
    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: set[TopicPartition] | None  # None when leaving


class Membership:
    def __init__(self, config: GroupConfig, topics: Mapping[str, int], builder: RecordBuilder,
                 new_member_id: Callable[[], str]) -> None:
        self.config = config
        self.topics = topics  # topic name -> partition count, kept current by the shard
        self.builder = builder
        self.new_member_id = new_member_id

    # -- heartbeat --------------------------------------------------------------------------------

    def heartbeat(self, group: ConsumerGroup, req: HeartbeatRequest, now_ms: int) -> tuple[HeartbeatResult, list[Rec]]:
        if req.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return self.leave(group, req, now_ms)
        if req.member_epoch < 0:
            raise fail(ErrorCode.INVALID_REQUEST, f"member epoch {req.member_epoch} is not valid")
        recs: list[Rec] = []
        epoch_before = group.epoch
        if req.member_epoch == 0:
            member, is_new = self._join(group, req, recs)
        else:
            member, is_new = self._existing(group, req), False
        changed, subscription_changed = self._update_metadata(member, req)
        if changed or is_new:
            recs.append(self.builder.member_metadata(group, member))
            if is_new or subscription_changed:
                group.bump_epoch()
        group.refresh_metadata_hash(self.topics)
        if group.epoch != epoch_before:
            group.epoch_changed_ms = now_ms
            recs.append(self.builder.group_epoch(group))
        if group.epoch > group.target_epoch:
            group.compute_target(self.topics)
            recs.extend(self.builder.target(group))
        if reconcile(group, member, req.owned, now_ms) or is_new:
            recs.append(self.builder.current(group, member))
        member.session_deadline_ms = now_ms + self.config.session_timeout_ms
        group.empty_since_ms = None
        result = HeartbeatResult(member.member_id, member.epoch, self.interval_ms(group, now_ms), set(member.assigned))
        return result, recs

    def interval_ms(self, group: ConsumerGroup, now_ms: int) -> int:
        """The heartbeat interval to tell a member: short while the group converges (see GroupConfig)."""
        normal = self.config.heartbeat_interval_ms
        if group.converging(now_ms, normal):
            return min(normal, self.config.converging_heartbeat_interval_ms)
        return normal

    def _join(self, group: ConsumerGroup, req: HeartbeatRequest, recs: list[Rec]) -> tuple[Member, bool]:
        if not req.subscribed_topic_names and not req.subscribed_topic_regex:
            raise fail(ErrorCode.INVALID_REQUEST, "a joining member must subscribe to topic names or a regex")
        existing = group.members.get(req.member_id) if req.member_id else None
        if existing is not None and existing.epoch != STATIC_LEAVE_EPOCH:
            if existing.instance_id != req.instance_id:
                raise fail(ErrorCode.FENCED_INSTANCE_ID, f"member {req.member_id} has another instance id")
            return existing, False  # a retried join whose response was lost
        if req.instance_id:
            static = group.static_member(req.instance_id)
            if static is not None:
                if static.epoch != STATIC_LEAVE_EPOCH:
                    raise fail(ErrorCode.UNRELEASED_INSTANCE_ID,
                               f"instance id {req.instance_id!r} is still used by live member {static.member_id}")
                return self._replace_static(group, static, req, recs), False
        if len(group.members) >= self.config.max_size:
            raise fail(ErrorCode.GROUP_MAX_SIZE_REACHED, f"group {group.group_id} has {len(group.members)} members")
        member = Member(req.member_id or self.new_member_id(), instance_id=req.instance_id)
        group.members[member.member_id] = member
        return member, True

    def _replace_static(self, group: ConsumerGroup, old: Member, req: HeartbeatRequest, recs: list[Rec]) -> Member:
        """A static member back within its session: a new member id takes over the old one's epoch and
        partitions, and the group epoch does not move (no one else is affected)."""
        new_id = req.member_id if req.member_id and req.member_id != old.member_id else self.new_member_id()
        recs.extend(self.builder.member_tombstones(group, old.member_id))
        del group.members[old.member_id]
        member = Member(new_id, instance_id=old.instance_id, rack_id=old.rack_id, client_id=old.client_id,
                        client_host=old.client_host, subscribed_topics=list(old.subscribed_topics), regex=old.regex,
                        rebalance_timeout_ms=old.rebalance_timeout_ms, assignor=old.assignor,
                        epoch=old.previous_epoch, previous_epoch=old.previous_epoch, state=old.state,
                        assigned=set(old.assigned), pending_revocation=set(old.pending_revocation))
        group.members[new_id] = member
        if old.member_id in group.target:
            group.target[new_id] = group.target.pop(old.member_id)
        recs.append(self.builder.member_metadata(group, member))
        recs.append(self.builder.target_member(group, new_id))
        recs.append(self.builder.current(group, member))
        return member

    def _existing(self, group: ConsumerGroup, req: HeartbeatRequest) -> Member:
        member = group.members.get(req.member_id)
        if member is None or member.epoch == STATIC_LEAVE_EPOCH:
            raise fail(ErrorCode.UNKNOWN_MEMBER_ID, f"member {req.member_id!r} is not in group {group.group_id}")
        if member.instance_id != req.instance_id:
            raise fail(ErrorCode.FENCED_INSTANCE_ID, f"member {req.member_id} has instance id {member.instance_id!r}")
        if req.member_epoch > member.epoch:
            raise fail(ErrorCode.FENCED_MEMBER_EPOCH, f"epoch {req.member_epoch} is newer than the member's {member.epoch}")
        if req.member_epoch < member.epoch:
            # The response that gave the member its new epoch may have been lost: accept the previous
            # epoch if the member owns nothing it should not.
            if req.member_epoch != member.previous_epoch or (req.owned is not None and not req.owned <= member.assigned):
                raise fail(ErrorCode.FENCED_MEMBER_EPOCH, f"epoch {req.member_epoch} is older than the member's {member.epoch}")
        return member

    def _update_metadata(self, member: Member, req: HeartbeatRequest) -> tuple[bool, bool]:
        """Apply the request's metadata; returns ``(anything changed, subscription changed)``."""
        if req.subscribed_topic_regex:
            validate_regex(req.subscribed_topic_regex)
        check_assignor(req.server_assignor)
        names = sorted(set(req.subscribed_topic_names))
        sub = (names, req.subscribed_topic_regex or None, req.server_assignor or None, req.rack_id)
        sub_changed = sub != (sorted(member.subscribed_topics), member.regex, member.assignor, member.rack_id)
        other = (req.client_id, req.client_host, req.rebalance_timeout_ms)
        changed = sub_changed or other != (member.client_id, member.client_host, member.rebalance_timeout_ms)
        member.subscribed_topics, member.regex, member.assignor, member.rack_id = sub
        member.client_id, member.client_host, member.rebalance_timeout_ms = other
        return changed, sub_changed

    # -- leaving ----------------------------------------------------------------------------------

    def leave(self, group: ConsumerGroup, req: HeartbeatRequest, now_ms: int) -> tuple[HeartbeatResult, list[Rec]]:
        member = group.members.get(req.member_id)
        if member is None:
            raise fail(ErrorCode.UNKNOWN_MEMBER_ID, f"member {req.member_id!r} is not in group {group.group_id}")
        if req.member_epoch == STATIC_LEAVE_EPOCH and member.instance_id:
            if member.epoch != STATIC_LEAVE_EPOCH:
                member.previous_epoch, member.epoch = member.epoch, STATIC_LEAVE_EPOCH
            return (HeartbeatResult(member.member_id, STATIC_LEAVE_EPOCH, self.config.heartbeat_interval_ms, None),
                    [self.builder.current(group, member)])
        recs = self.remove(group, [member.member_id], now_ms)
        return HeartbeatResult(member.member_id, LEAVE_EPOCH, self.config.heartbeat_interval_ms, None), recs

    def remove(self, group: ConsumerGroup, member_ids: list[str], now_ms: int) -> list[Rec]:
        """Remove members (left, expired or fenced), bump the epoch and compute the new target."""
        recs: list[Rec] = []
        for mid in member_ids:
            if group.remove_member(mid, now_ms) is not None:
                recs.extend(self.builder.member_tombstones(group, mid))
        group.epoch_changed_ms = now_ms
        group.refresh_metadata_hash(self.topics)
        recs.append(self.builder.group_epoch(group))
        group.compute_target(self.topics)
        recs.extend(self.builder.target(group))
        return recs

    def expire(self, group: ConsumerGroup, now_ms: int) -> list[Rec]:
        """Members whose session expired, or that did not revoke within their rebalance timeout."""
        gone = [m.member_id for m in group.members.values()
                if m.session_deadline_ms <= now_ms
                or (m.revocation_deadline_ms is not None and m.revocation_deadline_ms <= now_ms)]
        return self.remove(group, gone, now_ms) if gone else []

    def metadata_changed(self, group: ConsumerGroup) -> list[Rec]:
        """Topics were created or grew: bump the epoch of a group whose subscription they touch."""
        if not group.refresh_metadata_hash(self.topics) or not group.members:
            return []
        group.compute_target(self.topics)
        return [self.builder.group_epoch(group), *self.builder.target(group)]
