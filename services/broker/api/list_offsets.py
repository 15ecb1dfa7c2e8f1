"""ListOffsets, for both doors: per partition, the offset for a timestamp (-1 latest, -2 earliest,
-3 max timestamp, else the first offset at or after the time) on the leader. ACLs: DESCRIBE on the topic,
else ``TOPIC_AUTHORIZATION_FAILED`` for its partitions (Kafka's rule)."""

from __future__ import annotations

from dataclasses import dataclass

from services.broker.api import BrokerApi
from services.broker.log.max_timestamp import MAX_TIMESTAMP, offset_of_max_timestamp
from services.broker.replica_manager import ReplicaManager
from shared.errors import ErrorCode, TidelogError
from shared.request_context import RequestContext
from shared.security.access import DESCRIBE, TOPIC
from shared.types import TopicPartition


@dataclass(slots=True)
class OffsetQuery:
    tp: TopicPartition
    timestamp: int
    current_leader_epoch: int = -1


@dataclass(slots=True)
class OffsetAnswer:
    tp: TopicPartition
    error: ErrorCode = ErrorCode.NONE
    message: str = ""
    offset: int = -1
    timestamp: int = -1
    leader_epoch: int = -1


def list_offsets(b: BrokerApi, queries: list[OffsetQuery], replica_id: int = -1,
                 isolation_level: int = 0, ctx: RequestContext | None = None) -> list[OffsetAnswer]:
    """``isolation_level`` 1 (read_committed): latest is the last stable offset, and a timestamp's offset
    counts only below it, as Kafka."""
    answers = []
    access = b.pipeline.access
    denied: set[str] = set()
    if access.enabled and ctx is not None:
        denied = {name for name in {q.tp.topic for q in queries} if not access.check(ctx, DESCRIBE, TOPIC, name)}
    for q in queries:
        if q.tp.topic in denied:
            answers.append(OffsetAnswer(q.tp, ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                        f"{ctx.kafka_principal if ctx else ''} may not describe {q.tp.topic}"))
            continue
        try:
            offset, ts, epoch = list_offset(b.rm, q.tp, q.timestamp, replica_id, q.current_leader_epoch,
                                            isolation_level == 1)
            answers.append(OffsetAnswer(q.tp, offset=offset, timestamp=ts, leader_epoch=epoch))
        except TidelogError as exc:
            answers.append(OffsetAnswer(q.tp, exc.code, str(exc)))
    return answers


def list_offset(rm: ReplicaManager, tp: TopicPartition, timestamp: int, replica_id: int,
                leader_epoch: int = -1, read_committed: bool = False) -> tuple[int, int, int]:
    """``(offset, timestamp, leader_epoch)`` on the leader; offset -1 when no record qualifies."""
    part = rm.leader_partition(tp)
    part.check_epoch(leader_epoch)
    for_consumer = replica_id < 0
    visible = part.last_stable_offset if read_committed else part.high_watermark
    if timestamp == -2:
        return part.log.log_start_offset, -1, part.leader_epoch
    if timestamp == -1:
        return (visible if for_consumer else part.log_end_offset), -1, part.leader_epoch
    if timestamp == MAX_TIMESTAMP:
        found = offset_of_max_timestamp(part.log)
        if found is None or (for_consumer and found[0] >= visible):
            return -1, -1, part.leader_epoch
        return found[0], found[1], part.leader_epoch
    if timestamp < 0:
        raise TidelogError(f"timestamp {timestamp}: use -1 (latest), -2 (earliest), -3 (max timestamp) "
                           "or a time in ms", code=ErrorCode.INVALID_REQUEST)
    found = part.offset_for_timestamp(timestamp, for_consumer)
    if found is None or (for_consumer and found[0] >= visible):
        return -1, -1, part.leader_epoch
    return found[0], found[1], part.leader_epoch
