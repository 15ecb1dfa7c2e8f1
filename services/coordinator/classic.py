"""The classic group protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, static members) on one
``__consumer_offsets`` partition's classic groups. Pure: ``now_ms`` is passed in, member ids come
from an injected ``new_uuid``.

JoinGroup and SyncGroup are long polls. A call answers at once (a response) or *parks* the request
(a ticket number); either way it returns ``Decisions``: the records to write to
``__consumer_offsets`` and the responses of parked requests that this call completed (including,
possibly, its own). Timers (session expiry, the join phase's deadline, the initial rebalance delay,
members that never send SyncGroup) are deadlines the caller drives through ``expire``. The service
layer only writes the records, waits until they are committed and delivers the responses. Every
ticket handed out is answered exactly once (by a decision, or by the service layer failing all of
a partition's tickets when it unloads the partition).

The rules are Kafka's (``GroupMetadataManager``'s classic* methods); the transitions are the
table in ``classic_group.py``.
"""

from __future__ import annotations

from collections.abc import Callable

from services.coordinator import classic_records as cr
from services.coordinator.classic_group import (
    COMPLETING_REBALANCE,
    DEAD,
    EMPTY,
    PREPARING_REBALANCE,
    STABLE,
    ClassicGroup,
    ClassicMember,
)
from services.coordinator.classic_messages import (
    MEMBER_ID_REQUIRED_VERSION,
    SKIP_ASSIGNMENT_VERSION,
    Decisions,
    JoinedMember,
    JoinRequest,
    JoinResponse,
    LeaveMember,
    SyncRequest,
    SyncResponse,
)
from services.coordinator.config import GroupConfig
from services.coordinator.record_builder import Rec
from shared.errors import ErrorCode


class _Op:
    """One call: its time and the decisions it accumulates."""

    def __init__(self, now_ms: int) -> None:
        self.now = now_ms
        self.d = Decisions()


class ClassicGroups:
    def __init__(self, config: GroupConfig, new_uuid: Callable[[], str]) -> None:
        self.config = config
        self.new_uuid = new_uuid
        self.groups: dict[str, ClassicGroup] = {}
        self._tickets = 0

    def _ticket(self) -> int:
        self._tickets += 1
        return self._tickets

    # -- JoinGroup ----------------------------------------------------------------------------------

    def join(self, req: JoinRequest, now_ms: int) -> tuple[JoinResponse | int, Decisions]:
        """Session timeout and group type are checked by the shard first."""
        op = _Op(now_ms)
        names = [name for name, _ in req.protocols]
        if len(set(names)) != len(names):
            return JoinResponse(ErrorCode.INVALID_REQUEST, req.member_id, message="a protocol is listed twice"), op.d
        group = self.groups.get(req.group_id)
        created = group is None
        if group is None:
            if req.member_id:
                return JoinResponse(ErrorCode.UNKNOWN_MEMBER_ID, req.member_id,
                                    message=f"group {req.group_id!r} does not exist"), op.d
            group = self.groups[req.group_id] = ClassicGroup(req.group_id, state_since_ms=now_ms)
        answer = self._join(group, req, op)
        if created and not op.d.records:
            op.d.records.append(self.record(group))  # the group exists from now on
        return answer, op.d

    def _join(self, group: ClassicGroup, req: JoinRequest, op: _Op) -> JoinResponse | int:
        if not self._accepts(group, req.member_id):
            self._remove(group, req.member_id, op)
            return JoinResponse(ErrorCode.GROUP_MAX_SIZE_REACHED,
                                message=f"group {group.group_id} has {self.config.classic_max_size} members")
        if group.state == DEAD:
            return JoinResponse(ErrorCode.COORDINATOR_NOT_AVAILABLE, req.member_id)
        if not group.supports(req.protocol_type, [name for name, _ in req.protocols]):
            return JoinResponse(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, req.member_id,
                                message=f"protocol type {req.protocol_type!r} / protocols {[n for n, _ in req.protocols]} "
                                        f"do not match group {group.group_id}'s")
        if not req.member_id:
            return self._join_new(group, req, op)
        return self._join_existing(group, req, op)

    def _accepts(self, group: ClassicGroup, member_id: str) -> bool:
        """group.max.size: while preparing, count the members that rejoined (the rest may be dropped)."""
        member = group.members.get(member_id) if member_id else None
        if group.state in (EMPTY, DEAD):
            return True
        if group.state == PREPARING_REBALANCE:
            return (member is not None and member.awaiting_join) or group.awaiting_join_count() < self.config.classic_max_size
        return member is not None or len(group.members) < self.config.classic_max_size

    def _join_new(self, group: ClassicGroup, req: JoinRequest, op: _Op) -> JoinResponse | int:
        member_id = f"{req.instance_id or req.client_id}-{self.new_uuid()}"
        if req.instance_id is not None:
            old = group.static_members.get(req.instance_id)
            if old is not None:
                return self._replace_static(group, req, old, member_id, op)
            return self._add_member(group, req, member_id, op)
        if req.api_version >= MEMBER_ID_REQUIRED_VERSION:
            group.pending_members[member_id] = op.now + req.session_timeout_ms
            return JoinResponse(ErrorCode.MEMBER_ID_REQUIRED, member_id,
                                message="join again with the member id given")
        return self._add_member(group, req, member_id, op)

    def _join_existing(self, group: ClassicGroup, req: JoinRequest, op: _Op) -> JoinResponse | int:
        if req.member_id in group.pending_members:
            if req.instance_id is not None:
                return JoinResponse(ErrorCode.INVALID_REQUEST, req.member_id,
                                    message="a member id given with MEMBER_ID_REQUIRED is not a static member's")
            return self._add_member(group, req, req.member_id, op)
        error = group.member_error(req.member_id, req.instance_id)
        if error is not None:
            return JoinResponse(error, req.member_id, message=f"member {req.member_id!r} of group {group.group_id}")
        member = group.members[req.member_id]
        if group.state == PREPARING_REBALANCE:
            return self._update_and_rebalance(group, member, req, op)
        if group.state == COMPLETING_REBALANCE:
            if member.matches(req.protocols):  # the JoinGroup response was lost: the same answer again
                return self._generation_answer(group, member.member_id, with_members=group.leader_id == member.member_id)
            return self._update_and_rebalance(group, member, req, op)
        if group.state == STABLE:
            if group.leader_id == member.member_id or not member.matches(req.protocols):
                return self._update_and_rebalance(group, member, req, op)
            return self._generation_answer(group, member.member_id, with_members=False)
        return JoinResponse(ErrorCode.UNKNOWN_MEMBER_ID, req.member_id, message=f"group {group.group_id} is {group.state}")

    def _add_member(self, group: ClassicGroup, req: JoinRequest, member_id: str, op: _Op) -> int:
        member = ClassicMember(member_id, req.instance_id, req.client_id, req.client_host,
                               req.rebalance_timeout_ms, req.session_timeout_ms, req.protocol_type, list(req.protocols),
                               is_new=True)
        if group.state == PREPARING_REBALANCE and group.previous_state == EMPTY:
            group.new_member_added = True  # the initial rebalance waits a little longer
        group.add(member)
        ticket = self._park_join(member, op)
        member.heartbeat_deadline_ms = op.now + self.config.classic_new_member_join_timeout_ms
        self._rebalance_or_complete_join(group, op)
        return ticket

    def _update_and_rebalance(self, group: ClassicGroup, member: ClassicMember, req: JoinRequest, op: _Op) -> int:
        member.protocols = list(req.protocols)
        member.rebalance_timeout_ms, member.session_timeout_ms = req.rebalance_timeout_ms, req.session_timeout_ms
        ticket = self._park_join(member, op)
        self._rebalance_or_complete_join(group, op)
        return ticket

    def _replace_static(self, group: ClassicGroup, req: JoinRequest, old_id: str, new_id: str, op: _Op) -> int:
        """A known group.instance.id joins without a member id: it takes the old member's place and the
        old id is fenced. In a Stable group nothing moves unless the group's protocol would change."""
        old = group.members[old_id]
        leader_before = group.leader_id or ""
        self._answer_join(old, JoinResponse(ErrorCode.FENCED_INSTANCE_ID, old_id,
                                            message=f"instance {req.instance_id!r} joined again as {new_id}"), op)
        self._answer_sync(old, SyncResponse(ErrorCode.FENCED_INSTANCE_ID), op)
        assert req.instance_id is not None
        member = group.replace_static(req.instance_id, old_id, new_id)
        member.heartbeat_deadline_ms = op.now + member.session_timeout_ms
        member.protocols = list(req.protocols)
        member.rebalance_timeout_ms, member.session_timeout_ms = req.rebalance_timeout_ms, req.session_timeout_ms
        ticket = self._park_join(member, op)
        if group.state == STABLE:
            if group.select_protocol() == group.protocol_name:
                op.d.records.append(self.record(group, {m.member_id: m.assignment for m in group.members.values()}))
                if req.api_version >= SKIP_ASSIGNMENT_VERSION:
                    leads = group.leader_id == new_id
                    answer = self._generation_answer(group, new_id, with_members=leads, skip_assignment=leads)
                else:  # an old client must not believe it leads: it would assign again
                    answer = JoinResponse(ErrorCode.NONE, new_id, group.generation, group.protocol_type,
                                          group.protocol_name, leader_before)
                self._answer_join(member, answer, op)
            else:
                self._rebalance_or_complete_join(group, op)
        elif group.state == COMPLETING_REBALANCE:
            self._prepare_rebalance(group, op)  # the leader may have assigned to the old id
        else:
            self._maybe_complete_join(group, op)
        return ticket

    def _generation_answer(self, group: ClassicGroup, member_id: str, with_members: bool,
                           skip_assignment: bool = False) -> JoinResponse:
        members = tuple(JoinedMember(m.member_id, m.instance_id, m.metadata(group.protocol_name))
                        for m in group.members.values()) if with_members else ()
        return JoinResponse(ErrorCode.NONE, member_id, group.generation, group.protocol_type, group.protocol_name,
                            group.leader_id or "", skip_assignment, members)

    # -- the join phase -----------------------------------------------------------------------------

    def _rebalance_or_complete_join(self, group: ClassicGroup, op: _Op) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, op)
        else:
            self._maybe_complete_join(group, op)

    def _prepare_rebalance(self, group: ClassicGroup, op: _Op) -> None:
        if group.state == COMPLETING_REBALANCE:  # parked SyncGroups: rejoin
            for m in group.members.values():
                m.assignment = b""
            self._propagate(group, ErrorCode.REBALANCE_IN_PROGRESS, op)
        group.pending_sync.clear()
        group.sync_deadline_ms = None
        initial = group.state == EMPTY
        group.transition(PREPARING_REBALANCE, op.now)
        if initial:  # give the other members of a new group time to join
            delay = self.config.classic_initial_rebalance_delay_ms
            group.join_deadline_ms = op.now + delay
            group.initial_delay = (delay, max(group.rebalance_timeout_ms() - delay, 0))
            group.new_member_added = False
        elif group.has_all_joined():
            self._complete_join(group, op)
        else:
            group.join_deadline_ms, group.initial_delay = op.now + group.rebalance_timeout_ms(), None

    def _maybe_complete_join(self, group: ClassicGroup, op: _Op) -> None:
        if group.state == PREPARING_REBALANCE and group.previous_state != EMPTY and group.has_all_joined():
            self._complete_join(group, op)

    def _complete_join(self, group: ClassicGroup, op: _Op) -> None:
        """End the join phase: drop dynamic members that did not rejoin, start the next generation and
        answer every parked JoinGroup (the leader gets the members' metadata)."""
        group.join_deadline_ms, group.initial_delay = None, None
        for m in [m for m in group.members.values() if not m.awaiting_join and m.instance_id is None]:
            self._remove(group, m.member_id, op)
        if group.state == DEAD:
            return
        if group.members and not self._elect_joined_leader(group):
            group.join_deadline_ms = op.now + group.rebalance_timeout_ms()  # no one rejoined: wait for sessions to end
            return
        group.next_generation(op.now)
        if group.state == EMPTY:
            op.d.records.append(self.record(group))
            return
        for m in group.members.values():
            self._answer_join(m, self._generation_answer(group, m.member_id, with_members=group.leader_id == m.member_id), op)
            m.heartbeat_deadline_ms = op.now + m.session_timeout_ms
            m.is_new = False
            group.pending_sync.add(m.member_id)
        group.sync_deadline_ms = op.now + group.rebalance_timeout_ms()
        group.sync_generation = group.generation

    @staticmethod
    def _elect_joined_leader(group: ClassicGroup) -> bool:
        """The leader must be a member that rejoined: keep it, or take the earliest one that did."""
        leader = group.members.get(group.leader_id or "")
        if leader is not None and leader.awaiting_join:
            return True
        joined = next((m for m in group.members.values() if m.awaiting_join), None)
        if joined is None:
            return False
        group.leader_id = joined.member_id
        return True

    # -- SyncGroup ----------------------------------------------------------------------------------

    def sync(self, req: SyncRequest, now_ms: int) -> tuple[SyncResponse | int, Decisions]:
        op = _Op(now_ms)
        group = self.groups.get(req.group_id)
        if group is None or group.state == EMPTY:
            return SyncResponse(ErrorCode.UNKNOWN_MEMBER_ID, message=f"group {req.group_id!r} has no members"), op.d
        if group.state == DEAD:
            return SyncResponse(ErrorCode.COORDINATOR_NOT_AVAILABLE), op.d
        error = group.member_error(req.member_id, req.instance_id)
        if error is not None:
            return SyncResponse(error, message=f"member {req.member_id!r} of group {group.group_id}"), op.d
        if req.generation_id != group.generation:
            return SyncResponse(ErrorCode.ILLEGAL_GENERATION,
                                message=f"generation {req.generation_id}, the group's is {group.generation}"), op.d
        if _differs(req.protocol_type, group.protocol_type) or _differs(req.protocol_name, group.protocol_name):
            return SyncResponse(ErrorCode.INCONSISTENT_GROUP_PROTOCOL), op.d
        if group.state == PREPARING_REBALANCE:
            return SyncResponse(ErrorCode.REBALANCE_IN_PROGRESS), op.d
        member = group.members[req.member_id]
        self._synced(group, member.member_id)
        if group.state == STABLE:
            return SyncResponse(ErrorCode.NONE, group.protocol_type, group.protocol_name, member.assignment), op.d
        ticket = self._ticket()  # CompletingRebalance: wait for the leader's assignment
        if member.sync_ticket is not None:
            op.d.syncs[member.sync_ticket] = SyncResponse(ErrorCode.REBALANCE_IN_PROGRESS, message="superseded")
        member.sync_ticket = ticket
        if group.leader_id == member.member_id:
            assignment = {mid: req.assignments.get(mid, b"") for mid in group.members}
            group.transition(STABLE, op.now)  # first: the record carries the time the group became Stable
            op.d.records.append(self.record(group, assignment))
            for mid, m in group.members.items():
                m.assignment = assignment[mid]
            self._propagate(group, ErrorCode.NONE, op)
        return ticket, op.d

    def _synced(self, group: ClassicGroup, member_id: str) -> None:
        group.pending_sync.discard(member_id)
        if not group.pending_sync:
            group.sync_deadline_ms = None

    def _propagate(self, group: ClassicGroup, error: ErrorCode, op: _Op) -> None:
        """Answer every parked SyncGroup with the member's assignment (or the error)."""
        ok = error == ErrorCode.NONE
        for m in group.members.values():
            if m.sync_ticket is not None:
                self._answer_sync(m, SyncResponse(error, group.protocol_type if ok else None,
                                                  group.protocol_name if ok else None, m.assignment), op)
                m.heartbeat_deadline_ms = op.now + m.session_timeout_ms

    # -- Heartbeat, LeaveGroup ----------------------------------------------------------------------

    def heartbeat(self, group_id: str, member_id: str, instance_id: str | None, generation_id: int,
                  now_ms: int) -> ErrorCode:
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.state == DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        error = group.member_error(member_id, instance_id)
        if error is not None:
            return error
        if generation_id != group.generation:
            return ErrorCode.ILLEGAL_GENERATION
        if group.state == EMPTY:
            return ErrorCode.UNKNOWN_MEMBER_ID
        member = group.members[member_id]
        member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
        return ErrorCode.REBALANCE_IN_PROGRESS if group.state == PREPARING_REBALANCE else ErrorCode.NONE

    def leave(self, group_id: str, leaving: list[LeaveMember],
              now_ms: int) -> tuple[ErrorCode, list[ErrorCode], Decisions]:
        """LeaveGroup v3+: per-member codes; a static member may be named by its instance id alone."""
        op = _Op(now_ms)
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID, [], op.d
        if group.state == DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, [], op.d
        codes: list[ErrorCode] = []
        for lm in leaving:
            if not lm.member_id:
                current = group.static_members.get(lm.instance_id) if lm.instance_id is not None else None
                if current is None:
                    codes.append(ErrorCode.UNKNOWN_MEMBER_ID)
                    continue
                self._remove(group, current, op)
            elif lm.member_id in group.pending_members:
                group.remove(lm.member_id)
            else:
                error = group.member_error(lm.member_id, lm.instance_id)
                if error is not None:
                    codes.append(error)
                    continue
                self._remove(group, lm.member_id, op)
            codes.append(ErrorCode.NONE)
        if ErrorCode.NONE in codes:
            if group.state in (STABLE, COMPLETING_REBALANCE):
                self._rebalance_or_complete_join(group, op)
            elif group.state == PREPARING_REBALANCE:
                self._maybe_complete_join(group, op)
        return ErrorCode.NONE, codes, op.d

    def _remove(self, group: ClassicGroup, member_id: str, op: _Op) -> None:
        """Remove a member, answering its parked requests (UNKNOWN_MEMBER_ID: a live client joins again)."""
        member = group.members.get(member_id)
        if member is not None:
            self._answer_join(member, JoinResponse(ErrorCode.UNKNOWN_MEMBER_ID, message="removed from the group"), op)
            self._answer_sync(member, SyncResponse(ErrorCode.UNKNOWN_MEMBER_ID, message="removed from the group"), op)
        group.remove(member_id)

    # -- timers ------------------------------------------------------------------------------------

    def next_deadline_ms(self) -> int | None:
        return min((d for g in self.groups.values() if (d := g.next_deadline_ms()) is not None), default=None)

    def expire(self, now_ms: int) -> Decisions:
        """Everything due by ``now_ms``: sessions, forgotten pending members, join and sync phases."""
        op = _Op(now_ms)
        for group in list(self.groups.values()):
            self._expire(group, op)
        return op.d

    def _expire(self, group: ClassicGroup, op: _Op) -> None:
        for member_id, deadline in list(group.pending_members.items()):
            if deadline <= op.now:
                group.remove(member_id)
                if group.state == PREPARING_REBALANCE and group.has_all_joined():
                    self._complete_join(group, op)
        for member_id in list(group.members):
            m = group.members.get(member_id)
            if m is None or m.heartbeat_deadline_ms is None or m.heartbeat_deadline_ms > op.now:
                continue
            if m.satisfied_heartbeat():
                m.heartbeat_deadline_ms = None  # due again once its rebalance completes
                continue
            self._remove(group, member_id, op)
            if group.state in (STABLE, COMPLETING_REBALANCE):
                self._rebalance_or_complete_join(group, op)
            elif group.state == PREPARING_REBALANCE and group.has_all_joined():
                self._complete_join(group, op)
        while group.join_deadline_ms is not None and group.join_deadline_ms <= op.now:
            self._join_deadline(group, op)  # an extended initial delay may be due already
        if group.sync_deadline_ms is not None and group.sync_deadline_ms <= op.now:
            group.sync_deadline_ms = None
            missing = list(group.pending_sync)
            if group.sync_generation == group.generation and group.state in (COMPLETING_REBALANCE, STABLE) and missing:
                for member_id in missing:
                    self._remove(group, member_id, op)
                self._prepare_rebalance(group, op)

    def _join_deadline(self, group: ClassicGroup, op: _Op) -> None:
        """The join phase's deadline: extend the initial rebalance's delay if a member joined during it
        (never past the rebalance timeout), else end the join phase."""
        if group.state != PREPARING_REBALANCE:
            group.join_deadline_ms, group.initial_delay = None, None
            return
        if group.initial_delay is not None and group.new_member_added and group.initial_delay[1] > 0:
            delay, remaining = group.initial_delay
            group.new_member_added = False
            next_delay = min(self.config.classic_initial_rebalance_delay_ms, remaining)
            assert group.join_deadline_ms is not None
            group.join_deadline_ms += next_delay
            group.initial_delay = (next_delay, max(remaining - delay, 0))
            if next_delay > 0:
                return
        self._complete_join(group, op)

    # -- tickets ----------------------------------------------------------------------------------

    def _park_join(self, member: ClassicMember, op: _Op) -> int:
        if member.join_ticket is not None:  # a retried JoinGroup replaces the one still parked
            op.d.joins[member.join_ticket] = JoinResponse(ErrorCode.REBALANCE_IN_PROGRESS, member.member_id,
                                                          message="superseded by a newer JoinGroup")
        member.join_ticket = self._ticket()
        return member.join_ticket

    @staticmethod
    def _answer_join(member: ClassicMember, response: JoinResponse, op: _Op) -> None:
        if member.join_ticket is not None:
            op.d.joins[member.join_ticket] = response
            member.join_ticket = None

    @staticmethod
    def _answer_sync(member: ClassicMember, response: SyncResponse, op: _Op) -> None:
        if member.sync_ticket is not None:
            op.d.syncs[member.sync_ticket] = response
            member.sync_ticket = None

    # -- records, loading ---------------------------------------------------------------------------

    def record(self, group: ClassicGroup, assignment: dict[str, bytes] | None = None) -> Rec:
        return cr.group_record(group, assignment)

    @staticmethod
    def tombstone(group_id: str) -> Rec:
        return cr.encode_key(group_id), None

    def replay(self, group_id: str, value: cr.GroupMetadataValue | None) -> None:
        """Load a group from its last record: Stable with its members, or Empty."""
        if value is None:
            self.groups.pop(group_id, None)
        else:
            self.groups[group_id] = cr.group_from_value(group_id, value)

    def loaded(self, now_ms: int) -> None:
        """After loading: every member gets a fresh session, as in Kafka; an Empty group's clock starts
        now if its record had no timestamp."""
        for group in self.groups.values():
            if group.state_since_ms is None:
                group.state_since_ms = now_ms
            for m in group.members.values():
                m.heartbeat_deadline_ms = now_ms + m.session_timeout_ms


def _differs(requested: str | None, current: str | None) -> bool:
    return bool(requested) and current is not None and requested != current
