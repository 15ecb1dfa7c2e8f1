"""The one fetch reader: how a partition is read for a fetch, whoever fetches.

Consumer fetches (both doors, through ``ReplicaManager.fetch``), sessionless follower fetches and
follower session fetches (``follower_sessions``) all read a partition here: look it up, check the
request's leader epoch, require leadership, read at most ``budget`` bytes (consumers only below the
high watermark), and turn a refusal into the partition's error result. Callers keep only what is
theirs: the long poll, which partitions to read, and the follower state that a fetch moves.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from services.broker.replica_results import FetchPartitionResult
from shared.errors import NotLeaderOrFollowerError, TidelogError
from shared.records.header import next_offset_after
from shared.types import TopicPartition

if TYPE_CHECKING:
    from services.broker.partition import Partition
    from services.broker.replica_manager import ReplicaManager


def read_partition(rm: ReplicaManager, tp: TopicPartition, offset: int, leader_epoch: int, budget: int, *,
                   for_consumer: bool, min_one: bool, read_committed: bool = False,
                   before_read: Callable[[Partition], None] | None = None) -> FetchPartitionResult:
    """One partition's answer; ``before_read`` (followers) runs once the partition is known to be led
    here at the request's epoch, before the read. ``read_committed`` (consumers) reads below the last
    stable offset and names the aborted transactions the returned records overlap."""
    try:
        part = rm.partition(tp)
        part.check_epoch(leader_epoch)
        if not for_consumer:
            if not part.is_leader:
                raise NotLeaderOrFollowerError(f"broker {rm.broker_id} is not the leader of {tp}")
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
