"""ListTransactions (kafka-transactions.sh list): the transactional ids this coordinator instance serves,
filtered by state (Kafka's names), producer id and duration (running longer than ``duration_filter_ms``;
-1 or 0 for none). COORDINATOR_LOAD_IN_PROGRESS while one of its partitions is loading, as Kafka. When
security is on (``authz``), only the ids the principal may DESCRIBE are listed, as Kafka."""

from __future__ import annotations

from services.coordinator.authz import Op, Res
from services.coordinator.partition_kind import TRANSACTIONS
from services.coordinator.txn_service import TxnService
from shared.errors import ErrorCode
from shared.proto import transactions_pb2 as tpb
from shared.request_context import RequestContext
from shared.security.access import access_of


async def txn_list(t: TxnService, ctx: RequestContext, request: tpb.ListTransactionsRequest) -> tpb.ListTransactionsResponse:
    owned = list(t.runtime.owned[TRANSACTIONS].values())
    if any(not pr.loaded for pr in owned):
        return tpb.ListTransactionsResponse(error_code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
    states = set(request.state_filters)
    pids = set(request.producer_id_filters)
    now = t.now_ms()
    access = access_of(t)
    out = []
    for pr in sorted(owned, key=lambda pr: pr.partition):
        for txn_id in sorted(pr.shard.txns):
            m = pr.shard.txns[txn_id]
            if access is not None and not access.allowed(ctx, Op.DESCRIBE, Res.TRANSACTIONAL_ID, txn_id):
                continue
            if states and m.state.kafka_name not in states:
                continue
            if pids and m.producer_id not in pids:
                continue
            if request.duration_filter_ms > 0 and (m.start_ms < 0 or now - m.start_ms <= request.duration_filter_ms):
                continue
            out.append(tpb.ListedTransaction(transactional_id=txn_id, producer_id=m.producer_id,
                                             transaction_state=m.state.kafka_name))
    return tpb.ListTransactionsResponse(transactions=out)
