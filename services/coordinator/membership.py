"""ConsumerGroupHeartbeat of KIP-848 on one group: join, static rejoin, leave, epoch checks,
target assignment and reconciliation, session expiry. Pure (``now_ms`` passed in).

Decide, then replay: every function here reads a group and returns the records that say what
changes, in the order Kafka writes them, and changes nothing. The shard replays the records
(``GroupShard.replay``, the path loading uses), so a live group and the same group loaded from
``__consumer_offsets`` cannot differ. Within one decision, later steps see the earlier steps'
outcome through local values (the member as updated, the members as they will be, the new
target), never through the group.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from services.coordinator.config import GroupConfig
from services.coordinator.group import (
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    UNKNOWN,
    UNREVOKED_PARTITIONS,
    ConsumerGroup,
    Member,
    Step,
    check_assignor,
    compute_target,
    fail,
    metadata_hash,
    next_assignment,
    subscribed_topics,
    transition,
    validate_regex,
)
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


@dataclass
class Decision:
    """A heartbeat's outcome before replay: the records, and what the shard needs to answer and to
    set the member's timers once they are replayed."""

    member_id: str
    records: list[Rec]
    #: the epoch to answer a member that left (LEAVE_EPOCH or STATIC_LEAVE_EPOCH); None: it stays
    left_with: int | None = None
    #: the member was asked to revoke partitions (its rebalance timeout starts)
    revoking: bool = False


class Membership:
    def __init__(self, config: GroupConfig, topics: Mapping[str, int], builder: RecordBuilder,
                 new_member_id: Callable[[], str],
                 racks: Mapping[TopicPartition, frozenset[str]] | None = None) -> None:
        self.config = config
        self.topics = topics  # topic name -> partition count, kept current by the shard
        self.racks = racks if racks is not None else {}  # partition -> replica racks, kept current by the shard
        self.builder = builder
        self.new_member_id = new_member_id

    # -- heartbeat --------------------------------------------------------------------------------

    def heartbeat(self, group: ConsumerGroup, req: HeartbeatRequest) -> Decision:
        """``group`` may be a new, empty one that is not in the shard yet."""
        if req.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return self.leave(group, req)
        if req.member_epoch < 0:
            raise fail(ErrorCode.INVALID_REQUEST, f"member epoch {req.member_epoch} is not valid")
        gid = group.group_id
        recs: list[Rec] = []
        members: dict[str, Member] = dict(group.members)  # the members as they will be
        target: dict[str, set[TopicPartition]] = dict(group.target)
        if req.member_epoch == 0:
            member, is_new = self._join(group, req, members, target, recs)
        else:
            member, is_new = self._existing(group, req), False
        updated, changed, subscription_changed = self._update_metadata(member, req)
        members[updated.member_id] = updated
        epoch = group.epoch
        if changed or is_new:
            recs.append(self.builder.member_metadata(gid, updated))
            if is_new or subscription_changed:
                epoch += 1
        digest = metadata_hash(self.topics, subscribed_topics(members.values(), self.topics))
        if digest != group.metadata_hash:
            epoch += 1
        if epoch != group.epoch or digest != group.metadata_hash:
            recs.append(self.builder.group_epoch(gid, epoch, digest))
        target_epoch = group.target_epoch
        if epoch > target_epoch:
            target, target_epoch = compute_target(members, self.topics, target, self.racks), epoch
            recs.extend(self.builder.target(gid, target, target_epoch))
        before = updated.current()
        after = next_assignment(updated, target.get(updated.member_id, set()), target_epoch, members, req.owned)
        if after != before or is_new:
            recs.append(self.builder.current(gid, updated.member_id, after))
        revoking = after.state == UNREVOKED_PARTITIONS and after.pending_revocation != before.pending_revocation
        return Decision(updated.member_id, recs, revoking=revoking)

    def interval_ms(self, group: ConsumerGroup, now_ms: int) -> int:
        """The heartbeat interval to tell a member: short while the group converges (see GroupConfig)."""
        normal = self.config.heartbeat_interval_ms
        if group.converging(now_ms, normal):
            return min(normal, self.config.converging_heartbeat_interval_ms)
        return normal

    def _join(self, group: ConsumerGroup, req: HeartbeatRequest, members: dict[str, Member],
              target: dict[str, set[TopicPartition]], recs: list[Rec]) -> tuple[Member, bool]:
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
                return self._replace_static(group, static, req, members, target, recs), False
        if len(group.members) >= self.config.max_size:
            raise fail(ErrorCode.GROUP_MAX_SIZE_REACHED, f"group {group.group_id} has {len(group.members)} members")
        return Member(req.member_id or self.new_member_id(), instance_id=req.instance_id), True

    def _replace_static(self, group: ConsumerGroup, old: Member, req: HeartbeatRequest, members: dict[str, Member],
                        target: dict[str, set[TopicPartition]], recs: list[Rec]) -> Member:
        """A static member back within its session: a new member id takes over the old one's epoch and
        partitions, and the group epoch does not move (no one else is affected)."""
        gid = group.group_id
        new_id = req.member_id if req.member_id and req.member_id != old.member_id else self.new_member_id()
        recs.extend(self.builder.member_tombstones(gid, old.member_id))
        del members[old.member_id]
        member = replace(old, member_id=new_id, subscribed_topics=list(old.subscribed_topics), epoch=old.previous_epoch,
                         assigned=set(old.assigned), pending_revocation=set(old.pending_revocation),
                         session_deadline_ms=0, revocation_deadline_ms=None)
        members[new_id] = member
        if old.member_id in target:
            target[new_id] = target.pop(old.member_id)
        recs.append(self.builder.member_metadata(gid, member))
        recs.append(self.builder.target_member(gid, new_id, target.get(new_id, set())))
        recs.append(self.builder.current(gid, new_id, member.current()))
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

    @staticmethod
    def _update_metadata(member: Member, req: HeartbeatRequest) -> tuple[Member, bool, bool]:
        """The member with the request's metadata; ``(member, anything changed, subscription changed)``."""
        if req.subscribed_topic_regex:
            validate_regex(req.subscribed_topic_regex)
        check_assignor(req.server_assignor)
        names = sorted(set(req.subscribed_topic_names))
        sub = (names, req.subscribed_topic_regex or None, req.server_assignor or None, req.rack_id)
        sub_changed = sub != (sorted(member.subscribed_topics), member.regex, member.assignor, member.rack_id)
        other = (req.client_id, req.client_host, req.rebalance_timeout_ms)
        changed = sub_changed or other != (member.client_id, member.client_host, member.rebalance_timeout_ms)
        if not changed:
            return member, False, False
        updated = replace(member, subscribed_topics=names, regex=sub[1], assignor=sub[2], rack_id=req.rack_id,
                          client_id=req.client_id, client_host=req.client_host,
                          rebalance_timeout_ms=req.rebalance_timeout_ms)
        return updated, True, sub_changed

    # -- leaving ----------------------------------------------------------------------------------

    def leave(self, group: ConsumerGroup, req: HeartbeatRequest) -> Decision:
        member = group.members.get(req.member_id)
        if member is None:
            raise fail(ErrorCode.UNKNOWN_MEMBER_ID, f"member {req.member_id!r} is not in group {group.group_id}")
        if req.member_epoch == STATIC_LEAVE_EPOCH and member.instance_id:
            cur = member.current()
            if cur.epoch != STATIC_LEAVE_EPOCH:
                cur = replace(cur, epoch=STATIC_LEAVE_EPOCH, previous_epoch=cur.epoch)
            return Decision(member.member_id, [self.builder.current(group.group_id, member.member_id, cur)],
                            left_with=STATIC_LEAVE_EPOCH)
        recs = self.remove(group, [member.member_id])
        return Decision(member.member_id, recs, left_with=LEAVE_EPOCH)

    def remove(self, group: ConsumerGroup, member_ids: list[str]) -> list[Rec]:
        """Remove members (left, expired or fenced): the group epoch moves once per member, and the
        target is computed anew for the others."""
        gid = group.group_id
        recs: list[Rec] = []
        members, target, epoch = dict(group.members), dict(group.target), group.epoch
        for mid in member_ids:
            target.pop(mid, None)
            if members.pop(mid, None) is not None:
                recs.extend(self.builder.member_tombstones(gid, mid))
                epoch += 1
        digest = metadata_hash(self.topics, subscribed_topics(members.values(), self.topics))
        if digest != group.metadata_hash and members:
            epoch += 1
        recs.append(self.builder.group_epoch(gid, epoch, digest))
        recs.extend(self.builder.target(gid, compute_target(members, self.topics, target, self.racks), epoch))
        return recs

    def expired(self, group: ConsumerGroup, now_ms: int) -> list[str]:
        """Members whose session expired, or that did not revoke within their rebalance timeout (the
        table's REVOCATION_TIMED_OUT: fenced)."""
        gone = []
        for m in group.members.values():
            if m.session_deadline_ms <= now_ms:
                gone.append(m.member_id)
            elif m.revocation_deadline_ms is not None and m.revocation_deadline_ms <= now_ms:
                if transition(m.state, Step.REVOCATION_TIMED_OUT) == UNKNOWN:
                    gone.append(m.member_id)
        return gone

    def metadata_changed(self, group: ConsumerGroup) -> list[Rec]:
        """Topics were created or grew: bump the epoch of a group whose subscription they touch."""
        if not group.members:
            return []
        digest = metadata_hash(self.topics, group.subscribed_topics(self.topics))
        if digest == group.metadata_hash:
            return []
        epoch = group.epoch + 1
        target = compute_target(group.members, self.topics, group.target, self.racks)
        return [self.builder.group_epoch(group.group_id, epoch, digest),
                *self.builder.target(group.group_id, target, epoch)]

