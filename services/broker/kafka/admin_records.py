"""DeleteRecords (21) on the Kafka door: clients send it to each partition's leader, which moves the
partition's log start offset up to the requested offset (-1: the high watermark), as Kafka's
``deleteRecordsOnLeader`` does: never past the high watermark (``OFFSET_OUT_OF_RANGE``), only on topics
whose ``cleanup.policy`` includes ``delete`` (``POLICY_VIOLATION``), never on internal topics
(``INVALID_TOPIC_EXCEPTION``). Whole segments below the new start are deleted.

``low_watermark`` is the leader's new log start offset: the leader does not track its followers' log
start offsets (Kafka answers the lowest over the replicas, waiting for them up to the request timeout).
Followers take the leader's log start offset from fetch responses (``Partition.follower_update_log_start``)
— that call must be made by the replica fetcher before this API is claimed (see ``register``).
"""

from __future__ import annotations

from services.broker.kafka.admin_common import ItemError, item_error
from services.broker.kafka.apis import Connection, KafkaApis, Reply
from services.broker.pipeline import RequestContext
from shared.errors import ErrorCode
from shared.kafka.messages import RequestFrame
from shared.topic_names import INTERNAL_TOPICS
from shared.types import TopicPartition

DELETE_RECORDS = 21
DELETE_RECORDS_VERSIONS = (0, 2)


def register(apis: KafkaApis) -> None:
    apis.register(DELETE_RECORDS, DELETE_RECORDS_VERSIONS, handle_delete_records)


def delete_records(apis: KafkaApis, tp: TopicPartition, offset: int) -> int:
    """The new low watermark of ``tp`` after deleting the records below ``offset`` (raises with Kafka's code)."""
    if tp.topic in INTERNAL_TOPICS:
        raise ItemError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"Cannot delete records of internal topic {tp.topic}")
    return apis.broker.rm.leader_partition(tp).delete_records(offset)


async def handle_delete_records(apis: KafkaApis, req: RequestFrame, ctx: RequestContext, conn: Connection) -> Reply:
    topics = []
    for t in req.body.topics:
        parts = []
        for p in t.partitions:
            tp = TopicPartition(t.name, int(p.partition_index))
            try:
                low = delete_records(apis, tp, int(p.offset))
                parts.append({"partition_index": tp.partition, "low_watermark": low, "error_code": 0})
            except Exception as exc:
                err = item_error(exc, f"delete records of {tp}")
                parts.append({"partition_index": tp.partition, "low_watermark": -1, "error_code": int(err.code)})
        topics.append({"name": t.name, "partitions": parts})
    return {"topics": topics}, 0
