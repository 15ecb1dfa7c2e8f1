"""gRPC servicer of the TransactionCoordinator service (``shared/proto/transactions.proto``): hands each
call to its API module (``services/coordinator/api/txn_*.py``), which take and return the protobuf
messages, with the call's request context.

``add_to_server`` registers it behind ``shared.request_context.authorized_handlers`` with
``hand_context``, as the GroupCoordinator servicer: every method enters through the request context and
the authorization hook and is called as ``(request, context, ctx)``.
"""

from __future__ import annotations

from typing import Any

from services.coordinator.api.txn_add_offsets import txn_add_offsets
from services.coordinator.api.txn_add_partitions import txn_add_partitions
from services.coordinator.api.txn_describe import txn_describe
from services.coordinator.api.txn_end import txn_end
from services.coordinator.api.txn_init_producer_id import txn_init_producer_id
from services.coordinator.api.txn_list import txn_list
from services.coordinator.txn_service import TxnService
from shared.grpc_codecs import RewrittenHandlers
from shared.proto import transactions_pb2 as tpb
from shared.proto import transactions_pb2_grpc as tpb_grpc
from shared.request_context import Authorize, RequestContext, allow_all, authorized_handlers


class TransactionCoordinatorServicer(tpb_grpc.TransactionCoordinatorServicer):
    def __init__(self, service: TxnService) -> None:
        self.service = service

    async def InitProducerId(self, request: tpb.TxnInitProducerIdRequest, context: Any,  # type: ignore[override]
                             ctx: RequestContext) -> tpb.TxnInitProducerIdResponse:
        return await txn_init_producer_id(self.service, ctx, request)

    async def AddPartitionsToTxn(self, request: tpb.AddPartitionsToTxnRequest, context: Any,  # type: ignore[override]
                                 ctx: RequestContext) -> tpb.AddPartitionsToTxnResponse:
        return await txn_add_partitions(self.service, ctx, request)

    async def AddOffsetsToTxn(self, request: tpb.AddOffsetsToTxnRequest, context: Any,  # type: ignore[override]
                              ctx: RequestContext) -> tpb.AddOffsetsToTxnResponse:
        return await txn_add_offsets(self.service, ctx, request)

    async def EndTxn(self, request: tpb.EndTxnRequest, context: Any,  # type: ignore[override]
                     ctx: RequestContext) -> tpb.EndTxnResponse:
        return await txn_end(self.service, ctx, request)

    async def DescribeTransactions(self, request: tpb.DescribeTransactionsRequest, context: Any,  # type: ignore[override]
                                   ctx: RequestContext) -> tpb.DescribeTransactionsResponse:
        return await txn_describe(self.service, ctx, request)

    async def ListTransactions(self, request: tpb.ListTransactionsRequest, context: Any,  # type: ignore[override]
                               ctx: RequestContext) -> tpb.ListTransactionsResponse:
        return await txn_list(self.service, ctx, request)


def add_to_server(servicer: TransactionCoordinatorServicer, server: Any, authorize: Authorize = allow_all) -> None:
    tpb_grpc.add_TransactionCoordinatorServicer_to_server(
        servicer, RewrittenHandlers(server, authorized_handlers(authorize, hand_context=True)))
