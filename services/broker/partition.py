"""One partition replica on this broker: its log plus leader/follower state.

The leader tracks each follower's log end offset (from their fetches) and
advances the high watermark to the minimum log end offset over the ISR.
Consumers read only below the high watermark. ``acks=all`` producers wait in
a purgatory until the high watermark passes their batch. Long-polling fetches
wait on ``changed``, fired on every append and high-watermark move.

It also tracks each follower's log start offset (from their fetches): the
partition's low watermark is the smallest over the leader and its live replicas
(``replication_rules.low_watermark``), and DeleteRecords waits in a second
purgatory until it reaches the requested offset (Kafka's DelayedDeleteRecords).
"""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import Callable

from services.broker import replication_rules as rules
from services.broker.log import AppendInfo, FetchResult, PartitionLog
from services.broker.log.partition_log import wall_clock_ms
from services.broker.log.producer_snapshot import delete_snapshots, read_marker, restore_producer_state, take_snapshot
from services.broker.log.validation import validate_produce
from services.broker.replication_rules import FetchClock, FollowerState
from shared.errors import (
    ErrorCode,
    FencedLeaderEpochError,
    InvalidRecordError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    TidelogError,
)
from shared.records.builder import build_control_batch
from shared.records.header import BatchHeader, iter_batches
from shared.records.record import CONTROL_ABORT, CONTROL_COMMIT
from shared.types import TopicPartition

#: Whether a broker is alive (registered in the cluster metadata): only live replicas hold the low watermark.
BrokerAlive = Callable[[int], bool]


class Partition:
    def __init__(self, tp: TopicPartition, log: PartitionLog, broker_id: int, clock: Callable[[], int],
                 high_watermark: int = 0) -> None:
        self.tp = tp
        self.log = log
        self.broker_id = broker_id
        self.clock = clock
        self.leader_id = -1
        self.leader_epoch = -1
        self.partition_epoch = -1
        self.replicas: list[int] = []
        self.isr: list[int] = []
        self.min_insync_replicas = 1
        #: transaction.partition.verification.enable (KIP-890): a transaction's first batch here needs the
        #: coordinator's word that the partition is in it (``TxnState.verified``)
        self.verify_transactions = False
        self.followers: dict[int, FollowerState] = {}
        # From the broker's high-watermark checkpoint (``log.hw_checkpoint``), written by the replica manager.
        self.high_watermark = min(high_watermark, log.log_end_offset)
        #: members of an ISR proposal not yet settled (in flight, or its request failed): HW uses the union
        self.pending_isr: list[int] | None = None
        self.pending_isr_epoch = -1  # the partition epoch that proposal was made at
        self.isr_retry_at_ms = 0  # an unsettled proposal is not proposed again before this
        self.isr_change_in_flight = False
        self.fenced = False  # set when this broker lost its etcd lease: no leader duties until metadata is re-read
        self.producers = restore_producer_state(log)
        # Replayed markers below the high watermark are stable now: it may never move again after a restart
        # whose checkpoint was already at the log end (a read_committed reader stalled at them).
        self.producers.txn.on_high_watermark(self.high_watermark)
        log.on_roll = self._snapshot_producers
        self._changed = asyncio.Event()
        self.on_change: Callable[[TopicPartition], None] | None = None  # the owner's "a partition changed" signal
        self._hw_waiters: list[tuple[int, int, asyncio.Future[bool]]] = []
        self._waiter_seq = 0
        # DeleteRecords waiting for the low watermark: (offset, who is alive, the low watermark once reached).
        self._lw_waiters: list[tuple[int, BrokerAlive, asyncio.Future[int | None]]] = []

    # -- state --------------------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.broker_id and not self.fenced

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    def update_state(self, leader: int, leader_epoch: int, isr: list[int], replicas: list[int],
                     partition_epoch: int, min_insync_replicas: int) -> None:
        """Apply the controller's view; returns nothing. Leadership changes fail pending acks=all waits."""
        was_leader = self.is_leader
        old_epoch = self.leader_epoch
        became_leader = leader == self.broker_id and (not was_leader or leader_epoch != old_epoch)
        if partition_epoch < self.partition_epoch and leader_epoch <= self.leader_epoch:
            # An older state than one we already applied (e.g. our own AlterPartition result, ahead of the
            # watch). Fenced or not: a fenced leader waits for the re-read's current state, since an older
            # ISR could let its HW pass a replica the controller has since added.
            return
        if was_leader and (leader != self.broker_id or leader_epoch != old_epoch):
            self.fail_waiters()  # appends of the old epoch can no longer be acknowledged here
        added = was_leader and not became_leader and leader == self.broker_id and \
            any(r not in self.replicas for r in replicas)
        self.fenced = False
        self.leader_id = leader
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.isr = list(isr)
        self.replicas = list(replicas)
        self.min_insync_replicas = min_insync_replicas
        leadership_changed = leader != self.broker_id or leader_epoch != old_epoch  # old proposals are fenced
        if self.pending_isr is not None and not rules.keeps_pending_isr(self.pending_isr_epoch, partition_epoch,
                                                                        leadership_changed):
            self.pending_isr = None
        if became_leader:
            now = self.clock()
            self.followers = {r: FollowerState(last_caught_up_ms=now) for r in replicas if r != self.broker_id}
            self._notify()  # fetch sessions holding this partition re-read it (and attach the new states)
        elif not self.is_leader:
            self.followers = {}
        elif added:
            # A replica added back while its fetch session still holds this partition names nothing new: its
            # state (forgotten when it was removed) is attached again only when the session reads the
            # partition, which an idle partition would otherwise never make it do.
            self._notify()
        self._maybe_advance_hw()
        self._check_lw_waiters()  # replicas or live brokers may have changed (metadata is applied here)

    def propose_isr(self, new_isr: list[int]) -> None:
        """An ISR proposal is sent: until it is settled, the high watermark counts its members too."""
        self.isr_change_in_flight = True
        self.pending_isr, self.pending_isr_epoch = rules.pending_isr_after_proposal(
            self.pending_isr, self.pending_isr_epoch, self.partition_epoch, new_isr)

    def isr_proposal_done(self, answer: int | None, retry_after_ms: int = 0) -> None:
        """The request carrying this partition's proposal ended. ``answer``: the controller's error code for
        it (0: accepted, its new state applied through ``update_state`` already), or None when no answer
        says what happened (the request failed, the controller died). Unless the answer settles the
        proposal (``rules.answer_settles_pending_isr``), its members stay counted until a newer state
        arrives, and it is not proposed again for ``retry_after_ms``."""
        self.isr_change_in_flight = False
        if answer is not None and rules.answer_settles_pending_isr(answer):
            self.pending_isr = None
        elif self.pending_isr is not None:
            self.isr_retry_at_ms = self.clock() + retry_after_ms
        self._maybe_advance_hw()

    def check_epoch(self, epoch: int) -> None:
        """Requests carrying a leader epoch must match ours (Kafka's fencing)."""
        if epoch < 0 or epoch == self.leader_epoch:
            return
        if epoch < self.leader_epoch:
            raise FencedLeaderEpochError(f"{self.tp}: request epoch {epoch} < current leader epoch {self.leader_epoch}")
        raise TidelogError(f"{self.tp}: unknown leader epoch {epoch}", code=ErrorCode.UNKNOWN_LEADER_EPOCH)

    # -- producing ------------------------------------------------------------------------------

    def append_as_leader(self, records: bytes, acks: int) -> AppendInfo:
        if not self.is_leader:
            raise NotLeaderOrFollowerError(f"broker {self.broker_id} is not the leader of {self.tp}")
        view, batches = validate_produce(records, self.log.config)
        idempotent = [h for _, h in batches if h.producer_id >= 0]
        if idempotent:
            if len(batches) != 1:
                raise InvalidRecordError("an idempotent produce must carry exactly one batch per partition")
            h = idempotent[0]
            txn = self.producers.txn
            code, why = txn.check_data(h.producer_id, h.producer_epoch, h.is_transactional)
            if code:
                raise TidelogError(f"{self.tp}: {why}", code=code)
            if h.is_transactional and self.verify_transactions and not txn.may_open(h.producer_id, h.producer_epoch):
                raise TidelogError(f"{self.tp} is not verified to be in producer {h.producer_id}'s transaction "
                                   f"(epoch {h.producer_epoch})", code=ErrorCode.INVALID_TXN_STATE)
            dup = self.producers.check(idempotent[0])
            if dup is not None:
                # Already written: acknowledge again with the original offsets, write nothing.
                h = idempotent[0]
                return AppendInfo(dup.first_offset, dup.last_offset, h.max_timestamp, -1, 0, 0,
                                  self.log.log_start_offset, ())
        if acks == -1 and len(self.isr) < self.min_insync_replicas:
            raise NotEnoughReplicasError(
                f"{self.tp}: ISR {self.isr} is smaller than min.insync.replicas={self.min_insync_replicas}"
            )
        info = self.log.append_validated(view, batches, self.leader_epoch)
        for st in self.followers.values():
            st.leader_appended()
        for h, first, last in info.batches:
            self.producers.update(h, first, last)
        hw = self.high_watermark
        self._maybe_advance_hw()
        if self.high_watermark == hw:  # a moved high watermark has already notified (set_high_watermark)
            self._notify()
        return info

    def append_marker(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int) -> int:
        """WriteTxnMarkers on the leader: end the producer's transaction here with a COMMIT or ABORT
        control batch; returns the marker's offset. An abort is indexed in the segment's ``.txnindex``."""
        if not self.is_leader:
            raise NotLeaderOrFollowerError(f"broker {self.broker_id} is not the leader of {self.tp}")
        code, why = self.producers.txn.check_marker(producer_id, producer_epoch, coordinator_epoch)
        if code:
            raise TidelogError(f"{self.tp}: {why}", code=code)
        kind = CONTROL_COMMIT if commit else CONTROL_ABORT
        batch = build_control_batch(kind, producer_id, producer_epoch, wall_clock_ms(), coordinator_epoch)
        header = BatchHeader.parse(batch, 0)
        info = self.log.append_validated(memoryview(batch), [(0, header)], self.leader_epoch)
        for st in self.followers.values():
            st.leader_appended()
        self._track(info, {info.first_offset: (kind, coordinator_epoch)})
        self._maybe_advance_hw()
        self._notify()
        return info.first_offset

    def append_as_follower(self, records: bytes) -> AppendInfo:
        info = self.log.append_as_follower(records)
        markers = {h.base_offset: read_marker(bytes(records[pos:pos + h.size]))
                   for pos, h in iter_batches(records) if h.is_control} if any(
            h.is_control for h, _, _ in info.batches) else {}
        self._track(info, markers)
        self._notify()
        return info

    def _track(self, info: AppendInfo, markers: dict[int, tuple[int, int] | None]) -> None:
        """Producer and transaction state of appended batches; aborted transactions go to the index."""
        for h, first, last in info.batches:
            aborted = self.producers.update(h, first, last, markers.get(first) if h.is_control else None)
            if aborted is not None:
                self.log.add_aborted(aborted)

    @property
    def last_stable_offset(self) -> int:
        """Kafka's LSO: read_committed consumers read below it (the least of the first open or not yet
        replicated transaction's first offset and the high watermark)."""
        return self.producers.txn.last_stable_offset(self.high_watermark)

    def follower_update_hw(self, leader_hw: int) -> None:
        new_hw = min(leader_hw, self.log_end_offset)
        if new_hw > self.high_watermark:
            self.set_high_watermark(new_hw)

    def truncate_to(self, offset: int) -> None:
        """Drop a divergent tail (follower); producer state is rebuilt from what remains."""
        if offset >= self.log_end_offset:
            return
        self.fail_waiters()
        self.log.truncate_to(offset)
        self.producers = restore_producer_state(self.log)
        if self.high_watermark > self.log_end_offset:
            self.high_watermark = self.log_end_offset
        self.producers.txn.on_high_watermark(self.high_watermark)  # as after a restart (see __init__)
        self._notify()

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self.log.truncate_fully_and_start_at(offset)
        delete_snapshots(self.log.directory, above=-1)
        self.producers.rebuild(())
        self.high_watermark = offset
        self._notify()

    def delete_records(self, offset: int) -> int:
        """Kafka's DeleteRecords on the leader: records below ``offset`` (-1: the high watermark) go, by
        moving the log start offset, at most to the high watermark. Returns the new log start offset."""
        if not self.is_leader:
            raise NotLeaderOrFollowerError(f"broker {self.broker_id} is not the leader of {self.tp}")
        if "delete" not in self.log.config.cleanup_policy.split(","):
            raise TidelogError(f"Records of partition {self.tp} can not be deleted due to the configured policy",
                               code=ErrorCode.POLICY_VIOLATION)
        target = self.high_watermark if offset == -1 else offset
        if target < 0:
            raise OffsetOutOfRangeError(f"The offset {offset} for partition {self.tp} is not valid")
        if target > self.high_watermark:
            raise OffsetOutOfRangeError(f"Cannot increment the log start offset to {target} of partition {self.tp} "
                                        f"since it is larger than the high watermark {self.high_watermark}")
        if self.log.increment_log_start_offset(target):
            self._notify()
            self._check_lw_waiters()
        return self.log.log_start_offset

    def follower_update_log_start(self, leader_log_start_offset: int) -> None:
        """A follower takes its leader's log start offset (from a fetch response), never past its own high
        watermark: records deleted on the leader (DeleteRecords, retention) go here too (the replica fetcher
        reports the new one in its next fetch: the leader's low watermark waits for it)."""
        target = min(leader_log_start_offset, self.high_watermark)
        if target > self.log.log_start_offset and self.log.increment_log_start_offset(target):
            self._notify()

    def _snapshot_producers(self, roll_offset: int) -> None:
        take_snapshot(self.log, roll_offset, self.producers)

    async def wait_for_hw(self, offset: int, timeout_s: float, leader_epoch: int) -> bool:
        """True once the high watermark reaches ``offset`` while this broker is still the leader
        of ``leader_epoch`` (the epoch the batch was appended in); False on timeout or lost leadership."""
        if not self.is_leader or self.leader_epoch != leader_epoch:
            return False
        if self.high_watermark >= offset:
            return True
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiter_seq += 1
        bisect.insort(self._hw_waiters, (offset, self._waiter_seq, fut))
        try:
            return await asyncio.wait_for(fut, timeout_s)
        except TimeoutError:
            return False

    # -- low watermark (DeleteRecords) ---------------------------------------------------------

    def low_watermark(self, alive: BrokerAlive) -> int:
        """Kafka's ``lowWatermarkIfLeader``: the smallest log start offset over this leader and the other
        replicas on live brokers (``replication_rules.low_watermark``)."""
        if not self.is_leader:
            raise NotLeaderOrFollowerError(f"broker {self.broker_id} is not the leader of {self.tp}")
        return rules.low_watermark(self.broker_id, self.log.log_start_offset, self.replicas, self.followers, alive)

    async def wait_for_low_watermark(self, offset: int, timeout_s: float, leader_epoch: int,
                                     alive: BrokerAlive) -> int | None:
        """The low watermark once it reaches ``offset`` while this broker still leads ``leader_epoch``;
        None on timeout or lost leadership. Woken by followers' fetches that report a new log start
        offset, by this leader's own log start moving and by metadata (replicas, live brokers)."""
        if not self.is_leader or self.leader_epoch != leader_epoch:
            return None
        low = self.low_watermark(alive)
        if low >= offset:
            return low
        fut: asyncio.Future[int | None] = asyncio.get_running_loop().create_future()
        waiter = (offset, alive, fut)
        self._lw_waiters.append(waiter)
        try:
            return await asyncio.wait_for(asyncio.shield(fut), timeout_s)
        except TimeoutError:
            return fut.result() if fut.done() else None  # reached just as the time ran out: still an answer
        finally:
            if waiter in self._lw_waiters:
                self._lw_waiters.remove(waiter)

    def _check_lw_waiters(self) -> None:
        if not self._lw_waiters:
            return
        if not self.is_leader:
            self._fail_lw_waiters()
            return
        pending = []
        for offset, alive, fut in self._lw_waiters:
            if fut.done():
                continue
            low = self.low_watermark(alive)
            if low >= offset:
                fut.set_result(low)
            else:
                pending.append((offset, alive, fut))
        self._lw_waiters = pending

    def _fail_lw_waiters(self) -> None:
        waiters, self._lw_waiters = self._lw_waiters, []
        for _, _, fut in waiters:
            if not fut.done():
                fut.set_result(None)

    # -- high watermark -------------------------------------------------------------------------

    def _maybe_advance_hw(self) -> None:
        if not self.is_leader:
            return
        new_hw = rules.high_watermark(self.broker_id, self.log_end_offset, self.log.log_start_offset, self.isr,
                                      self.pending_isr, self.followers)
        if new_hw > self.high_watermark:
            self.set_high_watermark(new_hw)

    def set_high_watermark(self, hw: int) -> None:
        hw = min(hw, self.log_end_offset)
        if hw == self.high_watermark:
            return
        self.high_watermark = hw
        self.producers.txn.on_high_watermark(hw)  # transactions whose marker is below it are stable
        if not self.is_leader:
            self.fail_waiters()  # only a leader acknowledges: a follower's HW says nothing about our appends
            return
        while self._hw_waiters and self._hw_waiters[0][0] <= hw:
            _, _, fut = self._hw_waiters.pop(0)
            if not fut.done():
                fut.set_result(True)
        self._notify()

    def update_follower(self, replica_id: int, fetch_offset: int, log_start_offset: int = -1) -> None:
        """A follower fetch outside a session (``log_start_offset`` -1: not sent, the last one stands)."""
        st = self.followers.setdefault(replica_id, FollowerState())
        before = st.log_start_offset
        st.fetched(self.clock(), fetch_offset, self.log_end_offset, log_start_offset)
        self._maybe_advance_hw()
        if st.log_start_offset != before:
            self._check_lw_waiters()

    def update_follower_in_session(self, replica_id: int, fetch_offset: int, session: FetchClock,
                                   log_start_offset: int = -1) -> None:
        """A follower fetch in a session: the follower's times follow the session's until it detaches."""
        st = self.followers.setdefault(replica_id, FollowerState())
        before = st.log_start_offset
        st.attach(session, fetch_offset, self.log_end_offset, log_start_offset)
        self._maybe_advance_hw()
        if st.log_start_offset != before:
            self._check_lw_waiters()

    def follower_attached(self, replica_id: int, session: FetchClock) -> bool:
        st = self.followers.get(replica_id)
        return st is not None and st.session is session

    def detach_follower(self, replica_id: int, session: FetchClock) -> None:
        st = self.followers.get(replica_id)
        if st is not None and st.session is session:
            st.detach()

    def isr_expansion_candidates(self, lag_time_max_ms: int) -> list[int]:
        """Followers outside the ISR that are fetching and have caught up to the high watermark (and this epoch)."""
        if not self.is_leader or all(r in self.isr for r in self.followers):
            return []  # checked ~10 times a second for every partition: the common case costs nothing
        epoch_start = self.log.epochs.end_offset_for(self.leader_epoch - 1, self.log_end_offset)[1]
        return rules.isr_expansion_candidates(self.clock(), self.isr, self.followers, self.high_watermark,
                                              epoch_start, lag_time_max_ms)

    def isr_shrink_candidates(self, lag_time_max_ms: int, now_ms: int | None = None) -> list[int]:
        """ISR followers that have not caught up for ``replica.lag.time.max.ms``."""
        if not self.is_leader or len(self.isr) == 1:
            return []  # only the leader itself is in the ISR: nobody to drop
        now = self.clock() if now_ms is None else now_ms
        return rules.isr_shrink_candidates(now, self.broker_id, self.isr, self.followers, lag_time_max_ms)

    # -- reading ----------------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, *, for_consumer: bool, min_one: bool = True,
             read_committed: bool = False) -> FetchResult:
        if for_consumer and not self.is_leader:
            raise NotLeaderOrFollowerError(f"broker {self.broker_id} is not the leader of {self.tp}")
        limit = (self.last_stable_offset if read_committed else self.high_watermark) if for_consumer else None
        if for_consumer and limit is not None and offset > limit and offset <= self.log_end_offset:
            # Between HW and LEO: not an error, just nothing visible yet.
            return FetchResult(b"", self.log.log_start_offset, self.log_end_offset)
        return self.log.read(offset, max_bytes, limit, min_one_batch=min_one)

    def offset_for_timestamp(self, timestamp: int, for_consumer: bool) -> tuple[int, int] | None:
        found = self.log.offset_for_timestamp(timestamp)
        if found is None or (for_consumer and found[0] >= self.high_watermark):
            return None
        return found

    # -- waiting ------------------------------------------------------------------------------------

    @property
    def changed(self) -> asyncio.Event:
        return self._changed

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()
        if self.on_change is not None:
            self.on_change(self.tp)

    def fail_waiters(self) -> None:
        for _, _, fut in self._hw_waiters:
            if not fut.done():
                fut.set_result(False)
        self._hw_waiters.clear()
        self._fail_lw_waiters()
        self._notify()

    def close(self) -> None:
        self.fail_waiters()
        self.log.close()
