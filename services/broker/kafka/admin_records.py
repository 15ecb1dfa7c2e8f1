"""DeleteRecords (21) on the Kafka door, as Kafka's ``deleteRecordsOnLeader`` and ``DelayedDeleteRecords``.

Clients send it to each partition's leader. ACLs, as Kafka: DELETE on the topic, else
``TOPIC_AUTHORIZATION_FAILED`` for its partitions. The leader first moves its own log start offset up to the
requested offset (-1: the high watermark): never past the high watermark (``OFFSET_OUT_OF_RANGE``), only on
topics whose ``cleanup.policy`` includes ``delete`` (``POLICY_VIOLATION``), never on internal topics
(``INVALID_TOPIC_EXCEPTION``); whole segments below the new start are deleted. Then it waits, at most the
request's ``timeout_ms``, until the partition's low watermark reaches the requested offset: the smallest
log start offset over the leader and every other assigned replica on a live (registered) broker, in the
ISR or not (``Partition.low_watermark``). Followers take the leader's log start offset from fetch
responses and report theirs in their next fetch, which wakes the wait.

Per partition the answer is the low watermark once reached (it may pass the requested offset); after the
timeout ``REQUEST_TIMED_OUT`` with the low watermark seen right after the leader's own delete; if the
leadership moved meanwhile ``NOT_LEADER_OR_FOLLOWER`` with -1 (Kafka's ``INVALID_LOW_WATERMARK``).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from services.broker.kafka.admin_common import ItemError, authorize, item_error, timeout_s
from services.broker.kafka.apis import Connection, KafkaApis, Reply
from services.broker.partition import BrokerAlive, Partition
from services.broker.pipeline import RequestContext
from shared.errors import ErrorCode
from shared.kafka.messages import RequestFrame
from shared.security.access import DELETE, TOPIC
from shared.topic_names import INTERNAL_TOPICS
from shared.types import TopicPartition

DELETE_RECORDS = 21
DELETE_RECORDS_VERSIONS = (0, 2)
INVALID_LOW_WATERMARK = -1


def register(apis: KafkaApis) -> None:
    apis.register(DELETE_RECORDS, DELETE_RECORDS_VERSIONS, handle_delete_records)


@dataclass(slots=True)
class Deleted:
    """One partition after the leader's own delete: what the wait is for and what a timeout answers."""

    part: Partition
    leader_epoch: int
    required: int  # the requested offset (-1 made the high watermark)
    low_watermark: int  # right after the leader's delete


def delete_records(apis: KafkaApis, tp: TopicPartition, offset: int, alive: BrokerAlive) -> Deleted:
    """Delete the records of ``tp`` below ``offset`` on this leader (raises with Kafka's code)."""
    if tp.topic in INTERNAL_TOPICS:
        raise ItemError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"Cannot delete records of internal topic {tp.topic}")
    part = apis.broker.rm.leader_partition(tp)
    required = part.high_watermark if offset == -1 else offset
    part.delete_records(offset)
    return Deleted(part, part.leader_epoch, required, part.low_watermark(alive))


async def wait_for_low_watermark(d: Deleted, timeout: float, alive: BrokerAlive) -> tuple[int, ErrorCode]:
    """``(low_watermark, error)`` of one deleted partition once its replicas caught up, or the timeout."""
    if d.low_watermark >= d.required:
        return d.low_watermark, ErrorCode.NONE
    low = await d.part.wait_for_low_watermark(d.required, timeout, d.leader_epoch, alive)
    if low is not None:
        return low, ErrorCode.NONE
    if d.part.is_leader and d.part.leader_epoch == d.leader_epoch:
        return d.low_watermark, ErrorCode.REQUEST_TIMED_OUT
    return INVALID_LOW_WATERMARK, ErrorCode.NOT_LEADER_OR_FOLLOWER


async def handle_delete_records(apis: KafkaApis, req: RequestFrame, ctx: RequestContext, conn: Connection) -> Reply:
    rm = apis.broker.rm

    def alive(broker_id: int) -> bool:
        return broker_id in rm.view.brokers

    timeout = timeout_s(req.body.timeout)
    answers: dict[TopicPartition, tuple[int, ErrorCode]] = {}
    pending: dict[TopicPartition, Deleted] = {}
    for t in req.body.topics:
        for p in t.partitions:
            tp = TopicPartition(t.name, int(p.partition_index))
            try:
                authorize(apis, ctx, DELETE, TOPIC, t.name)  # Kafka: DELETE on the topic
                pending[tp] = delete_records(apis, tp, int(p.offset), alive)
            except Exception as exc:
                answers[tp] = (INVALID_LOW_WATERMARK, item_error(exc, f"delete records of {tp}").code)
    waited = await asyncio.gather(*(wait_for_low_watermark(d, timeout, alive) for d in pending.values()))
    answers.update(zip(pending, waited))
    topics = []
    for t in req.body.topics:
        parts = []
        for p in t.partitions:
            low, code = answers[TopicPartition(t.name, int(p.partition_index))]
            parts.append({"partition_index": int(p.partition_index), "low_watermark": low, "error_code": int(code)})
        topics.append({"name": t.name, "partitions": parts})
    return {"topics": topics}, 0
