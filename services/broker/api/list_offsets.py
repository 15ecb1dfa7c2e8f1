"""ListOffsets, for both doors: per partition, the offset for a timestamp (-1 latest, -2 earliest,
-3 max timestamp, else the first offset at or after the time) on the leader."""

from __future__ import annotations

from dataclasses import dataclass

from services.broker.api import BrokerApi
from shared.errors import ErrorCode, TidelogError
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


def list_offsets(b: BrokerApi, queries: list[OffsetQuery], replica_id: int = -1) -> list[OffsetAnswer]:
    answers = []
    for q in queries:
        try:
            offset, ts, epoch = b.rm.list_offset(q.tp, q.timestamp, replica_id, q.current_leader_epoch)
            answers.append(OffsetAnswer(q.tp, offset=offset, timestamp=ts, leader_epoch=epoch))
        except TidelogError as exc:
            answers.append(OffsetAnswer(q.tp, exc.code, str(exc)))
    return answers
