"""Everything one ``__consumer_offsets`` partition holds: its groups and their committed offsets. Pure.

The coordinator that owns a partition keeps one ``GroupShard``; it is rebuilt by
``replay``-ing the partition's records on load. Requests return the records to
write; group state changes at once (the caller answers only after the write is
committed, and drops the whole shard if a write fails), while offsets are
applied with ``apply_offsets`` once their records are committed, so OffsetFetch
never returns an offset that is not durable.

A group id is either a consumer group (KIP-848, ``groups``) or a classic group
(JoinGroup/SyncGroup, ``classic.groups``), never both: a request of one kind for
a non-empty group of the other kind is refused with INCONSISTENT_GROUP_PROTOCOL,
an empty group of the other kind is replaced (its records are tombstoned; its
committed offsets stay).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

from services.coordinator import classic_records as cr
from services.coordinator import records as r
from services.coordinator.classic import ClassicGroups
from services.coordinator.classic_group import EMPTY, ClassicGroup
from services.coordinator.classic_messages import (
    Decisions,
    JoinRequest,
    JoinResponse,
    LeaveMember,
    SyncRequest,
    SyncResponse,
)
from services.coordinator.config import GroupConfig
from services.coordinator.consumer_protocol import PROTOCOL_TYPE, subscribed_topics
from services.coordinator.group import STATIC_LEAVE_EPOCH, ConsumerGroup, GroupError, Member, fail
from services.coordinator.membership import HeartbeatRequest, HeartbeatResult, Membership
from services.coordinator.record_builder import Rec, RecordBuilder, by_topic_name
from shared.errors import ErrorCode
from shared.types import TopicPartition


@dataclass(frozen=True)
class OffsetCommit:
    tp: TopicPartition
    offset: int
    leader_epoch: int = -1
    metadata: str = ""


class GroupShard:
    def __init__(self, partition: int, config: GroupConfig, new_member_id: Callable[[], str] | None = None,
                 new_uuid: Callable[[], str] | None = None) -> None:
        self.partition = partition
        self.config = config
        self.groups: dict[str, ConsumerGroup] = {}
        self.offsets: dict[str, dict[TopicPartition, r.OffsetValue]] = {}
        self.topics: dict[str, int] = {}  # name -> partition count
        self.topic_ids: dict[str, str] = {}  # name -> id
        self.topic_names: dict[str, str] = {}  # id -> name
        self.builder = RecordBuilder(self.topic_ids)
        self._decoded_keys: dict[bytes, r.RecordKey] = {}
        self.membership = Membership(config, self.topics, self.builder, new_member_id or (lambda: uuid.uuid4().hex))
        self.classic = ClassicGroups(config, new_uuid or (lambda: str(uuid.uuid4())))

    # -- topic metadata -------------------------------------------------------------------------

    def set_topics(self, topics: Mapping[str, tuple[str, int]]) -> list[Rec]:
        """Topic name -> (topic id, partition count). Returns epoch bumps for groups it affects."""
        self.topics.clear()
        self.topics.update({name: n for name, (_, n) in topics.items()})
        self.topic_ids.clear()
        self.topic_ids.update({name: tid for name, (tid, _) in topics.items()})
        self.topic_names.clear()
        self.topic_names.update({tid: name for name, tid in self.topic_ids.items()})
        recs: list[Rec] = []
        for g in self.groups.values():
            recs.extend(self.membership.metadata_changed(g))
        return recs

    # -- groups ---------------------------------------------------------------------------------

    def heartbeat(self, req: HeartbeatRequest, now_ms: int) -> tuple[HeartbeatResult, list[Rec]]:
        if not req.group_id:
            raise fail(ErrorCode.INVALID_GROUP_ID, "group id is empty")
        classic = self.classic.groups.get(req.group_id)
        if classic is not None and not classic.is_empty():
            raise fail(ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                       f"group {req.group_id!r} is a classic group with {len(classic.members)} members")
        group = self.groups.get(req.group_id)
        created = group is None
        if group is None:
            if req.member_epoch != 0:
                raise fail(ErrorCode.UNKNOWN_MEMBER_ID, f"group {req.group_id} has no member {req.member_id!r}")
            group = ConsumerGroup(req.group_id, created_ms=now_ms)
            self.groups[req.group_id] = group
        try:
            result, recs = self.membership.heartbeat(group, req, now_ms)
        except GroupError:
            if created and classic is not None:  # the empty classic group stays what it was
                self.groups.pop(req.group_id, None)
            raise
        if classic is not None:  # an empty classic group becomes this consumer group
            del self.classic.groups[req.group_id]
            recs = [self.classic.tombstone(req.group_id), *recs]
        return result, recs

    # -- classic groups -------------------------------------------------------------------------

    def join_group(self, req: JoinRequest, now_ms: int) -> tuple[JoinResponse | int, Decisions]:
        """JoinGroup (see ``classic.py``): a response now or a parked request's ticket, and the decisions."""
        if not req.group_id:
            return JoinResponse(ErrorCode.INVALID_GROUP_ID, req.member_id, message="group id is empty"), Decisions()
        if not self.config.classic_min_session_timeout_ms <= req.session_timeout_ms <= self.config.classic_max_session_timeout_ms:
            return JoinResponse(ErrorCode.INVALID_SESSION_TIMEOUT, req.member_id, message=(
                f"session.timeout.ms {req.session_timeout_ms} is outside [group.min.session.timeout.ms "
                f"{self.config.classic_min_session_timeout_ms}, group.max.session.timeout.ms "
                f"{self.config.classic_max_session_timeout_ms}]")), Decisions()
        if req.rebalance_timeout_ms <= 0:  # JoinGroup v0 has none: the session timeout bounds the rebalance
            req = replace(req, rebalance_timeout_ms=req.session_timeout_ms)
        consumer = self.groups.get(req.group_id)
        if consumer is not None and consumer.members:
            return JoinResponse(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, req.member_id, message=(
                f"group {req.group_id!r} is a consumer group with {len(consumer.members)} members")), Decisions()
        answer, decisions = self.classic.join(req, now_ms)
        if consumer is not None and req.group_id in self.classic.groups:  # it replaced the empty consumer group
            del self.groups[req.group_id]
            decisions.records[:0] = self.builder.group_tombstones(req.group_id)
        return answer, decisions

    def sync_group(self, req: SyncRequest, now_ms: int) -> tuple[SyncResponse | int, Decisions]:
        if not req.group_id:
            return SyncResponse(ErrorCode.INVALID_GROUP_ID, message="group id is empty"), Decisions()
        return self.classic.sync(req, now_ms)

    def classic_heartbeat(self, group_id: str, member_id: str, instance_id: str | None, generation_id: int,
                          now_ms: int) -> ErrorCode:
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID
        return self.classic.heartbeat(group_id, member_id, instance_id, generation_id, now_ms)

    def leave_group(self, group_id: str, members: list[LeaveMember], now_ms: int) -> tuple[ErrorCode, list[ErrorCode], Decisions]:
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID, [], Decisions()
        return self.classic.leave(group_id, members, now_ms)

    def expire_classic(self, now_ms: int) -> Decisions:
        """The classic groups' timers (their parked requests may be answered)."""
        return self.classic.expire(now_ms)

    def expire(self, now_ms: int) -> list[Rec]:
        """Session and rebalance timeouts, and offsets past retention in groups empty long enough."""
        recs: list[Rec] = []
        for g in list(self.groups.values()):
            recs.extend(self.membership.expire(g, now_ms))
        for group_id, offs in self.offsets.items():
            g, cg = self.groups.get(group_id), self.classic.groups.get(group_id)
            if (g is not None and g.members) or (cg is not None and not cg.is_empty()):
                continue
            for tp, v in offs.items():
                since = v.commit_timestamp
                if g is not None and g.empty_since_ms is not None:
                    since = g.empty_since_ms
                elif cg is not None and cg.protocol_type and cg.state_since_ms is not None:
                    since = cg.state_since_ms
                if now_ms - since >= self.config.offsets_retention_ms:
                    recs.append(self.builder.offset(group_id, tp, None))
        for group_id, cg in list(self.classic.groups.items()):  # empty classic groups with nothing committed
            if (cg.state == EMPTY and not cg.pending_members and group_id not in self.offsets
                    and now_ms - (cg.state_since_ms if cg.state_since_ms is not None else now_ms)
                    >= self.config.offsets_retention_check_interval_ms):
                del self.classic.groups[group_id]
                recs.append(self.classic.tombstone(group_id))
        return recs

    def group_ids(self) -> list[str]:
        return sorted(set(self.groups) | set(self.classic.groups) | set(self.offsets))

    def describe(self, group_id: str) -> ConsumerGroup | ClassicGroup | None:
        """The group (a consumer or a classic one); a group with only committed offsets shows as an
        empty consumer group."""
        classic = self.classic.groups.get(group_id)
        if classic is not None:
            return classic
        g = self.groups.get(group_id)
        if g is None and group_id in self.offsets:
            return ConsumerGroup(group_id)
        return g

    def delete_group(self, group_id: str) -> list[Rec]:
        classic = self.classic.groups.get(group_id)
        if classic is not None:
            if not classic.is_empty():
                raise fail(ErrorCode.NON_EMPTY_GROUP, f"group {group_id!r} is {classic.state} with "
                                                      f"{len(classic.members)} members")
            del self.classic.groups[group_id]
            recs = [self.builder.offset(group_id, tp, None) for tp in sorted(self.offsets.get(group_id, {}))]
            return [*recs, self.classic.tombstone(group_id)]
        g = self.groups.get(group_id)
        if g is None and group_id not in self.offsets:
            raise fail(ErrorCode.GROUP_ID_NOT_FOUND, f"group {group_id!r} does not exist")
        if g is not None and g.members:
            raise fail(ErrorCode.NON_EMPTY_GROUP, f"group {group_id!r} has {len(g.members)} members")
        recs = [self.builder.offset(group_id, tp, None) for tp in sorted(self.offsets.get(group_id, {}))]
        if g is not None:
            recs.extend(self.builder.group_tombstones(group_id))
        self.groups.pop(group_id, None)
        return recs

    # -- offsets --------------------------------------------------------------------------------

    def commit_offsets(self, group_id: str, member_id: str, member_epoch: int, commits: Iterable[OffsetCommit],
                       now_ms: int, instance_id: str | None = None) -> tuple[dict[TopicPartition, int], list[Rec]]:
        """Validate a commit; per-partition error codes and the records of the accepted ones.

        Members of a consumer group commit at their current epoch and only partitions they own (as
        Kafka 4.3); members of a classic group commit with their generation id in ``member_epoch``
        (Kafka's rules: ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS); a group without
        live members takes commits from anyone (admin tools, simple consumers)."""
        if not group_id:
            raise fail(ErrorCode.INVALID_GROUP_ID, "group id is empty")
        classic = self.classic.groups.get(group_id)
        if classic is not None:
            classic.check_commit(member_id, instance_id, member_epoch)
            member = None
        else:
            member = self._committer(group_id, member_id, member_epoch)
        owned = member.owned() if member is not None else None
        errors: dict[TopicPartition, int] = {}
        recs: list[Rec] = []
        for c in commits:
            if owned is not None and c.tp not in owned:
                errors[c.tp] = ErrorCode.STALE_MEMBER_EPOCH
            elif len(c.metadata.encode()) > self.config.offset_metadata_max_bytes:
                errors[c.tp] = ErrorCode.OFFSET_METADATA_TOO_LARGE
            elif c.offset < 0:
                errors[c.tp] = ErrorCode.INVALID_REQUEST
            else:
                errors[c.tp] = ErrorCode.NONE
                recs.append(self.builder.offset(group_id, c.tp, r.OffsetValue(c.offset, c.leader_epoch, c.metadata, now_ms)))
        return errors, recs

    def _committer(self, group_id: str, member_id: str, member_epoch: int) -> Member | None:
        g = self.groups.get(group_id)
        live = {mid: m for mid, m in (g.members.items() if g else ()) if m.epoch != STATIC_LEAVE_EPOCH}
        if member_epoch < 0 and not member_id:
            if g is not None and g.members:
                raise fail(ErrorCode.UNKNOWN_MEMBER_ID, f"group {group_id!r} has members; commit as one of them")
            return None
        member = live.get(member_id)
        if member is None:
            raise fail(ErrorCode.UNKNOWN_MEMBER_ID, f"member {member_id!r} is not in group {group_id!r}")
        if member_epoch > member.epoch:
            raise fail(ErrorCode.FENCED_MEMBER_EPOCH, f"epoch {member_epoch} is newer than the member's {member.epoch}")
        if member_epoch < member.epoch:
            raise fail(ErrorCode.STALE_MEMBER_EPOCH, f"epoch {member_epoch} is older than the member's {member.epoch}")
        return member

    def apply_offsets(self, recs: Iterable[Rec]) -> None:
        """Apply the offset records among ``recs`` once they are committed (group records were applied
        when they were decided)."""
        for key, value in recs:
            if key[:2] in (b"\x00\x00", b"\x00\x01"):
                self.replay(key, value)

    def fetch_offsets(self, group_id: str, tps: Iterable[TopicPartition] | None) -> dict[TopicPartition, r.OffsetValue | None]:
        offs = self.offsets.get(group_id, {})
        if tps is None:
            return dict(offs)
        return {tp: offs.get(tp) for tp in tps}

    def delete_offsets(self, group_id: str, tps: Iterable[TopicPartition]) -> tuple[dict[TopicPartition, int], list[Rec]]:
        g, classic = self.groups.get(group_id), self.classic.groups.get(group_id)
        if g is None and classic is None and group_id not in self.offsets:
            raise fail(ErrorCode.GROUP_ID_NOT_FOUND, f"group {group_id!r} does not exist")
        subscribed: set[str] | None = g.subscribed_topics(self.topics) if g is not None and g.members else set()
        if classic is not None and not classic.is_empty():
            subscribed = self._classic_subscription(classic)
        errors: dict[TopicPartition, int] = {}
        recs: list[Rec] = []
        for tp in tps:
            if subscribed is None or tp.topic in subscribed:
                errors[tp] = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
                continue
            errors[tp] = ErrorCode.NONE
            if tp in self.offsets.get(group_id, {}):
                recs.append(self.builder.offset(group_id, tp, None))
        return errors, recs

    @staticmethod
    def _classic_subscription(group: ClassicGroup) -> set[str] | None:
        """The topics a live classic group subscribes to; None: every topic (not known yet, or unreadable)."""
        if group.protocol_type != PROTOCOL_TYPE:
            raise fail(ErrorCode.NON_EMPTY_GROUP, f"group {group.group_id!r} has members (protocol type "
                                                  f"{group.protocol_type!r})")
        if group.protocol_name is None:
            return None
        topics: set[str] = set()
        for m in group.members.values():
            got = subscribed_topics(m.metadata(group.protocol_name))
            if got is None:
                return None
            topics |= got
        return topics

    # -- loading --------------------------------------------------------------------------------

    def replay(self, key: bytes, value: bytes | None) -> None:
        k = self._decoded_keys.get(key)
        if k is None:
            k = r.decode_key(key)
            if k is None:
                return
            if k.type == r.OFFSET_COMMIT:  # offset keys come back again and again
                if len(self._decoded_keys) > 100_000:
                    self._decoded_keys.clear()
                self._decoded_keys[key] = k
        if k.type == r.OFFSET_COMMIT:
            tp = TopicPartition(k.topic, k.partition)
            if value is None:
                offs = self.offsets.get(k.group_id)
                if offs is not None:
                    offs.pop(tp, None)
                    if not offs:
                        del self.offsets[k.group_id]
            else:
                self.offsets.setdefault(k.group_id, {})[tp] = r.decode_offset(value)
            return
        if not k.group_id:
            return  # the owner's fencing marker (see writer.py)
        if k.type == r.GROUP_METADATA_CLASSIC:
            if value is not None:
                self.groups.pop(k.group_id, None)
            self.classic.replay(k.group_id, cr.decode_value(value) if value is not None else None)
            return
        self._replay_group(k, value)

    def _replay_group(self, k: r.RecordKey, value: bytes | None) -> None:
        if k.type == r.GROUP_METADATA and value is None:
            self.groups.pop(k.group_id, None)
            return
        if k.type == r.GROUP_METADATA:
            self.classic.groups.pop(k.group_id, None)
        g = self.groups.setdefault(k.group_id, ConsumerGroup(k.group_id))
        if k.type == r.GROUP_METADATA:
            g.epoch, g.metadata_hash = r.decode_group_metadata(value)  # type: ignore[arg-type]
        elif k.type == r.TARGET_ASSIGNMENT_METADATA:
            g.target_epoch = r.decode_epoch(value) if value is not None else 0
        elif k.type == r.TARGET_ASSIGNMENT_MEMBER:
            if value is None:
                g.target.pop(k.member_id, None)
            else:
                g.target[k.member_id] = by_topic_name(r.decode_target_member(value), self.topic_names)
        elif k.type == r.MEMBER_METADATA:
            if value is None:
                g.members.pop(k.member_id, None)
            else:
                self._replay_member_metadata(g, k.member_id, r.decode_member(value))
        elif k.type == r.CURRENT_MEMBER_ASSIGNMENT and value is not None:
            v = r.decode_current(value)
            m = g.members.setdefault(k.member_id, Member(k.member_id))
            m.epoch, m.previous_epoch, m.state = v.member_epoch, v.previous_member_epoch, v.state
            m.assigned = by_topic_name(v.assigned, self.topic_names)
            m.pending_revocation = by_topic_name(v.pending_revocation, self.topic_names)

    @staticmethod
    def _replay_member_metadata(g: ConsumerGroup, member_id: str, v: r.MemberMetadataValue) -> None:
        m = g.members.setdefault(member_id, Member(member_id))
        m.instance_id, m.rack_id, m.client_id, m.client_host = v.instance_id, v.rack_id, v.client_id, v.client_host
        m.subscribed_topics, m.regex = list(v.subscribed_topic_names), v.subscribed_topic_regex
        m.rebalance_timeout_ms, m.assignor = v.rebalance_timeout_ms, v.server_assignor

    def loaded(self, now_ms: int) -> None:
        """After replay: every member gets a fresh session (as in Kafka), empty groups start their clock."""
        for g in self.groups.values():
            for m in g.members.values():
                m.session_deadline_ms = now_ms + self.config.session_timeout_ms
                if m.state == 1:  # UNREVOKED_PARTITIONS
                    m.revocation_deadline_ms = now_ms + m.rebalance_timeout_ms
            if not g.members:
                g.empty_since_ms = now_ms
        self.classic.loaded(now_ms)
