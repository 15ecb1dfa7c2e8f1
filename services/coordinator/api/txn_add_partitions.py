"""AddPartitionsToTxn: the partitions a transaction writes to (transactions V1 clients), or, with
``verify_only``, whether each is already in the open transaction (a partition leader verifying a
transactional produce, KIP-890 part 1: TRANSACTION_ABORTABLE for one that is not).

As Kafka: partitions of topics that do not exist are UNKNOWN_TOPIC_OR_PARTITION and then the others
OPERATION_NOT_ATTEMPTED; a request-level error (NOT_COORDINATOR, ...) is also set on every partition.

When security is on (``authz``): ``verify_only`` comes from partition leaders (or a group coordinator
verifying a TxnOffsetCommit) only: a broker's or coordinator's service certificate with CLUSTER_ACTION, else CLUSTER_AUTHORIZATION_FAILED); otherwise, as Kafka,
TRANSACTIONAL_ID WRITE (TRANSACTIONAL_ID_AUTHORIZATION_FAILED on every partition) and TOPIC WRITE per
topic (TOPIC_AUTHORIZATION_FAILED, the others OPERATION_NOT_ATTEMPTED)."""

from __future__ import annotations

from services.coordinator.authz import Op, Res, allowed, denied_message, internal_refusal, split_topics
from services.coordinator.group import GroupError
from services.coordinator.txn.decisions import Decision
from services.coordinator.txn.shard import TxnShard
from services.coordinator.txn_service import TxnService
from shared.errors import ErrorCode
from shared.proto import transactions_pb2 as tpb
from shared.request_context import RequestContext
from shared.security.access import access_of
from shared.types import TopicPartition

#: How long AddPartitionsToTxn waits for the previous transaction's markers and completion before
#: answering CONCURRENT_TRANSACTIONS (the markers usually take a millisecond or two).
CONCURRENT_WAIT_S = 0.1


async def txn_add_partitions(t: TxnService, ctx: RequestContext,
                             request: tpb.AddPartitionsToTxnRequest) -> tpb.AddPartitionsToTxnResponse:
    parts = [TopicPartition(topic.name, p) for topic in request.topics for p in topic.partitions]
    txn_id = request.transactional_id
    if not txn_id:
        return _all(parts, ErrorCode.INVALID_REQUEST, "transactional_id is required")
    if (access := access_of(t)) is not None:
        if request.verify_only:
            if (why := internal_refusal(access, ctx, "broker", "coordinator")) is not None:
                return _all(parts, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, why)
        else:
            if not allowed(access, ctx, Op.WRITE, Res.TRANSACTIONAL_ID, txn_id):
                return _all(parts, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                            denied_message(Op.WRITE, Res.TRANSACTIONAL_ID, txn_id))
            if denied := split_topics(access, ctx, Op.WRITE, (tp.topic for tp in parts)):
                return _answer({tp: ErrorCode.TOPIC_AUTHORIZATION_FAILED if tp.topic in denied
                                else ErrorCode.OPERATION_NOT_ATTEMPTED for tp in parts})
    try:
        pr = t.runtime.txn_runtime_for(txn_id)
        if request.verify_only:
            return _answer(pr.shard.verify_partitions(txn_id, request.producer_id, request.producer_epoch, parts))
        topics = t.runtime.view.topics
        unknown = {tp for tp in parts if tp.partition < 0 or tp.partition >= topics.get(tp.topic, ("", 0))[1]}
        if unknown:
            return _answer({tp: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown
                            else ErrorCode.OPERATION_NOT_ATTEMPTED for tp in parts})
        version = max(1, request.client_transaction_version)
        def decide(shard: TxnShard) -> Decision:
            return shard.add_partitions(txn_id, request.producer_id, request.producer_epoch, parts, t.now_ms(),
                                        version)

        d = decide(pr.shard)
        if d.error == ErrorCode.CONCURRENT_TRANSACTIONS and (
                done := await t.after_completion(pr, txn_id, decide, CONCURRENT_WAIT_S)) is not None:
            # only the previous transaction's markers were in the way (V2: the next transaction's first
            # partition right after EndTxn): decided on the completed state and written with the
            # completion, not sent back for a backoff
            d = done
        else:
            await t.apply(pr, d)
    except GroupError as exc:
        return _all(parts, exc.code, str(exc))
    response = _answer({tp: d.error for tp in parts})
    response.error_message = d.message
    return response


def _all(parts: list[TopicPartition], code: ErrorCode, message: str) -> tpb.AddPartitionsToTxnResponse:
    response = _answer({tp: code for tp in parts})
    response.error_code, response.error_message = code, message
    return response


def _answer(codes: dict[TopicPartition, ErrorCode]) -> tpb.AddPartitionsToTxnResponse:
    by_topic: dict[str, list[tpb.TxnPartitionResult]] = {}
    for tp, code in codes.items():
        by_topic.setdefault(tp.topic, []).append(tpb.TxnPartitionResult(partition=tp.partition, error_code=code))
    return tpb.AddPartitionsToTxnResponse(results=[tpb.TxnTopicResult(name=name, partitions=ps)
                                                   for name, ps in by_topic.items()])
