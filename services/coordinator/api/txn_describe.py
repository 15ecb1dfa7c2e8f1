"""DescribeTransactions (kafka-transactions.sh describe): each id's state at its coordinator. An id
this instance does not serve is NOT_COORDINATOR (or loading: COORDINATOR_LOAD_IN_PROGRESS); an unknown
one TRANSACTIONAL_ID_NOT_FOUND. When security is on (``authz``), an id the principal may not DESCRIBE is
TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as Kafka."""

from __future__ import annotations

from services.coordinator.authz import Op, Res, allowed
from services.coordinator.group import GroupError
from services.coordinator.txn.state import TxnMetadata
from services.coordinator.txn_service import TxnService
from shared.errors import ErrorCode
from shared.proto import transactions_pb2 as tpb
from shared.request_context import RequestContext
from shared.security.access import access_of


async def txn_describe(t: TxnService, ctx: RequestContext,
                       request: tpb.DescribeTransactionsRequest) -> tpb.DescribeTransactionsResponse:
    out = []
    access = access_of(t)
    for txn_id in request.transactional_ids:
        if access is not None and not allowed(access, ctx, Op.DESCRIBE, Res.TRANSACTIONAL_ID, txn_id):
            out.append(tpb.DescribedTransaction(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                                                transactional_id=txn_id))
            continue
        try:
            pr = t.runtime.txn_runtime_for(txn_id)
        except GroupError as exc:
            out.append(tpb.DescribedTransaction(error_code=exc.code, transactional_id=txn_id))
            continue
        m = pr.shard.txns.get(txn_id)
        if m is None:
            out.append(tpb.DescribedTransaction(error_code=ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, transactional_id=txn_id))
        else:
            out.append(described(m))
    return tpb.DescribeTransactionsResponse(transactions=out)


def described(m: TxnMetadata) -> tpb.DescribedTransaction:
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(m.partitions):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return tpb.DescribedTransaction(
        transactional_id=m.transactional_id, state=m.state.kafka_name, transaction_timeout_ms=m.timeout_ms,
        transaction_start_time_ms=m.start_ms, producer_id=m.producer_id, producer_epoch=m.producer_epoch,
        topics=[tpb.TxnTopic(name=name, partitions=ps) for name, ps in by_topic.items()])
