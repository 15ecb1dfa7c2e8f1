"""One classic group (JoinGroup/SyncGroup protocol): states, members, protocols, generation. Pure.

The state machine's *data*: what a group holds and the questions it answers (which protocol all
members support, who leads, whether everyone rejoined). The decisions that move it between states
live in ``classic.py``. No gRPC, asyncio or clock: deadlines are plain millisecond numbers set by
the caller.

A member's parked request (a JoinGroup or SyncGroup waiting for the rebalance to progress) is
only a *ticket* number here; ``classic.py`` answers tickets through its decisions and the service
layer delivers them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from services.coordinator.group import fail
from shared.errors import ErrorCode

EMPTY = "Empty"
PREPARING_REBALANCE = "PreparingRebalance"
COMPLETING_REBALANCE = "CompletingRebalance"
STABLE = "Stable"
DEAD = "Dead"

#: Kafka's transitions, as data: a state and the states it may be entered from.
ENTERED_FROM: dict[str, frozenset[str]] = {
    EMPTY: frozenset({PREPARING_REBALANCE}),
    PREPARING_REBALANCE: frozenset({STABLE, COMPLETING_REBALANCE, EMPTY}),
    COMPLETING_REBALANCE: frozenset({PREPARING_REBALANCE}),
    STABLE: frozenset({COMPLETING_REBALANCE}),
    DEAD: frozenset({STABLE, PREPARING_REBALANCE, COMPLETING_REBALANCE, EMPTY, DEAD}),
}

Protocol = tuple[str, bytes]  # (name, metadata)


class IllegalTransition(RuntimeError):
    """A bug: the state machine tried a transition Kafka's table does not allow."""


@dataclass
class ClassicMember:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[Protocol]
    assignment: bytes = b""
    #: joined since the last completed join phase (may be dropped even while parked in JoinGroup)
    is_new: bool = False
    join_ticket: int | None = None  # a parked JoinGroup
    sync_ticket: int | None = None  # a parked SyncGroup
    #: when the member is removed unless it heartbeats (None: no deadline while it waits on a rebalance)
    heartbeat_deadline_ms: int | None = None

    @property
    def awaiting_join(self) -> bool:
        return self.join_ticket is not None

    def metadata(self, protocol: str | None) -> bytes:
        return next((meta for name, meta in self.protocols if name == protocol), b"")

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def matches(self, protocols: list[Protocol]) -> bool:
        return list(protocols) == list(self.protocols)

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among ``candidates``."""
        return next(name for name, _ in self.protocols if name in candidates)

    def satisfied_heartbeat(self) -> bool:
        """A member waiting on the rebalance (parked JoinGroup or SyncGroup) needs no heartbeat, unless
        it is new (a new member that gave up must not hold the rebalance forever)."""
        return not self.is_new and (self.join_ticket is not None or self.sync_ticket is not None)


@dataclass
class ClassicGroup:
    group_id: str
    state: str = EMPTY
    previous_state: str | None = None
    state_since_ms: int | None = None
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, ClassicMember] = field(default_factory=dict)  # in joining order
    static_members: dict[str, str] = field(default_factory=dict)  # group.instance.id -> member id
    #: member ids handed out with MEMBER_ID_REQUIRED, not joined yet -> when they are forgotten
    pending_members: dict[str, int] = field(default_factory=dict)
    pending_sync: set[str] = field(default_factory=set)  # members that have not sent SyncGroup yet
    #: a member joined during the initial rebalance's delay, which is then extended
    new_member_added: bool = False
    join_deadline_ms: int | None = None
    #: (delay, remaining) while the join deadline is the initial rebalance's delay
    initial_delay: tuple[int, int] | None = None
    sync_deadline_ms: int | None = None
    sync_generation: int = -1

    # -- views ------------------------------------------------------------------------------------

    @property
    def epoch(self) -> int:
        """The generation, under the name metrics and views use for a consumer group's epoch."""
        return self.generation

    def is_empty(self) -> bool:
        return self.state in (EMPTY, DEAD)

    def can_rebalance(self) -> bool:
        return self.state in ENTERED_FROM[PREPARING_REBALANCE]

    def has_all_joined(self) -> bool:
        return not self.pending_members and all(m.awaiting_join for m in self.members.values())

    def awaiting_join_count(self) -> int:
        return sum(1 for m in self.members.values() if m.awaiting_join)

    def rebalance_timeout_ms(self) -> int:
        """The longest rebalance timeout of the members: how long a join or sync phase may last."""
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def supports(self, protocol_type: str, names: list[str]) -> bool:
        """Whether a member offering ``names`` of ``protocol_type`` can join: an empty group takes any
        non-empty offer; otherwise the type must match and one offered protocol be supported by all."""
        if self.state == EMPTY:
            return bool(protocol_type) and bool(names)
        return protocol_type == self.protocol_type and bool(set(names) & self.candidate_protocols())

    def candidate_protocols(self) -> set[str]:
        """The protocols every member supports."""
        sets = [set(m.protocol_names()) for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def select_protocol(self) -> str:
        """Kafka's vote: each member votes for its most preferred protocol that all members support; the
        most votes wins (a tie goes to the protocol the earliest member prefers)."""
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for m in self.members.values():
            choice = m.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        best = max(votes.values())
        first = next(iter(self.members.values()))
        return next(name for name in first.protocol_names() if votes.get(name) == best)

    def member_error(self, member_id: str, instance_id: str | None) -> ErrorCode | None:
        """Kafka's validateMember: a static member must be the instance id's current member id
        (FENCED_INSTANCE_ID otherwise), and the member must exist (UNKNOWN_MEMBER_ID)."""
        if instance_id is not None:
            current = self.static_members.get(instance_id)
            if current is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if current != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
        if member_id not in self.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return None

    def check_commit(self, member_id: str, instance_id: str | None, generation_id: int,
                     transactional: bool = False) -> None:
        """Kafka's validateOffsetCommit: raises the refusal. Generation -1 without a member commits only
        to an Empty group (admin tools, consumers outside group management) -- or, ``transactional``
        (TxnOffsetCommit, whose versions before KIP-447 carry no member), to any group; transactional
        commits are not refused during a rebalance (Kafka does not enforce the state for them)."""
        if self.state == DEAD:
            raise fail(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"group {self.group_id} is being removed")
        if generation_id < 0 and self.state == EMPTY:
            return
        if generation_id >= 0 or member_id or instance_id is not None:
            error = self.member_error(member_id, instance_id)
            if error is not None:
                raise fail(error, f"member {member_id!r} of group {self.group_id}")
            if generation_id != self.generation:
                raise fail(ErrorCode.ILLEGAL_GENERATION,
                           f"generation {generation_id}, group {self.group_id} is at {self.generation}")
        elif self.state != EMPTY and not transactional:
            raise fail(ErrorCode.UNKNOWN_MEMBER_ID, f"group {self.group_id!r} has members; commit as one of them")
        if self.state == COMPLETING_REBALANCE and not transactional:
            raise fail(ErrorCode.REBALANCE_IN_PROGRESS, f"group {self.group_id} is completing a rebalance")

    def next_deadline_ms(self) -> int | None:
        deadlines = [d for d in (self.join_deadline_ms, self.sync_deadline_ms) if d is not None]
        deadlines += self.pending_members.values()
        deadlines += [m.heartbeat_deadline_ms for m in self.members.values() if m.heartbeat_deadline_ms is not None]
        return min(deadlines, default=None)

    # -- changes ----------------------------------------------------------------------------------

    def transition(self, state: str, now_ms: int) -> None:
        if self.state not in ENTERED_FROM[state]:
            raise IllegalTransition(f"group {self.group_id}: {self.state} -> {state}")
        self.previous_state, self.state, self.state_since_ms = self.state, state, now_ms

    def add(self, member: ClassicMember) -> None:
        """A new member; the first one sets the group's protocol type and becomes the leader."""
        if member.instance_id is not None:
            if member.instance_id in self.static_members:
                raise fail(ErrorCode.UNKNOWN_SERVER_ERROR, f"instance id {member.instance_id!r} is already a member")
            self.static_members[member.instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self.pending_members.pop(member.member_id, None)

    def remove(self, member_id: str) -> ClassicMember | None:
        """Drop a member (or a pending one); the earliest remaining member leads if it led."""
        member = self.members.pop(member_id, None)
        if member is not None and member.instance_id is not None:
            self.static_members.pop(member.instance_id, None)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        self.pending_members.pop(member_id, None)
        self.pending_sync.discard(member_id)
        return member

    def replace_static(self, instance_id: str, old_id: str, new_id: str) -> ClassicMember:
        """A static member back with a new member id: same place, protocols and assignment."""
        old = self.members[old_id]
        new = ClassicMember(new_id, instance_id, old.client_id, old.client_host, old.rebalance_timeout_ms,
                            old.session_timeout_ms, old.protocol_type, list(old.protocols), old.assignment)
        self.members = {(new_id if mid == old_id else mid): (new if mid == old_id else m)
                        for mid, m in self.members.items()}
        if self.leader_id == old_id:
            self.leader_id = new_id
        if old_id in self.pending_sync:
            self.pending_sync.discard(old_id)
            self.pending_sync.add(new_id)
        self.static_members[instance_id] = new_id
        return new

    def next_generation(self, now_ms: int) -> None:
        """The join phase is over: bump the generation, pick the protocol, wait for SyncGroup (or be Empty)."""
        self.generation += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.transition(COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.transition(EMPTY, now_ms)
        self.pending_sync.clear()
