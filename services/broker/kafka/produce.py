"""Produce (API key 0) on the Kafka door: the received batches go to the request layer as the bytes
they arrived in (never decoded into records and re-encoded); acks=0 gets no response, as Kafka.
A transactional produce is verified with the transaction coordinator first (``txn_verify``, KIP-890).
ACLs first of all (``produce_api.authorize``, the gRPC door's rule): TRANSACTIONAL_ID WRITE for a
transactional request, WRITE on each topic; refusals are answered per partition."""

from __future__ import annotations

from services.broker.api import produce as produce_api
from services.broker.kafka.apis import Connection, KafkaApis, Reply
from services.broker.pipeline import RequestContext
from services.broker.replica_results import ProduceResult
from shared.errors import ErrorCode
from shared.kafka.messages import RequestFrame
from shared.records.compression import CompressionType
from shared.records.header import ATTR_COMPRESSION_MASK, peek_attributes, whole_batch_size
from shared.types import TopicPartition

API_KEY = 0
VERSIONS = (3, 11)  # v12 (KIP-890 part 2: the leader adds the partition to the transaction) is not claimed
#: The first Produce version whose clients know TRANSACTION_ABORTABLE (KIP-890); before it, INVALID_TXN_STATE.
ABORTABLE_SINCE = 11


async def handle(apis: KafkaApis, req: RequestFrame, ctx: RequestContext, conn: Connection) -> Reply:
    body = req.body
    acks = int(body.acks)
    data = [(TopicPartition(t.name, int(p.index)), p.records or b"")
            for t in body.topic_data for p in t.partition_data]
    timeout_ms = int(body.timeout.total_seconds() * 1000)
    refused = {tp: r for tp, records in data if (r := _version_rule(records, req.api.version)) is not None}
    if apis.pipeline.access.enabled:
        refused.update(produce_api.authorize(apis.broker, ctx, body.transactional_id, data))
    if body.transactional_id is not None:
        refused.update(await _verify(apis, body.transactional_id, req.api.version,
                                     [d for d in data if d[0] not in refused]))
    b = apis.broker
    pending = produce_api.append(b, ctx, produce_api.ProduceCall(acks, timeout_ms,
                                                                 [d for d in data if d[0] not in refused]))
    results = produce_api.ready(b, pending)
    if results is None:
        results = await produce_api.complete(b, pending)
    if refused:
        results = {tp: refused.get(tp) or results[tp] for tp, _ in data}
    if acks == 0:
        # No response to say it failed: as Kafka, close the connection so the client refreshes its metadata.
        conn.close_after_reply = any(r.error for r in results.values())
        return None, pending.throttle_ms
    return _response(results), pending.throttle_ms


async def _verify(apis: KafkaApis, transactional_id: str, version: int,
                  data: list[tuple[TopicPartition, bytes]]) -> dict[TopicPartition, ProduceResult]:
    """KIP-890 part 1, as the gRPC door: a transaction's first batch on a partition is appended only once
    the transaction coordinator confirms the partition is in the transaction (the client added it: these
    versions are transactions V1, ``verify_only``). Refusals come back per partition."""
    verifier = apis.broker.txn_verifier
    if verifier is None or not data:
        return {}
    refused: dict[TopicPartition, ProduceResult] = await verifier.verify(
        transactional_id, 1, data, abortable_known=version >= ABORTABLE_SINCE)
    return refused


def _version_rule(records: bytes, version: int) -> ProduceResult | None:
    """Kafka's rules of the Produce request itself (``ProduceRequest.validateRecords``): from v3 exactly
    one record batch per partition; zstd only from v7. The batch itself is the validator's."""
    size = whole_batch_size(records, 0, len(records))
    if size is None:
        return None  # not even one whole batch: the validator names what is wrong
    if size != len(records):
        return ProduceResult(ErrorCode.INVALID_RECORD, "produce requests of version 3 or above must carry exactly "
                                                       "one record batch per partition")
    if version < 7 and peek_attributes(records) & ATTR_COMPRESSION_MASK == CompressionType.ZSTD:
        return ProduceResult(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                             "zstd-compressed batches need produce request version 7 or above")
    return None


def _response(results: dict[TopicPartition, ProduceResult]) -> dict[str, object]:
    by_topic: dict[str, list[dict[str, object]]] = {}
    for tp, r in results.items():
        by_topic.setdefault(tp.topic, []).append({
            "index": tp.partition, "error_code": int(r.error), "base_offset": r.base_offset,
            "log_append_time": r.log_append_time, "log_start_offset": r.log_start_offset,
            "error_message": r.message or None,
        })
    return {"responses": [{"name": t, "partition_responses": parts} for t, parts in by_topic.items()]}
