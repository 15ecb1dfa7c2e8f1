"""One consumer group of the KIP-848 protocol: members, epochs, target assignment. Pure.

State (as Kafka's ``ConsumerGroup``): the *group epoch* is bumped whenever the
membership or a subscription (or the subscribed topics' metadata) changes; the
*target assignment* is computed by the assignor for a group epoch and carries
that epoch (the *assignment epoch*); each member has its own *member epoch* and
*current assignment*, which converge on the target by reconciliation
(``reconcile.py``). Static members (``group.instance.id``) that leave with epoch
-2 keep their partitions reserved until their session expires.

No gRPC, etcd or asyncio here, and no clock: callers pass ``now_ms``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from services.coordinator.assignors import ASSIGNORS, DEFAULT_ASSIGNOR, AssignmentMember
from shared.errors import ErrorCode, GroupError
from shared.types import TopicPartition

LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2

STABLE = 0  # Kafka's MemberState values
UNREVOKED_PARTITIONS = 1
UNRELEASED_PARTITIONS = 2
STATE_NAMES = {STABLE: "STABLE", UNREVOKED_PARTITIONS: "UNREVOKED_PARTITIONS",
               UNRELEASED_PARTITIONS: "UNRELEASED_PARTITIONS"}


def fail(code: ErrorCode, message: str) -> GroupError:
    return GroupError(message, code=code)


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
    state: int = STABLE
    assigned: set[TopicPartition] = field(default_factory=set)
    pending_revocation: set[TopicPartition] = field(default_factory=set)
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
    empty_since_ms: int | None = None
    created_ms: int = 0
    #: when the group epoch last moved (in memory only; a loaded group counts as changed at load)
    epoch_changed_ms: int | None = None

    # -- views ------------------------------------------------------------------------------------

    @property
    def state(self) -> str:
        """Kafka's consumer group states: Empty, Assigning, Reconciling, Stable."""
        if not self.members:
            return "Empty"
        if self.target_epoch != self.epoch:
            return "Assigning"
        if any(m.epoch != self.target_epoch or m.state != STABLE for m in self.members.values()
               if m.epoch != STATIC_LEAVE_EPOCH):
            return "Reconciling"
        return "Stable"

    def converging(self, now_ms: int, window_ms: int) -> bool:
        """True while members should heartbeat often: the epoch moved within ``window_ms``, or the group
        is not Stable (a member has partitions to release or to receive)."""
        recent = self.epoch_changed_ms is not None and now_ms - self.epoch_changed_ms < window_ms
        return recent or self.state != "Stable"

    def static_member(self, instance_id: str) -> Member | None:
        return next((m for m in self.members.values() if m.instance_id == instance_id), None)

    def subscribed_topics(self, topics: Mapping[str, int]) -> set[str]:
        return {t for m in self.members.values() for t in m.subscription(topics)}

    def owners(self) -> dict[TopicPartition, str]:
        """Who currently holds each partition (assigned or not yet revoked)."""
        return {tp: m.member_id for m in self.members.values() for tp in m.owned()}

    def assignor_name(self) -> str:
        """The assignor most members ask for (ties: by name), else the default."""
        votes: dict[str, int] = {}
        for m in self.members.values():
            if m.assignor:
                votes[m.assignor] = votes.get(m.assignor, 0) + 1
        if not votes:
            return DEFAULT_ASSIGNOR
        return min(votes, key=lambda a: (-votes[a], a))

    # -- changes ----------------------------------------------------------------------------------

    def bump_epoch(self) -> None:
        self.epoch += 1

    def compute_target(self, topics: Mapping[str, int]) -> None:
        """Run the assignor for the current group epoch."""
        members = [AssignmentMember(m.member_id, m.subscription(topics), m.instance_id or m.member_id)
                   for m in self.members.values()]
        self.target = ASSIGNORS[self.assignor_name()](members, topics, self.target)
        self.target_epoch = self.epoch

    def refresh_metadata_hash(self, topics: Mapping[str, int]) -> bool:
        """Bump the group epoch if the subscribed topics' metadata changed (new topic, new partitions,
        a regex matching a new topic). Returns True if it did."""
        h = metadata_hash(topics, self.subscribed_topics(topics))
        if h == self.metadata_hash:
            return False
        self.metadata_hash = h
        if self.members:
            self.bump_epoch()
        return True

    def remove_member(self, member_id: str, now_ms: int) -> Member | None:
        m = self.members.pop(member_id, None)
        self.target.pop(member_id, None)
        if m is not None:
            self.bump_epoch()
            if not self.members:
                self.empty_since_ms = now_ms
        return m


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
