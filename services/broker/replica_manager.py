"""The partitions this broker hosts, and their life cycle.

Reconciles local partitions with metadata (create, delete, lead, follow), runs their followers'
fetchers, proposes ISR changes, applies retention and checkpoints high watermarks. The APIs over
the partitions (produce, fetch, list offsets) are the request layer's (``services/broker/api``);
directories and checkpoint files are the log package's (``LogDirectory``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from services.broker.fetch_sessions import LeaderSession
from services.broker.isr_sender import IsrSender
from services.broker.log.log_dir import LogDirectory
from services.broker.metadata_cache import ClusterView
from services.broker.partition import Partition
from services.broker.replica_fetcher import ReplicaFetcher
from shared.config import LONG_MAX, LogConfig
from shared.errors import (
    NotLeaderOrFollowerError,
    UnknownTopicOrPartitionError,
)
from shared.proto import tidelog_pb2 as pb
from shared.proto import tidelog_pb2_grpc as pb_grpc
from shared.types import TopicPartition

log = logging.getLogger(__name__)
#: Partitions opened per worker-thread call (each open is a few file operations).
OPEN_BATCH = 50


def wall_ms() -> int:
    return int(time.time() * 1000)




def _forget_removed_followers(part: Partition) -> None:
    """A leader stops tracking replicas no longer assigned (a completed reassignment removed them):
    their last fetch positions must not count for the ISR or the low watermark."""
    for replica in [r for r in part.followers if r not in part.replicas]:
        del part.followers[replica]


class ReplicaManager:
    def __init__(self, broker_id: int, data_dir: str, clock: Callable[[], int] = wall_ms, *,
                 replica_lag_time_max_ms: int = 30_000, replica_fetch_wait_max_ms: int = 500,
                 incarnation: str = "") -> None:
        self.broker_id = broker_id
        self.incarnation = incarnation  # our broker epoch: internal requests to the controller carry it
        self.data_dir = data_dir
        self.clock = clock
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.replica_fetch_wait_max_ms = replica_fetch_wait_max_ms
        self.partitions: dict[TopicPartition, Partition] = {}
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self.view = ClusterView()
        self._stray_check_done = False
        self.isr_sender = IsrSender(self)  # ISR proposals to the controller, in batches
        self.log_dir = LogDirectory(data_dir)  # directory layout and the high-watermark checkpoint
        self.on_isr_change: Callable[[int, int], None] | None = None  # (old size, new size): ISR metrics
        self._replicated: list[Partition] = []  # partitions led here with more than one replica
        self._under_replicated: set[Partition] = set()  # of those, the ones whose ISR lacks a replica
        # ISR shrinks need a pass over every replicated partition: at most this often (Kafka: every
        # replica.lag.time.max.ms / 2); expansions are checked every round, where the ISR lacks a replica.
        self.isr_shrink_check_interval_s = min(1.0, replica_lag_time_max_ms / 8000)
        self._next_shrink_check = 0.0
        self._any_changed = asyncio.Event()  # replaced on every change: wakes fetches over many partitions
        self.fetch_sessions: set[LeaderSession] = set()  # followers' fetch sessions: told which partitions change
        #: transaction.partition.verification.enable, for every partition opened here
        self.transaction_verification = False

    # -- metadata ---------------------------------------------------------------------------------

    async def apply_metadata(self, view: ClusterView) -> None:
        """Create, update and delete local partitions to match ``view``."""
        self.view = view
        wanted: dict[TopicPartition, tuple[str, list[int]]] = {}
        for topic in view.topics.values():
            for p, replicas in topic.assignment.items():
                if self.broker_id in replicas:
                    wanted[TopicPartition(topic.name, p)] = (topic.topic_id, replicas)
        for tp in list(self.partitions):
            if tp not in wanted:
                self._remove(tp, delete=True)
        log_configs = {name: LogConfig.from_topic_configs(view.topics[name].configs)
                       for name in {tp.topic for tp in wanted}}  # once per topic, not per partition
        missing = [(tp, topic_id, log_configs[tp.topic]) for tp, (topic_id, _) in wanted.items() if tp not in self.partitions]
        for i in range(0, len(missing), OPEN_BATCH):
            # Opening is file-system work (seconds for thousands of partitions): in a worker thread,
            # so the event loop keeps serving requests and, above all, the etcd lease.
            for tp, part in await asyncio.to_thread(self._open_many, missing[i:i + OPEN_BATCH]):
                part.on_change = self._some_partition_changed
                self.partitions[tp] = part
        for tp, (_, replicas) in wanted.items():
            config = log_configs[tp.topic]
            part = self.partitions.get(tp)
            if part is None:
                continue  # could not be opened (logged): offline on this broker
            part.log.config = config
            st = view.partitions.get(tp)
            if st is not None:
                part.update_state(st.leader, st.leader_epoch, st.isr, replicas, st.partition_epoch,
                                  int(config.extra["min.insync.replicas"]))
            _forget_removed_followers(part)
        # Only partitions with other replicas can ever change their ISR: the 10-per-second check skips the rest.
        self._replicated = [p for p in self.partitions.values() if len(p.replicas) > 1 and p.leader_id == self.broker_id]
        self._under_replicated = {p for p in self._replicated if len(p.isr) < len(p.replicas)}
        if not self._stray_check_done:
            self.log_dir.delete_strays(wanted)
            self._stray_check_done = True
        await self._update_fetchers()

    async def _update_fetchers(self) -> None:
        """Follow each partition's leader with the fetcher for that leader broker."""
        wanted: dict[int, dict[TopicPartition, int]] = {}
        for tp, part in self.partitions.items():
            leader = part.leader_id
            if part.is_leader or leader < 0 or leader == self.broker_id or leader not in self.view.brokers:
                continue
            wanted.setdefault(leader, {})[tp] = part.leader_epoch
        for leader_id, fetcher in list(self.fetchers.items()):
            address = self.view.brokers.get(leader_id, {}).get("address")
            if leader_id not in wanted or fetcher.address != address:
                del self.fetchers[leader_id]
                await fetcher.close()
        for leader_id, tps in wanted.items():
            fetcher = self.fetchers.get(leader_id)
            if fetcher is None:
                fetcher = self.fetchers[leader_id] = ReplicaFetcher(
                    self, leader_id, self.view.brokers[leader_id]["address"], max_wait_ms=self.replica_fetch_wait_max_ms)
            for tp in list(fetcher.partitions):
                if tp not in tps:
                    fetcher.remove(tp)
            for tp, epoch in tps.items():
                fetcher.add(tp, epoch)

    def fence(self) -> None:
        """Our etcd lease expired (e.g. we were paused): act as leader of nothing until metadata is re-read."""
        for part in self.partitions.values():
            if part.is_leader:
                part.fenced = True
                part.fail_waiters()
        log.warning("lease lost: leadership fenced until metadata is refreshed")

    # -- ISR maintenance -----------------------------------------------------------------------------

    def maintain_isr(self) -> None:
        """Propose ISR shrinks (lagging followers) and expansions (caught-up followers) to the controller.
        Called ~10 times a second; idle, it costs O(under-replicated partitions), plus one pass over every
        replicated partition per ``isr_shrink_check_interval_s``. Proposals are queued and sent in batches,
        one request in flight (``isr_batches``)."""
        now = time.monotonic()
        check_shrink = now >= self._next_shrink_check
        if check_shrink:
            self._next_shrink_check = now + self.isr_shrink_check_interval_s
        now_ms = self.clock()
        for part in self._replicated if check_shrink else list(self._under_replicated):
            if not part.is_leader or self.isr_sender.busy(part) or now_ms < part.isr_retry_at_ms:
                continue  # (after an answer that left its proposal unsettled, a partition waits a moment)
            shrink = part.isr_shrink_candidates(self.replica_lag_time_max_ms, now_ms) if check_shrink else []
            # A replica removed by a reassignment may still fetch until it hears of it: never propose it.
            expand = [b for b in part.isr_expansion_candidates(self.replica_lag_time_max_ms) if b in part.replicas]
            unsettled = part.pending_isr is not None and any(b not in part.isr for b in part.pending_isr)
            if not shrink and not expand and not unsettled:
                continue  # (an unsettled proposal holds the HW back: it is proposed again, even unchanged, to settle it)
            self.isr_sender.propose(part, [b for b in part.replicas if (b in part.isr and b not in shrink) or b in expand])

    async def controller_stub(self) -> pb_grpc.ControllerStub | None:
        return await self.isr_sender.controller_stub()

    async def forget_controller(self) -> None:
        await self.isr_sender.forget_controller()

    def isr_changed(self, part: Partition, isr_before: int, r: pb.AlterPartitionItemResult) -> None:
        """The controller accepted an ISR change of ``part`` (``isr_before``: its ISR size when sent)."""
        log.debug("ISR changed", extra={"tp": str(part.tp), "isr": str(list(r.isr))})
        if self.on_isr_change is not None:
            self.on_isr_change(isr_before, len(r.isr))
        part.update_state(r.leader, r.leader_epoch, list(r.isr), part.replicas, r.partition_epoch,
                          part.min_insync_replicas)
        if len(part.isr) < len(part.replicas):
            self._under_replicated.add(part)
        else:
            self._under_replicated.discard(part)

    def _open_many(self, todo: list[tuple[TopicPartition, str, LogConfig]]) -> list[tuple[TopicPartition, Partition]]:
        """Open partitions (blocking file work, run in a worker thread); failures are logged and skipped."""
        out = []
        for tp, topic_id, config in todo:
            try:
                out.append((tp, self._open(tp, topic_id, config)))
            except OSError as exc:  # e.g. out of file descriptors: this partition stays offline here
                log.error("cannot open partition", extra={"tp": str(tp), "error": exc.strerror})
        return out

    def _open(self, tp: TopicPartition, topic_id: str, config: LogConfig) -> Partition:
        plog, hw = self.log_dir.open_log(tp, topic_id, config, self.clock)
        part = Partition(tp, plog, self.broker_id, self.clock, hw)
        part.verify_transactions = self.transaction_verification
        log.info("partition opened", extra={"tp": str(tp), "log_end_offset": plog.log_end_offset,
                                            "recovered_bytes": plog.recovered_bytes})
        return part

    def _remove(self, tp: TopicPartition, delete: bool) -> None:
        part = self.partitions.pop(tp)
        part.fail_waiters()
        if delete:
            part.log.delete()
            log.info("partition deleted", extra={"tp": str(tp)})
        else:
            part.close()

    def partition(self, tp: TopicPartition) -> Partition:
        part = self.partitions.get(tp)
        if part is not None:
            return part
        topic = self.view.topics.get(tp.topic)
        if topic is None or tp.partition not in topic.assignment:
            raise UnknownTopicOrPartitionError(f"{tp} does not exist")
        raise NotLeaderOrFollowerError(f"broker {self.broker_id} hosts no replica of {tp}")

    def leader_partition(self, tp: TopicPartition) -> Partition:
        part = self.partition(tp)
        if not part.is_leader:
            raise NotLeaderOrFollowerError(f"broker {self.broker_id} is not the leader of {tp} (leader: {part.leader_id})")
        return part

    def any_change(self) -> asyncio.Event:
        """Set at the next change of any partition here (a fetch over many partitions waits on it)."""
        return self._any_changed

    def _some_partition_changed(self, tp: TopicPartition) -> None:
        self._any_changed.set()
        self._any_changed = asyncio.Event()
        for session in self.fetch_sessions:
            session.mark_dirty(tp)

    # -- housekeeping ------------------------------------------------------------------------------------------

    def housekeeping(self) -> None:
        """Retention and time-based flushes (called periodically). Each partition is only looked at:
        retention needs a rolled segment (the active one is never deleted), a time-based flush a finite
        flush.ms (flush.messages is applied on append). High watermarks: ``checkpoint_high_watermarks``."""
        now = self.clock()
        for part in list(self.partitions.values()):
            plog = part.log
            try:
                if len(plog.segments) > 1:
                    plog.apply_retention(now)
                if plog.config.flush_ms != LONG_MAX:
                    plog.maybe_flush()
            except Exception:  # one partition's failure must not stop the others (the log reports its own)
                log.debug("housekeeping failed", extra={"tp": str(part.tp)}, exc_info=True)

    async def checkpoint_high_watermarks(self) -> None:
        """Rewrite the broker's high-watermark checkpoint if a high watermark moved (or a partition came
        or went), in a worker thread."""
        current = self._high_watermarks()
        if self.log_dir.hw_changed(current):
            await asyncio.to_thread(self.log_dir.write_high_watermarks, current)

    def _high_watermarks(self) -> dict[TopicPartition, int]:
        return {tp: part.high_watermark for tp, part in self.partitions.items()}

    def leader_count(self) -> int:
        return sum(1 for p in self.partitions.values() if p.is_leader)

    def offsets_for_leader_epoch(self, tp: TopicPartition, current_epoch: int, epoch: int) -> tuple[int, int]:
        part = self.leader_partition(tp)
        part.check_epoch(current_epoch)
        return part.log.epochs.end_offset_for(epoch, part.log_end_offset)

    async def close(self) -> None:
        for fetcher in list(self.fetchers.values()):
            await fetcher.close()
        self.fetchers.clear()
        self._replicated = []
        self._under_replicated = set()
        await self.isr_sender.close()
        hws = self._high_watermarks()
        for tp in list(self.partitions):
            self._remove(tp, delete=False)
        if self.log_dir.opened_any:  # something was opened: record where every HW stands
            self.log_dir.write_high_watermarks(hws)
