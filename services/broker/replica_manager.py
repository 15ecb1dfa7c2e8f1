"""The partitions this broker hosts, and the produce / fetch / list-offsets logic over them.

Reconciles local partitions with metadata (create, delete, lead, follow),
appends produce requests, answers fetches with a long poll, and serves
offset lookups. Works on domain values; ``server.py`` translates protobuf.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from services.broker.log import PartitionLog
from services.broker.metadata_cache import ClusterView
from services.broker.partition import Partition
from shared.config import LogConfig, effective_configs
from shared.errors import (
    ErrorCode,
    NotLeaderOrFollowerError,
    TidelogError,
    UnknownTopicOrPartitionError,
)
from shared.records.batch import HEADER_SIZE, LOG_OVERHEAD
from shared.types import TopicPartition

log = logging.getLogger(__name__)
TOPIC_ID_FILE = "partition.metadata"


def wall_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class ProduceResult:
    error: ErrorCode = ErrorCode.NONE
    message: str = ""
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    last_offset: int = -1


@dataclass
class FetchPartitionResult:
    error: ErrorCode = ErrorCode.NONE
    message: str = ""
    high_watermark: int = -1
    log_start_offset: int = -1
    log_end_offset: int = -1
    leader_epoch: int = -1
    records: bytes = b""


@dataclass
class FetchSpec:
    tp: TopicPartition
    offset: int
    max_bytes: int
    leader_epoch: int = -1


@dataclass
class FetchParams:
    replica_id: int = -1
    max_wait_ms: int = 0
    min_bytes: int = 1
    max_bytes: int = 50 * 1024 * 1024
    specs: list[FetchSpec] = field(default_factory=list)


def _first_batch_size(data: bytes) -> int:
    if len(data) < HEADER_SIZE:
        return 0
    return int.from_bytes(data[8:12], "big", signed=True) + LOG_OVERHEAD


class ReplicaManager:
    def __init__(self, broker_id: int, data_dir: str, clock: Callable[[], int] = wall_ms) -> None:
        self.broker_id = broker_id
        self.data_dir = data_dir
        self.clock = clock
        self.partitions: dict[TopicPartition, Partition] = {}
        self.view = ClusterView()
        self._stray_check_done = False

    # -- metadata ---------------------------------------------------------------------------------

    def _dir(self, tp: TopicPartition) -> str:
        return os.path.join(self.data_dir, f"{tp.topic}-{tp.partition}")

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
        for tp, (topic_id, replicas) in wanted.items():
            overrides = view.topics[tp.topic].configs
            configs = effective_configs(overrides)
            part = self.partitions.get(tp) or self._open(tp, topic_id, overrides)
            part.log.config = LogConfig.from_topic_configs(overrides)
            st = view.partitions.get(tp)
            if st is not None:
                part.update_state(st.leader, st.leader_epoch, st.isr, replicas, st.partition_epoch,
                                  int(configs["min.insync.replicas"]))
        if not self._stray_check_done:
            self._delete_strays(set(wanted))
            self._stray_check_done = True

    def _open(self, tp: TopicPartition, topic_id: str, overrides: dict[str, object]) -> Partition:
        path = self._dir(tp)
        id_file = os.path.join(path, TOPIC_ID_FILE)
        if os.path.isdir(path):
            try:
                with open(id_file) as f:
                    existing = f.read().strip()
            except FileNotFoundError:
                existing = ""
            if existing != topic_id:  # a log left from an older topic with the same name
                shutil.rmtree(path, ignore_errors=True)
        os.makedirs(path, exist_ok=True)
        with open(id_file, "w") as f:
            f.write(topic_id)
        plog = PartitionLog(path, LogConfig.from_topic_configs(overrides), self.clock)
        part = Partition(tp, plog, self.broker_id, self.clock)
        self.partitions[tp] = part
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

    def _delete_strays(self, wanted: set[TopicPartition]) -> None:
        known = {f"{tp.topic}-{tp.partition}" for tp in wanted}
        for name in os.listdir(self.data_dir):
            path = os.path.join(self.data_dir, name)
            if os.path.isdir(path) and os.path.exists(os.path.join(path, TOPIC_ID_FILE)) and name not in known:
                shutil.rmtree(path, ignore_errors=True)
                log.info("stray partition directory deleted", extra={"dir": name})

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

    # -- produce ------------------------------------------------------------------------------------

    async def produce(self, acks: int, timeout_ms: int, data: list[tuple[TopicPartition, bytes]]) -> dict[TopicPartition, ProduceResult]:
        results: dict[TopicPartition, ProduceResult] = {}
        if acks not in (0, 1, -1):
            return {tp: ProduceResult(ErrorCode.INVALID_REQUIRED_ACKS, f"acks must be 0, 1 or -1, got {acks}") for tp, _ in data}
        waits: list[tuple[TopicPartition, Partition, int]] = []
        for tp, records in data:
            try:
                part = self.leader_partition(tp)
                info = part.append_as_leader(records, acks)
                results[tp] = ProduceResult(base_offset=info.first_offset, log_append_time=info.log_append_time,
                                            log_start_offset=info.log_start_offset, last_offset=info.last_offset)
                if acks == -1:
                    waits.append((tp, part, info.last_offset + 1))
            except TidelogError as exc:
                results[tp] = ProduceResult(exc.code, str(exc))
            except Exception as exc:  # never let one partition's failure crash the request
                log.exception("produce failed", extra={"tp": str(tp)})
                results[tp] = ProduceResult(ErrorCode.UNKNOWN_SERVER_ERROR, str(exc))
        if waits:
            timeout = max(timeout_ms, 0) / 1000
            done = await asyncio.gather(*(part.wait_for_hw(off, timeout) for _, part, off in waits))
            for (tp, part, _), ok in zip(waits, done):
                if not ok:
                    code = ErrorCode.REQUEST_TIMED_OUT if part.is_leader else ErrorCode.NOT_LEADER_OR_FOLLOWER
                    results[tp] = ProduceResult(code, f"{tp}: not replicated to the ISR within {timeout_ms} ms")
        return results

    # -- fetch ----------------------------------------------------------------------------------------

    def _read_once(self, params: FetchParams) -> tuple[dict[TopicPartition, FetchPartitionResult], int, bool]:
        out: dict[TopicPartition, FetchPartitionResult] = {}
        total = 0
        error = False
        for spec in params.specs:
            try:
                part = self.partition(spec.tp)
                part.check_epoch(spec.leader_epoch)
                if params.replica_id >= 0:
                    if not part.is_leader:
                        raise NotLeaderOrFollowerError(f"broker {self.broker_id} is not the leader of {spec.tp}")
                    part.update_follower(params.replica_id, spec.offset)
                budget = min(spec.max_bytes, params.max_bytes - total)
                data = part.read(spec.offset, max(budget, 0), for_consumer=params.replica_id < 0, min_one=total == 0)
                if budget <= 0 and total > 0:
                    data_bytes = b""
                else:
                    data_bytes = data.records
                total += len(data_bytes)
                out[spec.tp] = FetchPartitionResult(
                    high_watermark=part.high_watermark, log_start_offset=data.log_start_offset,
                    log_end_offset=data.log_end_offset, leader_epoch=part.leader_epoch, records=data_bytes,
                )
            except TidelogError as exc:
                error = True
                hw = self.partitions[spec.tp].high_watermark if spec.tp in self.partitions else -1
                out[spec.tp] = FetchPartitionResult(exc.code, str(exc), high_watermark=hw)
        return out, total, error

    async def fetch(self, params: FetchParams) -> dict[TopicPartition, FetchPartitionResult]:
        deadline = time.monotonic() + max(params.max_wait_ms, 0) / 1000
        while True:
            results, total, error = self._read_once(params)
            remaining = deadline - time.monotonic()
            if total >= params.min_bytes or error or remaining <= 0:
                return results
            events = [self.partitions[s.tp].changed for s in params.specs if s.tp in self.partitions]
            if not events:
                return results
            waiters = [asyncio.ensure_future(ev.wait()) for ev in events]
            try:
                await asyncio.wait(waiters, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waiters:
                    w.cancel()

    # -- list offsets --------------------------------------------------------------------------------------

    def list_offset(self, tp: TopicPartition, timestamp: int, replica_id: int, leader_epoch: int = -1) -> tuple[int, int, int]:
        """``(offset, timestamp, leader_epoch)``; offset -1 when no record qualifies."""
        part = self.leader_partition(tp)
        part.check_epoch(leader_epoch)
        for_consumer = replica_id < 0
        if timestamp == -2:
            return part.log.log_start_offset, -1, part.leader_epoch
        if timestamp == -1:
            return (part.high_watermark if for_consumer else part.log_end_offset), -1, part.leader_epoch
        found = part.offset_for_timestamp(timestamp, for_consumer)
        if found is None:
            return -1, -1, part.leader_epoch
        return found[0], found[1], part.leader_epoch

    # -- housekeeping ------------------------------------------------------------------------------------------

    def housekeeping(self) -> None:
        """Retention, time-based flushes and HW checkpoints (called periodically)."""
        for part in list(self.partitions.values()):
            with contextlib.suppress(Exception):
                part.log.apply_retention()
                part.log.maybe_flush()
                part.checkpoint_hw()

    def close(self) -> None:
        for tp in list(self.partitions):
            self._remove(tp, delete=False)
