"""Consumer group membership for the ``Consumer`` (KIP-848 consumer protocol).

A heartbeat thread talks to the group's coordinator: it sends the subscription and the
partitions the application currently owns, and keeps the latest assignment the
coordinator wants. Everything that touches the consumer's assignment runs in the
application's thread, inside ``poll()`` (``on_poll``), as Kafka's consumer does: revoke
first (auto-commit, then ``on_partitions_revoked``), then take the new partitions
(positions from the committed offsets, else ``auto_offset_reset``, then
``on_partitions_assigned``); the heartbeat thread reports the change at once, which is
what lets the coordinator give revoked partitions to their new owners.

``max.poll.interval.ms`` is enforced here: a member that does not poll for that long
leaves the group (its partitions go to others) and joins again at its next poll.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol

from shared.client.commit_stream import CommitStream
from shared.client.group_coordinator import GroupCoordinatorClient
from shared.errors import ErrorCode, TidelogError, error_for
from shared.proto import coordinator_pb2 as cpb
from shared.types import TopicPartition

if TYPE_CHECKING:
    from shared.client.consumer import Consumer

log = logging.getLogger(__name__)
REJOIN = frozenset({ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID})
FATAL = frozenset({ErrorCode.UNRELEASED_INSTANCE_ID, ErrorCode.FENCED_INSTANCE_ID, ErrorCode.GROUP_MAX_SIZE_REACHED,
                   ErrorCode.UNSUPPORTED_ASSIGNOR, ErrorCode.INVALID_REQUEST, ErrorCode.INVALID_GROUP_ID})


class ConsumerRebalanceListener(Protocol):
    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None: ...
    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None: ...
    def on_partitions_lost(self, lost: set[TopicPartition]) -> None: ...


def _tps(items: Iterable[Any]) -> set[TopicPartition]:
    return {TopicPartition(t.topic, p) for t in items for p in t.partitions}


def _by_topic(tps: Iterable[TopicPartition]) -> list[cpb.TopicPartitions]:
    by: dict[str, list[int]] = {}
    for tp in tps:
        by.setdefault(tp.topic, []).append(tp.partition)
    return [cpb.TopicPartitions(topic=t, partitions=sorted(ps)) for t, ps in sorted(by.items())]


class GroupMember:
    def __init__(self, consumer: Consumer, group_id: str, *, group_instance_id: str | None, enable_auto_commit: bool,
                 auto_commit_interval_ms: int, heartbeat_interval_ms: int, max_poll_interval_ms: int,
                 group_remote_assignor: str | None, client_id: str, request_timeout_s: float) -> None:
        if not group_id:
            raise ValueError("group_id must not be empty")
        self.consumer = consumer
        self.group_id = group_id
        self.instance_id = group_instance_id
        self.enable_auto_commit = enable_auto_commit
        self.auto_commit_interval_s = auto_commit_interval_ms / 1000
        self.heartbeat_interval_s = heartbeat_interval_ms / 1000
        self.max_poll_interval_ms = max_poll_interval_ms
        self.assignor = group_remote_assignor
        self.client_id = client_id
        self.coordinator = GroupCoordinatorClient(consumer.cluster, group_id, request_timeout_s)
        self.commits = CommitStream(self.coordinator)  # commit_async's ordered pipe
        self.topics: list[str] = []
        self.pattern: str | None = None
        self.listener: ConsumerRebalanceListener | None = None
        self.member_id = ""
        self.epoch = 0
        self.owned: set[TopicPartition] = set()  # what the application holds (changed only in poll)
        self.target: set[TopicPartition] | None = None  # what the coordinator last asked for
        self._lost = False
        self._fatal: TidelogError | None = None
        self._left_for_poll_timeout = False
        self._last_poll = time.monotonic()
        self._last_commit = time.monotonic()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopping = False

    # -- subscription -----------------------------------------------------------------------------

    def subscribe(self, topics: Iterable[str] | None, pattern: str | None, listener: ConsumerRebalanceListener | None) -> None:
        if pattern is not None:
            re.compile(pattern)
        names = sorted(set(topics or ()))
        if not names and not pattern:
            raise ValueError("subscribe to topic names or a pattern")
        with self._cond:
            self.topics, self.pattern, self.listener = names, pattern, listener
            self._cond.notify_all()
        if self._thread is None:
            self._stopping = False
            self._thread = threading.Thread(target=self._heartbeat_loop, name="tidelog-group-heartbeat", daemon=True)
            self._thread.start()

    def unsubscribe(self) -> None:
        self._revoke(set(self.owned))
        self._leave(static=False)
        with self._cond:
            self.topics, self.pattern, self.target = [], None, None

    def close(self) -> None:
        """Commit (auto-commit), then leave the group; a static member leaves with epoch -2 so its
        partitions stay reserved until its session times out."""
        if self._thread is None:
            return
        if self.enable_auto_commit and self.owned:
            self._try_commit(self._positions(self.owned))
        if not self.commits.flush(self.coordinator.timeout_s):  # pending commit_async calls, as Kafka's close()
            log.warning("closing with offset commits still unanswered")
        self.commits.close()
        self._leave(static=bool(self.instance_id))
        self.coordinator.close()

    def _leave(self, static: bool, forget_owned: bool = True) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        if self.member_id and self.epoch > 0:
            req = cpb.ConsumerGroupHeartbeatRequest(group_id=self.group_id, member_id=self.member_id,
                                                    member_epoch=-2 if static else -1, instance_id=self.instance_id or "")
            try:
                self.coordinator.call("ConsumerGroupHeartbeat", req, deadline_s=5)
            except TidelogError as exc:
                log.info("leave group failed: %s", exc)
        self.epoch, self.target = 0, None
        if forget_owned:  # else the next poll() reports them lost
            self.owned = set()

    # -- the application's thread ----------------------------------------------------------------

    def on_poll(self) -> None:
        """Called at the start of every ``poll()``: reconcile the assignment, auto-commit."""
        self._last_poll = time.monotonic()
        if self._fatal is not None:
            raise self._fatal
        if self._left_for_poll_timeout:
            self._left_for_poll_timeout = False
            self._lose()
            self.subscribe(self.topics, self.pattern, self.listener)
        if self._lost:
            self._lost = False
            self._lose()
        target = self.target
        if target is not None and target != self.owned:
            self._reconcile(target)
        if self.enable_auto_commit and time.monotonic() - self._last_commit >= self.auto_commit_interval_s and self.owned:
            # Asynchronous, as Kafka's consumer auto-commits in poll: a coordinator that does not answer
            # must not hold poll past its timeout (the next interval commits again). Closing and revoking
            # still commit synchronously.
            self._last_commit = time.monotonic()
            try:
                self.commit_async(self._positions(self.owned), _log_auto_commit)
            except TidelogError as exc:
                log.warning("auto-commit failed: %s", exc)

    def _reconcile(self, target: set[TopicPartition]) -> None:
        self._revoke(self.owned - target)
        added = target - self.owned
        if added:
            committed = self.committed(added)
            keep = set(self.owned)
            self.consumer.assign(keep | added)
            for tp, off in committed.items():
                if off is not None:
                    self.consumer.seek(tp, off)
            with self._cond:
                self.owned = keep | added
                self._cond.notify_all()  # report it now
            if self.listener is not None:
                self.listener.on_partitions_assigned(set(added))

    def _revoke(self, revoked: set[TopicPartition]) -> None:
        if not revoked:
            return
        if self.enable_auto_commit:
            self._try_commit(self._positions(revoked))
        if self.listener is not None:
            self.listener.on_partitions_revoked(set(revoked))
        with self._cond:
            self.owned = self.owned - revoked
            self.consumer.assign(self.owned)
            self._cond.notify_all()

    def _lose(self) -> None:
        lost = set(self.owned)
        with self._cond:
            self.owned = set()
        self.consumer.assign(set())
        if lost and self.listener is not None:
            self.listener.on_partitions_lost(lost)

    def _positions(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        out = {}
        for tp in tps:
            st = self.consumer._states.get(tp)
            if st is not None and st.position is not None:
                out[tp] = st.position
        return out

    # -- offsets ---------------------------------------------------------------------------------------

    def commit(self, offsets: dict[TopicPartition, int] | None = None) -> None:
        """Commit ``offsets`` (default: the positions of every owned partition); retried while the
        member's epoch moves under it (STALE_MEMBER_EPOCH). Commits made with ``commit_async`` before
        are answered first, so this one lands after them."""
        offsets = self._positions(self.owned) if offsets is None else {TopicPartition(*k): v for k, v in offsets.items()}
        if not offsets:
            return
        deadline = time.monotonic() + self.coordinator.timeout_s
        self.commits.flush(self.coordinator.timeout_s)
        while True:
            code, message = first_commit_error(self.coordinator.call("OffsetCommit", self._commit_request(offsets)))
            if code == 0:
                self._last_commit = time.monotonic()
                return
            if code != ErrorCode.STALE_MEMBER_EPOCH or time.monotonic() > deadline:
                raise error_for(code, message)
            with self._cond:
                self._cond.wait(0.05)

    def _commit_request(self, offsets: dict[TopicPartition, int]) -> cpb.OffsetCommitRequest:
        by: dict[str, list[cpb.OffsetCommitPartition]] = {}
        for tp, off in sorted(offsets.items()):
            by.setdefault(tp.topic, []).append(cpb.OffsetCommitPartition(partition=tp.partition, committed_offset=off,
                                                                         committed_leader_epoch=-1))
        return cpb.OffsetCommitRequest(group_id=self.group_id, member_id=self.member_id,
                                       member_epoch=self.epoch if self.member_id else -1,
                                       topics=[cpb.OffsetCommitTopic(name=t, partitions=ps) for t, ps in by.items()])

    def _try_commit(self, offsets: dict[TopicPartition, int]) -> None:  # closing, revoking: synchronous
        try:
            self.commit(offsets)
        except TidelogError as exc:
            log.warning("auto-commit failed: %s", exc)

    def commit_async(self, offsets: dict[TopicPartition, int] | None = None,
                     callback: Callable[[dict[TopicPartition, int], Exception | None], None] | None = None) -> None:
        """Send the commit and return; ``callback(offsets, error)`` runs on the commit stream's thread
        once it is answered. Commits are sent and answered in call order and never retried (as Kafka's
        commitAsync), several in flight at once."""
        snapshot = self._positions(self.owned) if offsets is None else {TopicPartition(*k): v for k, v in offsets.items()}

        def done(resp: cpb.OffsetCommitResponse | None, err: Exception | None) -> None:
            if resp is not None:
                code, message = first_commit_error(resp)
                err = error_for(code, message) if code else None
            if err is None:
                self._last_commit = time.monotonic()
            if callback is not None:
                callback(snapshot, err)

        if not snapshot:
            done(cpb.OffsetCommitResponse(), None)
            return
        try:
            self.commits.send(self._commit_request(snapshot), done)
        except TidelogError as exc:  # no coordinator to send to: the callback hears it
            done(None, exc)

    def committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        tps = {TopicPartition(*tp) for tp in partitions}
        resp = self.coordinator.call("OffsetFetch", cpb.OffsetFetchRequest(group_id=self.group_id, partitions=_by_topic(tps)))
        if resp.error_code:
            raise error_for(resp.error_code, resp.error_message)
        out: dict[TopicPartition, int | None] = dict.fromkeys(tps)
        for t in resp.topics:
            for p in t.partitions:
                out[TopicPartition(t.name, p.partition)] = p.committed_offset if p.committed_offset >= 0 else None
        return out

    # -- the heartbeat thread --------------------------------------------------------------------

    def _heartbeat_loop(self) -> None:
        while True:
            with self._cond:
                if self._stopping:
                    return
            if time.monotonic() - self._last_poll > self.max_poll_interval_ms / 1000 and self.epoch > 0:
                log.warning("max.poll.interval.ms (%d) passed without poll(): leaving the group", self.max_poll_interval_ms)
                self._left_for_poll_timeout = True
                threading.Thread(target=self._leave, args=(False, False), daemon=True).start()
                return
            sent_owned = set(self.owned)
            try:
                self._heartbeat_once(sent_owned)
            except TidelogError as exc:
                log.info("heartbeat failed: %s", exc)
            with self._cond:
                if not self._stopping and self.owned == sent_owned:
                    self._cond.wait(self.heartbeat_interval_s)

    def _heartbeat_once(self, owned: set[TopicPartition]) -> None:
        req = cpb.ConsumerGroupHeartbeatRequest(
            group_id=self.group_id, member_id=self.member_id, member_epoch=self.epoch,
            instance_id=self.instance_id or "", rebalance_timeout_ms=self.max_poll_interval_ms,
            subscribed_topic_names=self.topics, subscribed_topic_regex=self.pattern or "",
            server_assignor=self.assignor or "", owned_partitions=_by_topic(owned), client_id=self.client_id)
        resp = self.coordinator.call("ConsumerGroupHeartbeat", req, deadline_s=max(self.heartbeat_interval_s, 1.0))
        if resp.error_code in REJOIN:
            log.info("%s: rejoining group %s", ErrorCode(resp.error_code).name, self.group_id)
            self.epoch, self.target, self._lost = 0, None, True
            return
        if resp.error_code in FATAL:
            self._fatal = error_for(resp.error_code, resp.error_message)
            with self._cond:
                self._stopping = True
            return
        if resp.error_code:
            raise error_for(resp.error_code, resp.error_message)
        self.member_id, self.epoch = resp.member_id, resp.member_epoch
        if resp.heartbeat_interval_ms > 0:
            self.heartbeat_interval_s = resp.heartbeat_interval_ms / 1000
        if resp.has_assignment:
            self.target = _tps(resp.assignment)


def first_commit_error(resp: cpb.OffsetCommitResponse | cpb.TxnOffsetCommitResponse) -> tuple[int, str]:
    """The first error of a commit response (OffsetCommit or TxnOffsetCommit): group level, else the first
    partition's, as (code, message)."""
    if resp.error_code:
        return resp.error_code, resp.error_message
    for t in resp.topics:
        for p in t.partitions:
            if p.error_code:
                return p.error_code, f"{t.name}-{p.partition}"
    return 0, ""


def _log_auto_commit(offsets: dict[TopicPartition, int], error: Exception | None) -> None:
    if error is not None:
        log.warning("auto-commit failed: %s", error)
