"""One consumer group of the KIP-848 protocol: members, epochs, target assignment. Pure.

State (as Kafka's ``ConsumerGroup``): the *group epoch* is bumped whenever the
membership or a subscription (or the subscribed topics' metadata) changes; the
*target assignment* is computed by the assignor for a group epoch and carries
that epoch (the *assignment epoch*); each member has its own *member epoch* and
*current assignment*, which converge on the target by reconciliation (revoke
before assign: ``next_assignment``, whose moves are the table ``MEMBER_TRANSITIONS``).
Static members (``group.instance.id``) that leave with epoch -2 keep their
partitions reserved until their session expires.

Nothing here changes a group: the decisions (``membership.py``) compute records
from these values, and only ``GroupShard.replay`` applies records to them. The
timer fields (deadlines, ``empty_since_ms``, ``epoch_changed_ms``, ``created_ms``)
are not state: they are in memory only, set by the shard when it decides, as
Kafka's timers are.

No gRPC, etcd or asyncio here, and no clock: callers pass ``now_ms``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum, StrEnum

from services.coordinator.assignors import ASSIGNORS, DEFAULT_ASSIGNOR, AssignmentMember, PartitionRacks
from services.coordinator.records import MemberState
from shared.errors import ErrorCode, GroupError
from shared.types import TopicPartition

LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2

STABLE = MemberState.STABLE
UNREVOKED_PARTITIONS = MemberState.UNREVOKED_PARTITIONS
UNRELEASED_PARTITIONS = MemberState.UNRELEASED_PARTITIONS
UNKNOWN = MemberState.UNKNOWN
STATE_NAMES = {s: s.name for s in MemberState}


class GroupState(StrEnum):
    """Kafka's consumer group states (derived from the members, never written)."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"


def fail(code: ErrorCode, message: str) -> GroupError:
    return GroupError(message, code=code)


class IllegalTransition(RuntimeError):
    """A bug: a member move that ``MEMBER_TRANSITIONS`` does not allow."""


@dataclass
class Member:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topics: list[str] = field(default_factory=list)
    regex: str | None = None
    rebalance_timeout_ms: int = 300_000
    assignor: str | None = None
    epoch: int = 0
    previous_epoch: int = -1
    state: MemberState = STABLE
    assigned: set[TopicPartition] = field(default_factory=set)
    pending_revocation: set[TopicPartition] = field(default_factory=set)
    # -- timers (in memory only; see the module's docstring) --
    session_deadline_ms: int = 0
    revocation_deadline_ms: int | None = None

    def subscription(self, topics: Mapping[str, int]) -> frozenset[str]:
        """Topic names plus the existing non-internal topics the regex fully matches."""
        subs = set(self.subscribed_topics)
        if self.regex:
            pattern = re.compile(self.regex)
            subs.update(t for t in topics if not t.startswith("__") and pattern.fullmatch(t))
        return frozenset(subs)

    def owned(self) -> set[TopicPartition]:
        return self.assigned | self.pending_revocation

    def current(self) -> CurrentAssignment:
        return CurrentAssignment(self.epoch, self.previous_epoch, self.state, frozenset(self.assigned),
                                 frozenset(self.pending_revocation))


@dataclass(frozen=True)
class CurrentAssignment:
    """What a CurrentMemberAssignment record carries: a member's epochs, state and partitions."""

    epoch: int
    previous_epoch: int
    state: MemberState
    assigned: frozenset[TopicPartition] = frozenset()
    pending_revocation: frozenset[TopicPartition] = frozenset()


def metadata_hash(topics: Mapping[str, int], subscribed: set[str]) -> int:
    """A signed 64-bit digest of the subscribed topics and their partition counts (stored as the
    group's MetadataHash, as Kafka 4.1+ does; the digest itself is ours, not Kafka's Murmur3)."""
    text = ";".join(f"{t}:{topics[t]}" for t in sorted(subscribed) if t in topics)
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big", signed=True)


@dataclass
class ConsumerGroup:
    group_id: str
    epoch: int = 0
    target_epoch: int = 0
    metadata_hash: int = 0
    members: dict[str, Member] = field(default_factory=dict)
    target: dict[str, set[TopicPartition]] = field(default_factory=dict)
    # -- timers (in memory only; see the module's docstring) --
    empty_since_ms: int | None = None
    created_ms: int = 0
    #: when the group epoch last moved (a loaded group counts as changed at load)
    epoch_changed_ms: int | None = None

    # -- views ------------------------------------------------------------------------------------

    @property
    def state(self) -> str:
        """Kafka's consumer group states: Empty, Assigning, Reconciling, Stable."""
        if not self.members:
            return GroupState.EMPTY.value
        if self.target_epoch != self.epoch:
            return GroupState.ASSIGNING.value
        if any(m.epoch != self.target_epoch or m.state != STABLE for m in self.members.values()
               if m.epoch != STATIC_LEAVE_EPOCH):
            return GroupState.RECONCILING.value
        return GroupState.STABLE.value

    def converging(self, now_ms: int, window_ms: int) -> bool:
        """True while members should heartbeat often: the epoch moved within ``window_ms``, or the group
        is not Stable (a member has partitions to release or to receive)."""
        recent = self.epoch_changed_ms is not None and now_ms - self.epoch_changed_ms < window_ms
        return recent or self.state != GroupState.STABLE.value

    def static_member(self, instance_id: str) -> Member | None:
        return next((m for m in self.members.values() if m.instance_id == instance_id), None)

    def subscribed_topics(self, topics: Mapping[str, int]) -> set[str]:
        return subscribed_topics(self.members.values(), topics)

    def owners(self) -> dict[TopicPartition, str]:
        """Who currently holds each partition (assigned or not yet revoked)."""
        return owners(self.members.values())

    def assignor_name(self) -> str:
        return assignor_name(self.members.values())


# -- pure functions over a group's members (the decisions use them on members not yet replayed) --

def subscribed_topics(members: Iterable[Member], topics: Mapping[str, int]) -> set[str]:
    return {t for m in members for t in m.subscription(topics)}


def owners(members: Iterable[Member]) -> dict[TopicPartition, str]:
    return {tp: m.member_id for m in members for tp in m.owned()}


def assignor_name(members: Iterable[Member]) -> str:
    """The assignor most members ask for (ties: by name), else the default."""
    votes: dict[str, int] = {}
    for m in members:
        if m.assignor:
            votes[m.assignor] = votes.get(m.assignor, 0) + 1
    if not votes:
        return DEFAULT_ASSIGNOR
    return min(votes, key=lambda a: (-votes[a], a))


def compute_target(members: Mapping[str, Member], topics: Mapping[str, int],
                   current: Mapping[str, set[TopicPartition]],
                   racks: PartitionRacks | None = None) -> dict[str, set[TopicPartition]]:
    """The assignor's target assignment for these members (sticky to ``current``); ``racks``, the
    partitions' replica racks, lets it keep members' fetches in their rack (KIP-881)."""
    view = [AssignmentMember(m.member_id, m.subscription(topics), m.instance_id or m.member_id, m.rack_id or None)
            for m in members.values()]
    return ASSIGNORS[assignor_name(members.values())](view, topics, dict(current), racks)


# -- member reconciliation: revoke before assign ------------------------------------------------------

class Step(Enum):
    """What reconciliation found for a member (the events of ``MEMBER_TRANSITIONS``)."""

    WAIT_FOR_RELEASE = "the member still owns partitions it must revoke"
    REVOKE = "partitions of its assignment are not in its target"
    ASSIGN_ALL = "nothing to revoke, every target partition is free"
    ASSIGN_SOME = "nothing to revoke, some target partitions are still held by others"
    REVOCATION_TIMED_OUT = "the rebalance timeout passed before the member revoked"


#: Kafka's member moves (CurrentAssignmentBuilder), as data: (state, step) -> next state. A pair
#: not listed is a bug. Reaching UNKNOWN means fenced: the member is removed from the group. A member
#: loaded in UNKNOWN (a state code this version does not know) is fenced until it owns nothing, then
#: reconciled from scratch, as Kafka does.
MEMBER_TRANSITIONS: dict[tuple[MemberState, Step], MemberState] = {
    (STABLE, Step.REVOKE): UNREVOKED_PARTITIONS,
    (STABLE, Step.ASSIGN_ALL): STABLE,
    (STABLE, Step.ASSIGN_SOME): UNRELEASED_PARTITIONS,
    (UNREVOKED_PARTITIONS, Step.WAIT_FOR_RELEASE): UNREVOKED_PARTITIONS,
    (UNREVOKED_PARTITIONS, Step.REVOKE): UNREVOKED_PARTITIONS,
    (UNREVOKED_PARTITIONS, Step.ASSIGN_ALL): STABLE,
    (UNREVOKED_PARTITIONS, Step.ASSIGN_SOME): UNRELEASED_PARTITIONS,
    (UNREVOKED_PARTITIONS, Step.REVOCATION_TIMED_OUT): UNKNOWN,
    (UNRELEASED_PARTITIONS, Step.REVOKE): UNREVOKED_PARTITIONS,
    (UNRELEASED_PARTITIONS, Step.ASSIGN_ALL): STABLE,
    (UNRELEASED_PARTITIONS, Step.ASSIGN_SOME): UNRELEASED_PARTITIONS,
    (UNKNOWN, Step.ASSIGN_ALL): STABLE,
    (UNKNOWN, Step.ASSIGN_SOME): UNRELEASED_PARTITIONS,
}


def transition(state: MemberState, step: Step) -> MemberState:
    nxt = MEMBER_TRANSITIONS.get((state, step))
    if nxt is None:
        raise IllegalTransition(f"member state {state.name} has no move for: {step.value}")
    return nxt


def next_assignment(member: Member, target: set[TopicPartition] | frozenset[TopicPartition], target_epoch: int,
                    members: Mapping[str, Member], owned: set[TopicPartition] | None) -> CurrentAssignment:
    """Where ``member`` moves towards its ``target`` (of assignment epoch ``target_epoch``); ``members``
    are the group's (who holds what), ``owned`` what the member reported holding (None: not reported).

    1. Partitions of its assignment not in its target go to ``pending_revocation`` (UNREVOKED_PARTITIONS);
       the member keeps its epoch until it reports, in a later heartbeat, that it released them.
    2. Then it takes the target's epoch and, of the new partitions, those no other member still holds
       (UNRELEASED_PARTITIONS until the others release the rest)."""
    cur = member.current()
    if cur.epoch == STATIC_LEAVE_EPOCH:
        return cur
    state = cur.state
    if state == UNKNOWN:
        if owned is None or owned:
            raise fail(ErrorCode.FENCED_MEMBER_EPOCH, f"member {member.member_id} is in an unknown state: it must "
                                                      "release all its partitions and join again")
        cur = CurrentAssignment(cur.epoch, cur.previous_epoch, state)
    if state == UNREVOKED_PARTITIONS and (owned is None or owned & cur.pending_revocation):
        transition(state, Step.WAIT_FOR_RELEASE)
        return cur
    if cur.epoch == target_epoch and state == STABLE:
        return cur
    keep = cur.assigned & target
    revoke = cur.assigned - target
    if revoke:
        return CurrentAssignment(cur.epoch, cur.previous_epoch, transition(state, Step.REVOKE), keep, revoke)
    holders = owners(members.values())
    free = {tp for tp in set(target) - keep if holders.get(tp, member.member_id) == member.member_id}
    epoch, previous = (cur.epoch, cur.previous_epoch) if cur.epoch == target_epoch else (target_epoch, cur.epoch)
    assigned = keep | free
    step = Step.ASSIGN_ALL if assigned == target else Step.ASSIGN_SOME
    return CurrentAssignment(epoch, previous, transition(state, step), frozenset(assigned), frozenset())


def validate_regex(regex: str) -> None:
    try:
        re.compile(regex)
    except re.error as exc:
        raise fail(ErrorCode.INVALID_REQUEST, f"invalid regular expression {regex!r}: {exc}") from exc


def check_assignor(name: str | None) -> None:
    if name and name not in ASSIGNORS:
        raise fail(ErrorCode.UNSUPPORTED_ASSIGNOR, f"assignor {name!r} is not one of {sorted(ASSIGNORS)}")


def as_members(group: ConsumerGroup) -> list[Member]:
    return sorted(group.members.values(), key=lambda m: m.member_id)
