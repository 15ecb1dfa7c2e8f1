"""EndTxn: commit or abort. Answered once PrepareCommit/PrepareAbort is durable, as Kafka; the markers
and the completion follow in the background (``TxnService.finish``), during which other requests for
the id are answered CONCURRENT_TRANSACTIONS. Transactions V2: the answer carries the producer id and
epoch the producer continues with. When security is on (``authz``): TRANSACTIONAL_ID WRITE."""

from __future__ import annotations

from services.coordinator.authz import Op, Res, allowed, denied_message
from services.coordinator.group import GroupError
from services.coordinator.txn_service import TxnService
from shared.errors import ErrorCode
from shared.proto import transactions_pb2 as tpb
from shared.request_context import RequestContext
from shared.security.access import access_of


async def txn_end(t: TxnService, ctx: RequestContext, request: tpb.EndTxnRequest) -> tpb.EndTxnResponse:
    txn_id = request.transactional_id
    if not txn_id:
        return tpb.EndTxnResponse(error_code=ErrorCode.INVALID_REQUEST, error_message="transactional_id is required",
                                  producer_id=-1, producer_epoch=-1)
    if (access := access_of(t)) is not None and not allowed(access, ctx, Op.WRITE, Res.TRANSACTIONAL_ID, txn_id):
        return tpb.EndTxnResponse(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, producer_id=-1,
                                  producer_epoch=-1, error_message=denied_message(Op.WRITE, Res.TRANSACTIONAL_ID, txn_id))
    try:
        pr = t.runtime.txn_runtime_for(txn_id)
        await t.ids.ready()  # V2 with an exhausted epoch moves to a new producer id
        d = pr.shard.end_txn(txn_id, request.producer_id, request.producer_epoch, request.committed, t.now_ms(),
                             max(1, request.client_transaction_version))
        await t.apply(pr, d)
    except GroupError as exc:
        return tpb.EndTxnResponse(error_code=exc.code, error_message=str(exc), producer_id=-1, producer_epoch=-1)
    if not d.ok:
        return tpb.EndTxnResponse(error_code=d.error, error_message=d.message, producer_id=-1, producer_epoch=-1)
    return tpb.EndTxnResponse(producer_id=d.producer_id, producer_epoch=d.producer_epoch)
