"""The one fetch reader: how a partition is read for a fetch, whoever fetches.

Consumer fetches (both doors, through ``ReplicaManager.fetch``), sessionless follower fetches and
follower session fetches (``follower_sessions``) all read a partition here: look it up, check the
request's leader epoch, require leadership, read at most ``budget`` bytes (consumers only below the
high watermark), and turn a refusal into the partition's error result. Callers keep only what is
theirs: the long poll, which partitions to read, and the follower state that a fetch moves.

A follower's fetch moves the leader's view of it (its log end, the ISR, the high watermark) only when it
is believable even on a plaintext cluster (Kafka's KIP-380 / KIP-903 broker epoch): ``replica_refusal``
requires the request's ``replica_epoch`` to be the epoch of the broker's current registration in etcd
(``broker_epoch`` of its incarnation), else ``STALE_BROKER_EPOCH``; and ``read_partition`` requires the
replica id to be one of the partition's replicas, else ``NOT_LEADER_OR_FOLLOWER`` (Kafka's
``followerReplicaOrThrow``). Both refuse before anything is read or moved. A process that knows a
broker's current incarnation (``/v1/cluster`` shows it) still passes on plaintext: only mTLS (issue 23)
tells who is really asking.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from services.broker.replica_results import FetchPartitionResult
from shared.errors import ErrorCode, NotLeaderOrFollowerError, TidelogError
from shared.records.header import next_offset_after
from shared.types import TopicPartition

if TYPE_CHECKING:
    from services.broker.partition import Partition
    from services.broker.replica_manager import ReplicaManager


_INCARNATION = re.compile(r"(\d{1,16})-([0-9a-f]{8})")


def broker_epoch(incarnation: str) -> int:
    """The broker epoch (``FetchRequest.replica_epoch``) of a broker incarnation: positive, and larger
    for a later start (``<ms>-<8 hex>``: the start time in ms, then 20 bits of the random part)."""
    m = _INCARNATION.fullmatch(incarnation)
    if m is not None:
        return (int(m.group(1)) << 20) | (int(m.group(2), 16) & 0xFFFFF)
    if not incarnation:
        return -1  # nothing registered: no request's epoch matches it
    return int.from_bytes(hashlib.blake2b(incarnation.encode(), digest_size=8).digest(), "big") >> 2 or 1


def replica_refusal(brokers: Mapping[int, Mapping[str, Any]], replica_id: int, replica_epoch: int) -> ErrorCode:
    """Why a follower fetch from ``replica_id`` carrying ``replica_epoch`` must not count (``NONE``: it may):
    the broker is not registered, or the epoch is not that of its current registration (absent, stale or
    made up): ``STALE_BROKER_EPOCH``."""
    reg = brokers.get(replica_id)
    if reg is None:
        return ErrorCode.STALE_BROKER_EPOCH
    expected = broker_epoch(str(reg.get("incarnation", "")))
    if expected < 0 or replica_epoch != expected:
        return ErrorCode.STALE_BROKER_EPOCH
    return ErrorCode.NONE


def refused(code: ErrorCode, high_watermark: int = -1) -> FetchPartitionResult:
    return FetchPartitionResult(code, code.name, high_watermark=high_watermark)


def read_partition(rm: ReplicaManager, tp: TopicPartition, offset: int, leader_epoch: int, budget: int, *,
                   for_consumer: bool, min_one: bool, read_committed: bool = False,
                   before_read: Callable[[Partition], None] | None = None,
                   replica_id: int = -1) -> FetchPartitionResult:
    """One partition's answer; ``before_read`` (followers) runs once the partition is known to be led
    here at the request's epoch and ``replica_id`` (followers) is one of its replicas, before the read.
    ``read_committed`` (consumers) reads below the last stable offset and names the aborted transactions
    the returned records overlap."""
    try:
        part = rm.partition(tp)
        part.check_epoch(leader_epoch)
        if not for_consumer:
            if not part.is_leader:
                raise NotLeaderOrFollowerError(f"broker {rm.broker_id} is not the leader of {tp}")
            if replica_id == rm.broker_id or replica_id not in part.replicas:
                raise NotLeaderOrFollowerError(f"broker {replica_id} is not a follower of {tp}")
            if before_read is not None:
                before_read(part)
        data = part.read(offset, max(budget, 0), for_consumer=for_consumer, min_one=min_one,
                         read_committed=read_committed)
        aborted = None
        if read_committed:
            end = next_offset_after(data.records, offset)
            aborted = [(a.producer_id, a.first_offset)
                       for a in part.log.aborted_transactions(offset, end)] if end > offset else []
        return FetchPartitionResult(high_watermark=part.high_watermark, log_start_offset=data.log_start_offset,
                                    log_end_offset=data.log_end_offset, leader_epoch=part.leader_epoch,
                                    records=data.records, last_stable_offset=part.last_stable_offset,
                                    aborted=aborted)
    except TidelogError as exc:
        hw = rm.partitions[tp].high_watermark if tp in rm.partitions else -1
        return FetchPartitionResult(exc.code, exc.args[0] if exc.args else exc.code.name, high_watermark=hw)
