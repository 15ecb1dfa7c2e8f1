"""Produce (API key 0) on the Kafka door: the received batches go to the request layer as the bytes
they arrived in (never decoded into records and re-encoded); acks=0 gets no response, as Kafka."""

from __future__ import annotations

from services.broker.api import produce as produce_api
from services.broker.kafka.apis import Connection, KafkaApis, Reply
from services.broker.pipeline import RequestContext
from services.broker.replica_manager import ProduceResult
from shared.errors import ErrorCode
from shared.kafka.messages import RequestFrame
from shared.types import TopicPartition

API_KEY = 0
VERSIONS = (3, 11)  # v12 (KIP-890 part 2: implicit AddPartitionsToTxn) comes with transactions


async def handle(apis: KafkaApis, req: RequestFrame, ctx: RequestContext, conn: Connection) -> Reply:
    body = req.body
    acks = int(body.acks)
    data = [(TopicPartition(t.name, int(p.index)), p.records or b"")
            for t in body.topic_data for p in t.partition_data]
    if body.transactional_id is not None:
        # Transactions come with their own issue; until then a transactional produce is refused as a whole.
        results = {tp: ProduceResult(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                                                 "transactions are not supported by this broker yet")
                   for tp, _ in data}
        return (None if acks == 0 else _response(results)), 0
    timeout_ms = int(body.timeout.total_seconds() * 1000)
    b = apis.broker
    pending = produce_api.append(b, ctx, produce_api.ProduceCall(acks, timeout_ms, data))
    results = produce_api.ready(b, pending)
    if results is None:
        results = await produce_api.complete(b, pending)
    if acks == 0:
        return None, pending.throttle_ms
    return _response(results), pending.throttle_ms


def _response(results: dict[TopicPartition, ProduceResult]) -> dict[str, object]:
    by_topic: dict[str, list[dict[str, object]]] = {}
    for tp, r in results.items():
        by_topic.setdefault(tp.topic, []).append({
            "index": tp.partition, "error_code": int(r.error), "base_offset": r.base_offset,
            "log_append_time": r.log_append_time, "log_start_offset": r.log_start_offset,
            "error_message": r.message or None,
        })
    return {"responses": [{"name": t, "partition_responses": parts} for t, parts in by_topic.items()]}
