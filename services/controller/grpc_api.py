"""The controller's gRPC service (AlterPartition, ControlledShutdown): translation only, onto the
request layer (``services/controller/api``).

Every method is entered through ``shared.request_context.authorized_handlers(hand_context=True)``
(``add_to_server``): the method is called with the context the authorization hook let in and hands it to
its API function. Registered any other way, a method lacks that argument and fails rather than run
unauthorized.
"""

from __future__ import annotations

import grpc

from services.controller import grpc_reassignments as reassignments_grpc
from services.controller.api import ControllerApi
from services.controller.api import alter_partition as alter_partition_api
from services.controller.api import controlled_shutdown as controlled_shutdown_api
from shared.errors import TidelogError
from shared.grpc_codecs import RewrittenHandlers
from shared.proto import tidelog_pb2 as pb
from shared.proto import tidelog_pb2_grpc as pb_grpc
from shared.request_context import Authorize, RequestContext, allow_all, authorized_handlers
from shared.types import TopicPartition


def add_to_server(servicer: ControllerServicer, server: grpc.aio.Server, authorize: Authorize = allow_all) -> None:
    pb_grpc.add_ControllerServicer_to_server(servicer, RewrittenHandlers(server, authorized_handlers(
        authorize, hand_context=True)))


class ControllerServicer(pb_grpc.ControllerServicer):
    def __init__(self, api: ControllerApi) -> None:
        self.api = api

    async def AlterPartition(self, request: pb.AlterPartitionRequest, context: object,  # type: ignore[override]
                             ctx: RequestContext) -> pb.AlterPartitionResponse:
        if request.items:
            items = [(TopicPartition(i.topic, i.partition), i.leader_epoch, i.partition_epoch, list(i.new_isr))
                     for i in request.items]
        else:
            items = [(TopicPartition(request.topic, request.partition), request.leader_epoch,
                      request.partition_epoch, list(request.new_isr))]
        call = alter_partition_api.AlterPartitionRequest(request.broker_id, request.incarnation, items,
                                                         batched=bool(request.items))
        r = await alter_partition_api.alter_partition(self.api, ctx, call)
        if r.error:
            return pb.AlterPartitionResponse(error_code=r.error, error_message=r.message)
        if r.state is not None:
            return pb.AlterPartitionResponse(leader=r.state.leader, leader_epoch=r.state.leader_epoch,
                                             isr=r.state.isr, partition_epoch=r.state.partition_epoch)
        out = []
        for (tp, _, _, _), res in zip(items, r.results):
            if isinstance(res, TidelogError):
                out.append(pb.AlterPartitionItemResult(topic=tp.topic, partition=tp.partition, error_code=res.code,
                                                       error_message=str(res)))
            else:
                out.append(pb.AlterPartitionItemResult(topic=tp.topic, partition=tp.partition, leader=res.leader,
                                                       leader_epoch=res.leader_epoch, isr=res.isr,
                                                       partition_epoch=res.partition_epoch))
        return pb.AlterPartitionResponse(items=out)

    async def ControlledShutdown(self, request: pb.ControlledShutdownRequest, context: object,  # type: ignore[override]
                                 ctx: RequestContext) -> pb.ControlledShutdownResponse:
        call = controlled_shutdown_api.ControlledShutdownRequest(request.broker_id, request.incarnation)
        r = await controlled_shutdown_api.controlled_shutdown(self.api, ctx, call)
        return pb.ControlledShutdownResponse(error_code=r.error, error_message=r.message,
                                             remaining_leaderships=r.remaining_leaderships)

    async def AlterPartitionReassignments(self, request: pb.AlterPartitionReassignmentsRequest,  # type: ignore[override]
                                          context: object, ctx: RequestContext) -> pb.AlterPartitionReassignmentsResponse:
        return await reassignments_grpc.alter(self.api, ctx, request)

    async def ListPartitionReassignments(self, request: pb.ListPartitionReassignmentsRequest,  # type: ignore[override]
                                         context: object, ctx: RequestContext) -> pb.ListPartitionReassignmentsResponse:
        return await reassignments_grpc.list_(self.api, ctx, request)
