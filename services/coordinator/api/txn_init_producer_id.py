"""InitProducerId with a transactional id (transaction coordinator): a producer id and a bumped epoch
that fences every earlier producer of the id. An open transaction of the previous producer is aborted
first (the answer is then CONCURRENT_TRANSACTIONS and the client retries once the abort completed).
When security is on (``authz``): TRANSACTIONAL_ID WRITE (TRANSACTIONAL_ID_AUTHORIZATION_FAILED)."""

from __future__ import annotations

from services.coordinator.authz import Op, Res, allowed, denied_message
from services.coordinator.group import GroupError
from services.coordinator.txn.decisions import ProducerIdAndEpoch
from services.coordinator.txn_service import TxnService
from shared.errors import ErrorCode
from shared.proto import transactions_pb2 as tpb
from shared.request_context import RequestContext
from shared.security.access import access_of


async def txn_init_producer_id(t: TxnService, ctx: RequestContext,
                               request: tpb.TxnInitProducerIdRequest) -> tpb.TxnInitProducerIdResponse:
    txn_id = request.transactional_id
    if not txn_id:
        return tpb.TxnInitProducerIdResponse(error_code=ErrorCode.INVALID_REQUEST, producer_id=-1, producer_epoch=-1,
                                             error_message="transactional_id is required")
    if (access := access_of(t)) is not None and not allowed(access, ctx, Op.WRITE, Res.TRANSACTIONAL_ID, txn_id):
        return tpb.TxnInitProducerIdResponse(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                                             producer_id=-1, producer_epoch=-1,
                                             error_message=denied_message(Op.WRITE, Res.TRANSACTIONAL_ID, txn_id))
    # (-1, -1): a new producer; its own (id, epoch): a producer bumping itself (KIP-360)
    expected = (ProducerIdAndEpoch(request.producer_id, request.producer_epoch)
                if request.producer_id >= 0 and request.producer_epoch >= 0 else None)
    try:
        pr = t.runtime.txn_runtime_for(txn_id)
        await t.ids.ready()  # a new id (or an exhausted epoch) takes a producer id
        d = pr.shard.init_producer_id(txn_id, request.transaction_timeout_ms, t.now_ms(), expected)
        await t.apply(pr, d)
    except GroupError as exc:
        return tpb.TxnInitProducerIdResponse(error_code=exc.code, error_message=str(exc), producer_id=-1,
                                             producer_epoch=-1)
    return tpb.TxnInitProducerIdResponse(error_code=d.error, error_message=d.message, producer_id=d.producer_id,
                                         producer_epoch=d.producer_epoch)
