"""Follower fetch sessions (Kafka's KIP-227), both halves, as pure rules (no gRPC, no asyncio).

A follower fetches every partition it follows from one leader, twice a second when idle. Without a
session every request listed all of them and the leader walked all of them. With one:

- the first request of a session is *full* (epoch 0): it lists every followed partition with its
  fetch offset and leader epoch; the leader keeps them (``LeaderSession``) and names the session;
- every later request is *incremental* (epoch 1, 2, ...): it lists only partitions whose fetch state
  changed (new, new fetch offset, new leader epoch) and the ones no longer fetched (``forgotten``);
  the follower tracks what the leader holds (``FollowerSession``) and what may have changed (dirty);
- the leader reads only the partitions the request changed and those that changed on its side
  since (appends, high-watermark moves, leadership: ``mark_dirty``), and answers only the partitions
  with records, a new high watermark or log start offset, or an error;
- an unknown session id (FETCH_SESSION_ID_NOT_FOUND) or an unexpected epoch
  (INVALID_FETCH_SESSION_EPOCH), a failed request or a new connection resets the session: the
  follower's next request is full again.

An idle round trip thus costs O(changed partitions) on both sides, not O(followed partitions).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from shared.errors import ErrorCode
from shared.types import TopicPartition

INITIAL_EPOCH = 0  # a full request: opens a new session
FINAL_EPOCH = -1  # no session (a sessionless full fetch)
MAX_EPOCH = 2**31 - 1


def next_epoch(epoch: int) -> int:
    """The epoch after ``epoch`` (wraps to 1: 0 always means a new session)."""
    return 1 if epoch >= MAX_EPOCH else epoch + 1


class Position(NamedTuple):
    """A follower's fetch state for one partition, as a request carries it."""

    fetch_offset: int
    leader_epoch: int
    log_start_offset: int = 0

    @property
    def key(self) -> tuple[int, int]:
        """What the leader's session must hold (the log start offset alone does not make a change)."""
        return self.fetch_offset, self.leader_epoch


# -- the leader's half ------------------------------------------------------------------------------


@dataclass(slots=True)
class SessionPartition:
    fetch_offset: int
    leader_epoch: int
    max_bytes: int
    sent_high_watermark: int = -1  # what the last answer for this partition said (-1: never answered)
    sent_log_start_offset: int = -1


@dataclass(eq=False)  # compared and hashed by identity: the replica manager holds a set of them
class LeaderSession:
    """One follower's session on the leader: what it fetches, and which partitions changed since."""

    session_id: int
    replica_id: int
    expected_epoch: int = INITIAL_EPOCH  # the epoch of the request being served; the next one after completed()
    partitions: dict[TopicPartition, SessionPartition] = field(default_factory=dict)
    dirty: set[TopicPartition] = field(default_factory=set)
    last_fetch_ms: int = 0  # when the follower last fetched: the time every unchanged partition was fetched
    on_dirty: Callable[[], None] | None = None  # wakes a waiting fetch of this session

    def mark_dirty(self, tp: TopicPartition) -> None:
        """Something about ``tp`` changed on the leader (append, high watermark, leadership)."""
        if tp in self.partitions:
            self.dirty.add(tp)
            if self.on_dirty is not None:
                self.on_dirty()

    def apply(self, changed: Iterable[tuple[TopicPartition, int, int, int]],
              forgotten: Iterable[TopicPartition]) -> list[TopicPartition]:
        """Apply a request's ``(tp, fetch_offset, leader_epoch, max_bytes)`` entries and forgotten
        partitions; returns the partitions removed from the session."""
        removed = []
        for tp in forgotten:
            if self.partitions.pop(tp, None) is not None:
                removed.append(tp)
            self.dirty.discard(tp)
        for tp, offset, epoch, max_bytes in changed:
            sp = self.partitions.get(tp)
            if sp is None or sp.leader_epoch != epoch:
                self.partitions[tp] = SessionPartition(offset, epoch, max_bytes)  # answered at least once
            else:
                sp.fetch_offset, sp.max_bytes = offset, max_bytes
        return removed

    def take_dirty(self) -> set[TopicPartition]:
        dirty, self.dirty = self.dirty, set()
        return dirty

    def needs_answer(self, tp: TopicPartition, error: int, nbytes: int, high_watermark: int,
                     log_start_offset: int) -> bool:
        """Whether the response names ``tp``: records, an error, or news the follower has not had."""
        sp = self.partitions.get(tp)
        if sp is None or error or nbytes:
            return True
        return high_watermark != sp.sent_high_watermark or log_start_offset != sp.sent_log_start_offset

    def answered(self, tp: TopicPartition, high_watermark: int, log_start_offset: int) -> None:
        sp = self.partitions.get(tp)
        if sp is not None:
            sp.sent_high_watermark, sp.sent_log_start_offset = high_watermark, log_start_offset

    def completed(self) -> None:
        """A response went out: the next request must carry the next epoch."""
        self.expected_epoch = next_epoch(self.expected_epoch)


def resolve_session(current: LeaderSession | None, replica_id: int, session_id: int, session_epoch: int,
                    new_id: Callable[[], int]) -> tuple[LeaderSession | None, ErrorCode]:
    """The session a request belongs to: a new one for a full request (epoch 0), ``current`` for an
    incremental one that names it at the expected epoch, else the error that makes the follower reset."""
    if session_epoch == INITIAL_EPOCH:
        return LeaderSession(new_id(), replica_id), ErrorCode.NONE
    if current is None or current.session_id != session_id or current.replica_id != replica_id:
        return None, ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    if session_epoch != current.expected_epoch:
        return None, ErrorCode.INVALID_FETCH_SESSION_EPOCH
    return current, ErrorCode.NONE


# -- the follower's half -----------------------------------------------------------------------------


@dataclass(frozen=True)
class FetchPlan:
    """What the next request carries."""

    session_id: int
    epoch: int
    upserts: dict[TopicPartition, Position]
    forgotten: list[TopicPartition]

    @property
    def full(self) -> bool:
        return self.epoch == INITIAL_EPOCH


class FollowerSession:
    """The follower's half (Kafka's FetchSessionHandler): what the leader's session holds, what may have
    changed since the last request (``mark``), and the next request's contents (``plan``)."""

    def __init__(self) -> None:
        self.session_id = 0
        self.epoch = INITIAL_EPOCH
        self.sent: dict[TopicPartition, tuple[int, int]] = {}  # partition -> (fetch offset, leader epoch)
        self.dirty: set[TopicPartition] = set()

    def mark(self, tp: TopicPartition) -> None:
        self.dirty.add(tp)

    def reset(self) -> None:
        """Start over: the next request is full."""
        self.session_id, self.epoch = 0, INITIAL_EPOCH
        self.sent = {}
        self.dirty = set()

    def plan(self, wanted: Callable[[TopicPartition], Position | None], followed: Iterable[TopicPartition]) -> FetchPlan:
        """The next request. ``wanted(tp)`` is a partition's position, or None while it is not fetched
        (backing off, awaiting truncation). A full request asks ``wanted`` of every ``followed``
        partition; an incremental one only of the dirty ones."""
        upserts: dict[TopicPartition, Position] = {}
        forgotten: list[TopicPartition] = []
        if self.epoch == INITIAL_EPOCH:
            for tp in followed:
                pos = wanted(tp)
                if pos is not None:
                    upserts[tp] = pos
        else:
            for tp in self.dirty:
                pos = wanted(tp)
                held = self.sent.get(tp)
                if pos is None:
                    if held is not None:
                        forgotten.append(tp)
                elif held != pos.key:
                    upserts[tp] = pos
        self.dirty = set()
        return FetchPlan(self.session_id, self.epoch, upserts, forgotten)

    def on_response(self, plan: FetchPlan, error_code: int, session_id: int) -> bool:
        """Record the leader's answer to ``plan``; False (and a reset) on a session error."""
        if error_code:
            self.reset()
            return False
        if plan.full:
            self.sent = {}
            self.session_id = session_id
        for tp in plan.forgotten:
            self.sent.pop(tp, None)
        for tp, pos in plan.upserts.items():
            self.sent[tp] = pos.key
        self.epoch = next_epoch(self.epoch)
        return True
