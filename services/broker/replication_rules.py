"""The broker's replication rules, as pure functions (no files, no asyncio, time passed in):

- the leader's high watermark: the smallest log end offset over the ISR (with an ISR proposal undecided,
  over the union of the old and the proposed ISR), never below the log start offset;
- when an undecided ISR proposal is settled: by an answer, or by a partition state newer than its epoch;
- ISR expansion: a follower outside the ISR that fetches, has reached the high watermark and this leader
  epoch's start, and was caught up recently (Kafka's replica.lag.time.max.ms);
- ISR shrink: an ISR follower that has not been caught up for replica.lag.time.max.ms;
- leader-epoch truncation: where a follower cuts its log after asking the leader OffsetsForLeaderEpoch;
- the low watermark (DeleteRecords): the smallest log start offset over the leader and its live replicas.

``Partition`` and ``ReplicaFetcher`` apply them; unit tests drive them with a fake clock.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from shared.errors import ErrorCode


class FetchClock(Protocol):
    """A follower fetch session: ``last_fetch_ms`` is when the follower last fetched (any partition)."""

    last_fetch_ms: int


class FollowerState:
    """What the leader knows of one follower of one partition.

    A fetch outside a session sets the times directly (``fetched``). In a fetch session the follower
    names a partition only when its offset changes, so the state is *attached* to the session: while
    attached, the last fetch is the session's last fetch, and a follower that was caught up at its last
    offset stays caught up at every fetch until the leader appends (``leader_appended`` freezes the time).
    Both ways give the same times as a fetch per partition would."""

    __slots__ = ("log_end_offset", "log_start_offset", "_last_fetch_ms", "_last_caught_up_ms", "session", "caught_up")

    def __init__(self, log_end_offset: int = -1, last_fetch_ms: int = 0, last_caught_up_ms: int = 0,
                 log_start_offset: int = -1) -> None:
        self.log_end_offset = log_end_offset
        self.log_start_offset = log_start_offset  # as the follower's last fetch said (-1: not known yet)
        self._last_fetch_ms = last_fetch_ms
        self._last_caught_up_ms = last_caught_up_ms
        self.session: FetchClock | None = None
        self.caught_up = False  # attached only: at its offset the follower had all the leader's log

    @property
    def last_fetch_ms(self) -> int:
        return self.session.last_fetch_ms if self.session is not None else self._last_fetch_ms

    @last_fetch_ms.setter
    def last_fetch_ms(self, value: int) -> None:
        self._last_fetch_ms = value

    @property
    def last_caught_up_ms(self) -> int:
        if self.session is not None and self.caught_up:
            return self.session.last_fetch_ms
        return self._last_caught_up_ms

    @last_caught_up_ms.setter
    def last_caught_up_ms(self, value: int) -> None:
        self._last_caught_up_ms = value

    def fetched(self, now_ms: int, fetch_offset: int, leader_log_end_offset: int, log_start_offset: int = -1) -> None:
        """A fetch outside any session (``log_start_offset`` -1: the fetch did not say it)."""
        self.detach()
        self.log_end_offset = fetch_offset
        if log_start_offset >= 0:
            self.log_start_offset = log_start_offset
        self._last_fetch_ms = now_ms
        if fetch_offset >= leader_log_end_offset:
            self._last_caught_up_ms = now_ms

    def attach(self, session: FetchClock, fetch_offset: int, leader_log_end_offset: int,
               log_start_offset: int = -1) -> None:
        """The follower fetches at ``fetch_offset`` in ``session`` (called before the session's
        ``last_fetch_ms`` is set to this fetch's time)."""
        self.detach()
        self.log_end_offset = fetch_offset
        if log_start_offset >= 0:
            self.log_start_offset = log_start_offset
        self.session = session
        self.caught_up = fetch_offset >= leader_log_end_offset

    def leader_appended(self) -> None:
        """The leader's log grew: an attached follower is no longer caught up at its offset; it last was
        at the session's last fetch."""
        if self.session is not None and self.caught_up:
            self._last_caught_up_ms = self.session.last_fetch_ms
            self.caught_up = False

    def detach(self) -> None:
        """The follower stopped fetching this partition in its session: the times stop there."""
        if self.session is not None:
            self._last_fetch_ms = self.session.last_fetch_ms
            if self.caught_up:
                self._last_caught_up_ms = self.session.last_fetch_ms
            self.session = None
            self.caught_up = False


def high_watermark(broker_id: int, log_end_offset: int, log_start_offset: int, isr: Sequence[int],
                   pending_isr: Sequence[int] | None, followers: Mapping[int, FollowerState]) -> int:
    """The high watermark the leader's state allows (callers only ever move it forward)."""
    members = isr if pending_isr is None else sorted(set(isr) | set(pending_isr))
    candidates = [log_end_offset]
    for r in members:
        if r != broker_id:
            st = followers.get(r)
            candidates.append(st.log_end_offset if st else -1)
    return max(min(candidates), log_start_offset)


def pending_isr_after_proposal(pending_isr: Sequence[int] | None, pending_epoch: int, partition_epoch: int,
                                new_isr: Sequence[int]) -> tuple[list[int], int]:
    """The members a leader counts as maybe in the ISR once it proposes ``new_isr`` at ``partition_epoch``
    (Kafka's "maximal ISR"), and the epoch that settles them (a newer state settles them all). An earlier
    proposal not settled yet (its request failed: it may still have been applied) stays counted too."""
    if pending_isr is not None and pending_epoch >= partition_epoch:
        return sorted(set(pending_isr) | set(new_isr)), pending_epoch
    return sorted(new_isr), partition_epoch


def keeps_pending_isr(pending_epoch: int, partition_epoch: int, leadership_changed: bool) -> bool:
    """Whether a leader's ISR proposal made at ``pending_epoch`` may still be undecided once it applies a
    partition state of ``partition_epoch``. A proposal applies only at the epoch it was made at, so any
    newer state already shows its outcome; a state of the same epoch (a metadata refresh re-reading what
    the leader knew) shows nothing, and forgetting the proposal there let the high watermark pass a
    replica the controller was about to add: elected next, it lacked acknowledged records. As Kafka's
    ``PendingExpandIsr``, the proposal is kept until an answer or a newer state settles it."""
    return not leadership_changed and partition_epoch <= pending_epoch


#: AlterPartition answers (per partition) that settle the leader's pending proposal: accepted (the
#: answer's newer state is applied), or refused after the controller checked both epochs, so nothing
#: made at them was applied (Kafka resets to the committed ISR on OPERATION_NOT_ATTEMPTED and
#: INELIGIBLE_REPLICA). Any other answer keeps it, as Kafka does "awaiting new metadata": a stale
#: epoch (FENCED_LEADER_EPOCH, INVALID_UPDATE_VERSION) means the state moved on, maybe through an
#: earlier proposal whose outcome is unknown, and the newer state will settle it.
_SETTLING_ANSWERS = frozenset({ErrorCode.NONE, ErrorCode.INELIGIBLE_REPLICA, ErrorCode.INVALID_REQUEST,
                               ErrorCode.OPERATION_NOT_ATTEMPTED})


def answer_settles_pending_isr(error_code: int) -> bool:
    """Whether the controller's answer to a proposal settles the leader's pending ISR (see above)."""
    return error_code in _SETTLING_ANSWERS


def low_watermark(broker_id: int, log_start_offset: int, replicas: Sequence[int],
                  followers: Mapping[int, FollowerState], alive: Callable[[int], bool]) -> int:
    """Kafka's low watermark of a partition led by ``broker_id`` (``Partition.lowWatermarkIfLeader``): the
    smallest log start offset over the leader's own and every other assigned replica's whose broker is
    alive (registered), in the ISR or not. A live replica not heard from since this leadership began
    counts as -1 (unknown): DeleteRecords waits for it, as Kafka's does."""
    low = log_start_offset
    for r in replicas:
        if r == broker_id or not alive(r):
            continue
        st = followers.get(r)
        low = min(low, st.log_start_offset if st is not None else -1)
    return low


def isr_expansion_candidates(now_ms: int, isr: Sequence[int], followers: Mapping[int, FollowerState],
                             high_watermark: int, epoch_start_offset: int, lag_time_max_ms: int) -> list[int]:
    """Followers outside the ISR that are fetching and have caught up to the high watermark (and to the
    start of the leader's epoch, so that they hold nothing of a divergent older epoch)."""
    return [r for r, st in followers.items()
            if r not in isr and st.log_end_offset >= high_watermark
            and st.log_end_offset >= max(epoch_start_offset, 0)
            and now_ms - st.last_caught_up_ms < lag_time_max_ms / 2 and now_ms - st.last_fetch_ms < lag_time_max_ms / 2]


def isr_shrink_candidates(now_ms: int, broker_id: int, isr: Sequence[int], followers: Mapping[int, FollowerState],
                          lag_time_max_ms: int) -> list[int]:
    """ISR followers that have not caught up for ``replica.lag.time.max.ms`` (or never fetched)."""
    out = []
    for r in isr:
        if r == broker_id:
            continue
        st = followers.get(r)
        if st is None or now_ms - st.last_caught_up_ms > lag_time_max_ms:
            out.append(r)
    return out


def epoch_end_offset(entries: Sequence[tuple[int, int]], epoch: int, log_end_offset: int) -> tuple[int, int]:
    """Kafka's OffsetsForLeaderEpoch over ``entries`` ((epoch, start offset), both increasing): the largest
    epoch <= ``epoch`` and the offset after its last record; ``(-1, -1)`` if there is none."""
    i = bisect_right([e for e, _ in entries], epoch) - 1
    if i < 0:
        return -1, -1
    if i == len(entries) - 1:
        return entries[i][0], log_end_offset
    return entries[i][0], entries[i + 1][1]


def truncation_offset(entries: Sequence[tuple[int, int]], log_end_offset: int, high_watermark: int,
                      leader_epoch: int, leader_end_offset: int) -> int:
    """Where a follower cuts its log (its log end offset: nothing to cut) given the leader's answer
    ``(leader_epoch, leader_end_offset)`` for the follower's latest epoch."""
    if not entries:
        return log_end_offset  # nothing to compare: keep it, a fetch out of range will tell
    if leader_epoch < 0 or leader_end_offset < 0:
        return min(high_watermark, log_end_offset)  # the leader knows none of our epochs: keep what was committed
    _, local_end = epoch_end_offset(entries, leader_epoch, log_end_offset)
    return min(leader_end_offset, local_end if local_end >= 0 else log_end_offset, log_end_offset)
