"""Everything one ``__consumer_offsets`` partition holds: its groups and their committed offsets. Pure.

Decide, then replay. A request is decided from the current state into records (``membership.py``
for consumer groups); state changes only by ``replay``-ing records, the one path that loading
uses too, so a live shard and a shard loaded from the same records cannot differ.

When records are replayed on the live path (Kafka replays them as it appends them to its in-memory
log, and reverts to the last committed snapshot if the write fails):

- group records (consumer groups, and the tombstones of classic groups) are replayed as soon as
  they are decided, before the write: the next request of the partition decides on top of them,
  so requests need not wait for each other's writes. A request is answered only once its own
  write is committed, and the partition's writes commit in order, so no answer depends on state
  that is not durable. The revert is the whole shard: a failed write unloads the partition (see
  ``writer.py``) and the next owner loads it from what was committed. Meanwhile a concurrent
  request sees the decided, not yet committed group state (as in Kafka), and read-only views
  (DescribeGroups, ListGroups) may show it a moment early;
- offset records are replayed once committed (``apply_offsets``, in write order), so OffsetFetch
  never returns an offset that is not durable (Kafka reads offsets at the committed snapshot); so are
  the records of transactions' pending offset commits (``pending_offsets.py``): a completion's
  committed offsets and the tombstones of its pending records become visible together;
- a classic group's GroupMetadata *value* is not replayed live: the classic state machine
  (``classic.py``) keeps state the record does not carry (the join and sync phases, parked
  requests), as Kafka's classic groups do (their records are appended without replay). On load
  the value gives the group, Stable or Empty.

Timers (session and rebalance deadlines, when a group became empty) are not state: the shard sets
them right after replaying a decision, as Kafka schedules its timers in the handlers.

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
from services.coordinator.group import (
    STATIC_LEAVE_EPOCH,
    UNREVOKED_PARTITIONS,
    ConsumerGroup,
    Member,
    fail,
)
from services.coordinator.membership import HeartbeatRequest, HeartbeatResult, Membership
from services.coordinator.pending_offsets import PendingOffsets, TxnOffsetCommit
from services.coordinator.record_builder import Rec, RecordBuilder, by_topic_name
from shared.errors import ErrorCode
from shared.types import TopicPartition

#: The first two key bytes (the int16 record type) of offset commits (and pending transactional
#: ones), replayed once committed; and of a classic group.
_OFFSET_TYPES = (r.encode_key(r.RecordKey(r.OFFSET_COMMIT, "", topic="", partition=0))[:2], b"\x00\x00",
                 r.PENDING_TXN_OFFSET.to_bytes(2, "big"))
_CLASSIC_TYPE = cr.encode_key("")[:2]


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
        self.racks: dict[TopicPartition, frozenset[str]] = {}  # partition -> replica racks (KIP-881)
        self.builder = RecordBuilder(self.topic_ids)
        self.pending = PendingOffsets(self.builder)
        self._decoded_keys: dict[bytes, r.RecordKey] = {}
        self.membership = Membership(config, self.topics, self.builder, new_member_id or (lambda: uuid.uuid4().hex),
                                     self.racks)
        self.classic = ClassicGroups(config, new_uuid or (lambda: str(uuid.uuid4())))

    # -- topic metadata -------------------------------------------------------------------------

    def set_topics(self, topics: Mapping[str, tuple[str, int]],
                   racks: Mapping[TopicPartition, frozenset[str]] | None = None) -> list[Rec]:
        """Topic name -> (topic id, partition count), and the partitions' replica racks for the
        rack-aware assignors. Returns epoch bumps for groups it affects."""
        self.racks.clear()
        self.racks.update(racks or {})
        self.topics.clear()
        self.topics.update({name: n for name, (_, n) in topics.items()})
        self.topic_ids.clear()
        self.topic_ids.update({name: tid for name, (tid, _) in topics.items()})
        self.topic_names.clear()
        self.topic_names.update({tid: name for name, tid in self.topic_ids.items()})
        recs: list[Rec] = []
        for g in list(self.groups.values()):
            decided = self.membership.metadata_changed(g)
            self._replay_decided(decided)
            recs.extend(decided)
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
            group = ConsumerGroup(req.group_id)  # a view to decide on: the records create the group
        decision = self.membership.heartbeat(group, req)
        recs = decision.records
        if classic is not None:  # an empty classic group becomes this consumer group
            recs = [self.classic.tombstone(req.group_id), *recs]
        epoch_before = group.epoch
        self._replay_decided(recs)
        g = self.groups[req.group_id]
        config = self.membership.config
        if created:
            g.created_ms = now_ms
        if g.epoch != epoch_before:
            g.epoch_changed_ms = now_ms
        if decision.left_with is not None:
            if not g.members:
                g.empty_since_ms = now_ms
            return HeartbeatResult(decision.member_id, decision.left_with, config.heartbeat_interval_ms, None), recs
        m = g.members[decision.member_id]
        m.session_deadline_ms = now_ms + config.session_timeout_ms
        if m.state != UNREVOKED_PARTITIONS:
            m.revocation_deadline_ms = None
        elif decision.revoking or m.revocation_deadline_ms is None:
            m.revocation_deadline_ms = now_ms + m.rebalance_timeout_ms
        g.empty_since_ms = None
        return HeartbeatResult(m.member_id, m.epoch, self.membership.interval_ms(g, now_ms), set(m.assigned)), recs

    def _replay_decided(self, recs: list[Rec]) -> None:
        """The live path's replay of a decision's records, before they are written: everything but
        offsets (replayed once committed, ``apply_offsets``) and classic group values (see the
        module's docstring)."""
        for key, value in recs:
            if key[:2] in _OFFSET_TYPES or (key[:2] == _CLASSIC_TYPE and value is not None):
                continue
            self.replay(key, value)

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
            tombstones = self.builder.group_tombstones(req.group_id)
            self._replay_decided(tombstones)
            decisions.records[:0] = tombstones
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
            gone = self.membership.expired(g, now_ms)
            if not gone:
                continue
            decided = self.membership.remove(g, gone)
            self._replay_decided(decided)
            recs.extend(decided)
            after = self.groups[g.group_id]
            after.epoch_changed_ms = now_ms
            if not after.members:
                after.empty_since_ms = now_ms
        for group_id, offs in self.offsets.items():
            g, cg = self.groups.get(group_id), self.classic.groups.get(group_id)
            if (g is not None and g.members) or (cg is not None and not cg.is_empty()):
                continue
            for tp, v in offs.items():
                if self.pending.has_pending(group_id, tp):
                    continue  # as Kafka: not expired while a transaction's commit of it is pending
                since = v.commit_timestamp
                if g is not None and g.empty_since_ms is not None:
                    since = g.empty_since_ms
                elif cg is not None and cg.protocol_type and cg.state_since_ms is not None:
                    since = cg.state_since_ms
                if now_ms - since >= self.config.offsets_retention_ms:
                    recs.append(self.builder.offset(group_id, tp, None))
        for group_id, cg in list(self.classic.groups.items()):  # empty classic groups with nothing committed
            if (cg.state == EMPTY and not cg.pending_members and group_id not in self.offsets
                    and group_id not in self.pending.by_group
                    and now_ms - (cg.state_since_ms if cg.state_since_ms is not None else now_ms)
                    >= self.config.offsets_retention_check_interval_ms):
                tombstone = self.classic.tombstone(group_id)
                self._replay_decided([tombstone])
                recs.append(tombstone)
        return recs

    def group_ids(self) -> list[str]:
        return sorted(set(self.groups) | set(self.classic.groups) | set(self.offsets) | self.pending.groups())

    def describe(self, group_id: str) -> ConsumerGroup | ClassicGroup | None:
        """The group (a consumer or a classic one); a group with only committed (or pending
        transactional) offsets shows as an empty consumer group."""
        classic = self.classic.groups.get(group_id)
        if classic is not None:
            return classic
        g = self.groups.get(group_id)
        if g is None and (group_id in self.offsets or group_id in self.pending.by_group):
            return ConsumerGroup(group_id)
        return g

    def delete_group(self, group_id: str) -> list[Rec]:
        classic = self.classic.groups.get(group_id)
        if classic is not None:
            if not classic.is_empty():
                raise fail(ErrorCode.NON_EMPTY_GROUP, f"group {group_id!r} is {classic.state} with "
                                                      f"{len(classic.members)} members")
            recs = self._offset_tombstones(group_id)
            recs.append(self.classic.tombstone(group_id))
            self._replay_decided(recs)
            return recs
        g = self.groups.get(group_id)
        if g is None and group_id not in self.offsets and group_id not in self.pending.by_group:
            raise fail(ErrorCode.GROUP_ID_NOT_FOUND, f"group {group_id!r} does not exist")
        if g is not None and g.members:
            raise fail(ErrorCode.NON_EMPTY_GROUP, f"group {group_id!r} has {len(g.members)} members")
        recs = self._offset_tombstones(group_id)
        if g is not None:
            recs.extend(self.builder.group_tombstones(group_id))
        self._replay_decided(recs)
        return recs

    def _offset_tombstones(self, group_id: str) -> list[Rec]:
        """A deleted group's committed offsets and pending transactional commits (Kafka's
        deleteAllOffsets deletes both; a transaction completing later finds nothing to commit)."""
        return ([self.builder.offset(group_id, tp, None) for tp in sorted(self.offsets.get(group_id, {}))]
                + self.pending.tombstones(group_id))

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
        """Replay the offset records among ``recs`` once they are committed (the others were replayed
        when they were decided)."""
        for key, value in recs:
            if key[:2] in _OFFSET_TYPES:
                self.replay(key, value)

    # -- transactional offsets (KIP-447; see pending_offsets.py) -------------------------------------

    def txn_commit_offsets(self, group_id: str, transactional_id: str, producer_id: int, producer_epoch: int,
                           member_id: str, instance_id: str | None, generation_id: int,
                           commits: Iterable[TxnOffsetCommit], now_ms: int) -> tuple[dict[TopicPartition, int], list[Rec]]:
        """TxnOffsetCommit: per-partition error codes and the pending records of the accepted commits.

        KIP-447: the member must be the group's current one at its current generation (member epoch
        for consumer groups), else ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID or FENCED_INSTANCE_ID;
        generation -1 without a member id is not checked (clients before KIP-447), as Kafka. A producer
        epoch below one of the producer's pending commits here is a fenced producer:
        INVALID_PRODUCER_EPOCH, as Kafka's log answers a transactional append of an older epoch."""
        if not group_id:
            raise fail(ErrorCode.INVALID_GROUP_ID, "group id is empty")
        if producer_id < 0 or producer_epoch < 0:
            raise fail(ErrorCode.INVALID_REQUEST, "a transactional offset commit needs a producer id and epoch")
        self._check_txn_member(group_id, member_id, instance_id, generation_id)
        known = self.pending.producer_epoch(producer_id)
        if known is not None and producer_epoch < known:
            raise fail(ErrorCode.INVALID_PRODUCER_EPOCH,
                       f"producer {producer_id} epoch {producer_epoch} is older than its epoch {known}")
        errors: dict[TopicPartition, int] = {}
        recs: list[Rec] = []
        for c in commits:
            if len(c.metadata.encode()) > self.config.offset_metadata_max_bytes:
                errors[c.tp] = ErrorCode.OFFSET_METADATA_TOO_LARGE
            elif c.offset < 0:
                errors[c.tp] = ErrorCode.INVALID_REQUEST
            else:
                errors[c.tp] = ErrorCode.NONE
                recs.append(self.pending.commit(group_id, transactional_id, producer_id, producer_epoch, c, now_ms))
        return errors, recs

    def _check_txn_member(self, group_id: str, member_id: str, instance_id: str | None, generation_id: int) -> None:
        classic = self.classic.groups.get(group_id)
        if classic is not None:
            classic.check_commit(member_id, instance_id, generation_id, transactional=True)
            return
        g = self.groups.get(group_id)
        if generation_id < 0 and not member_id:
            return  # Kafka's clients before KIP-447 send no member: not checked
        if g is None:
            if group_id in self.offsets or group_id in self.pending.by_group:
                raise fail(ErrorCode.UNKNOWN_MEMBER_ID, f"group {group_id!r} has no member {member_id!r}")
            raise fail(ErrorCode.ILLEGAL_GENERATION, f"group {group_id!r} does not exist")
        member = g.members.get(member_id)
        if member is None:
            raise fail(ErrorCode.UNKNOWN_MEMBER_ID, f"member {member_id!r} is not in group {group_id!r}")
        if instance_id is not None and member.instance_id != instance_id:
            raise fail(ErrorCode.FENCED_INSTANCE_ID,
                       f"member {member_id!r} of group {group_id!r} is not instance {instance_id!r}")
        if generation_id != member.epoch:
            raise fail(ErrorCode.ILLEGAL_GENERATION,
                       f"member epoch {generation_id}, member {member_id!r} is at {member.epoch}")

    def complete_txn_offsets(self, producer_id: int, producer_epoch: int, committed: bool,
                             transaction_version: int = 2, group_id: str | None = None) -> list[Rec]:
        """The transaction coordinator's outcome of the producer's transaction (its markers' epoch):
        the records that commit or drop its pending offsets here (of ``group_id``, or every group of
        the partition). Idempotent: nothing pending for it (an unknown producer, a retry) gives no
        records."""
        return self.pending.complete(producer_id, producer_epoch, committed, transaction_version, self.offsets,
                                     group_id)

    def unstable(self, group_id: str, tps: Iterable[TopicPartition]) -> set[TopicPartition]:
        """Of ``tps``, those with a transaction's commit pending (OffsetFetch with require_stable:
        UNSTABLE_OFFSET_COMMIT, KIP-447)."""
        return {tp for tp in tps if self.pending.has_pending(group_id, tp)}

    def fetch_offsets(self, group_id: str, tps: Iterable[TopicPartition] | None) -> dict[TopicPartition, r.OffsetValue | None]:
        offs = self.offsets.get(group_id, {})
        if tps is None:
            return dict(offs)
        return {tp: offs.get(tp) for tp in tps}

    def delete_offsets(self, group_id: str, tps: Iterable[TopicPartition]) -> tuple[dict[TopicPartition, int], list[Rec]]:
        g, classic = self.groups.get(group_id), self.classic.groups.get(group_id)
        if g is None and classic is None and group_id not in self.offsets and group_id not in self.pending.by_group:
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
            recs.extend(self.pending.tombstones(group_id, [tp]))  # as Kafka: pending commits go too
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
        if k.type == r.PENDING_TXN_OFFSET:
            self.pending.replay(k.group_id, TopicPartition(k.topic, k.partition), k.producer_id,
                                None if value is None else r.decode_pending_offset(value))
            return
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
        g = self.groups.get(k.group_id)
        if g is None:
            if value is None:
                return  # a tombstone of something already gone
            g = self.groups[k.group_id] = ConsumerGroup(k.group_id)
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
        elif k.type == r.CURRENT_MEMBER_ASSIGNMENT:
            if value is None:
                return  # the member itself goes with its MemberMetadata tombstone
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

    def dump(self) -> dict[str, object]:
        """The shard's state in a canonical form (no timers): equal for two shards that replayed the same
        records, whichever path they took. Classic groups are shown by the record they would write (equal
        when the live group is Stable or Empty: mid-rebalance it holds more than its last record)."""
        def tps(s: Iterable[TopicPartition]) -> list[tuple[str, int]]:
            return sorted((tp.topic, tp.partition) for tp in s)

        groups = {gid: {"epoch": g.epoch, "target_epoch": g.target_epoch, "metadata_hash": g.metadata_hash,
                        "target": {mid: tps(t) for mid, t in sorted(g.target.items())},
                        "members": {mid: (m.instance_id, m.rack_id, m.client_id, m.client_host,
                                          tuple(m.subscribed_topics), m.regex, m.rebalance_timeout_ms, m.assignor,
                                          m.epoch, m.previous_epoch, int(m.state), tps(m.assigned),
                                          tps(m.pending_revocation))
                                    for mid, m in sorted(g.members.items())}}
                  for gid, g in sorted(self.groups.items())}
        offsets = {gid: sorted(((tp.topic, tp.partition), v) for tp, v in offs.items())
                   for gid, offs in sorted(self.offsets.items())}
        classic = {gid: cr.group_record(g, {m.member_id: m.assignment for m in g.members.values()})
                   for gid, g in sorted(self.classic.groups.items())}
        return {"groups": groups, "offsets": offsets, "classic": classic, "pending": self.pending.dump()}

    def loaded(self, now_ms: int) -> None:
        """After replay: every member gets a fresh session (as in Kafka), empty groups start their clock."""
        for g in self.groups.values():
            for m in g.members.values():
                m.session_deadline_ms = now_ms + self.config.session_timeout_ms
                if m.state == UNREVOKED_PARTITIONS:
                    m.revocation_deadline_ms = now_ms + m.rebalance_timeout_ms
            if not g.members:
                g.empty_since_ms = now_ms
        self.classic.loaded(now_ms)
