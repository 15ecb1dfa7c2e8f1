"""AddOffsetsToTxn: the group whose offsets the transaction commits; its ``__consumer_offsets`` partition
joins the transaction (completed through the group coordinator's CompleteTxnOffsets, not a marker).
When security is on (``authz``), as Kafka: TRANSACTIONAL_ID WRITE, then GROUP READ."""

from __future__ import annotations

from services.coordinator.authz import Op, Res, allowed, denied_message
from services.coordinator.group import GroupError
from services.coordinator.txn_service import TxnService
from shared.errors import ErrorCode
from shared.offsets_topic import OFFSETS_TOPIC
from shared.proto import transactions_pb2 as tpb
from shared.request_context import RequestContext
from shared.security.access import access_of


async def txn_add_offsets(t: TxnService, ctx: RequestContext,
                          request: tpb.AddOffsetsToTxnRequest) -> tpb.AddOffsetsToTxnResponse:
    if not request.transactional_id or not request.group_id:
        return tpb.AddOffsetsToTxnResponse(error_code=ErrorCode.INVALID_REQUEST,
                                           error_message="transactional_id and group_id are required")
    if (access := access_of(t)) is not None:
        txn_id, gid = request.transactional_id, request.group_id
        if not allowed(access, ctx, Op.WRITE, Res.TRANSACTIONAL_ID, txn_id):
            return tpb.AddOffsetsToTxnResponse(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                                               error_message=denied_message(Op.WRITE, Res.TRANSACTIONAL_ID, txn_id))
        if not allowed(access, ctx, Op.READ, Res.GROUP, gid):
            return tpb.AddOffsetsToTxnResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED,
                                               error_message=denied_message(Op.READ, Res.GROUP, gid))
    try:
        pr = t.runtime.txn_runtime_for(request.transactional_id)
        offsets_partitions = t.runtime.view.partitions_of(OFFSETS_TOPIC)
        if not offsets_partitions:
            return tpb.AddOffsetsToTxnResponse(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                               error_message=f"{OFFSETS_TOPIC} does not exist yet")
        d = pr.shard.add_offsets(request.transactional_id, request.producer_id, request.producer_epoch,
                                 request.group_id, t.now_ms(), offsets_partitions,
                                 max(1, request.client_transaction_version))
        await t.apply(pr, d)
    except GroupError as exc:
        return tpb.AddOffsetsToTxnResponse(error_code=exc.code, error_message=str(exc))
    return tpb.AddOffsetsToTxnResponse(error_code=d.error, error_message=d.message)
