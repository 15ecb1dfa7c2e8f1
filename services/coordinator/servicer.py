"""gRPC servicer of the GroupCoordinator service: hands each call to its API module
(``services/coordinator/api/``). Translation only, and there is nothing to translate: the API
modules take and return the protobuf messages.

``add_to_server`` registers it behind ``shared.request_context.authorized_handlers`` with
``hand_context``: every method of the service enters through the request context and the authorization
hook once (once per stream; a refusal is PERMISSION_DENIED) and is called as ``(request, context, ctx)``,
and that context goes on to the API module. Registered any other way, the methods fail for want of a
context instead of running unauthorized.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from services.coordinator.api import CoordinatorApi
from services.coordinator.api.complete_txn_offsets import complete_txn_offsets
from services.coordinator.api.consumer_group_heartbeat import consumer_group_heartbeat
from services.coordinator.api.delete_groups import delete_groups
from services.coordinator.api.describe_groups import describe_groups
from services.coordinator.api.find_coordinator import find_coordinator
from services.coordinator.api.heartbeat import heartbeat
from services.coordinator.api.join_group import join_group
from services.coordinator.api.leave_group import leave_group
from services.coordinator.api.list_groups import list_groups
from services.coordinator.api.offset_commit import offset_commit, offset_commit_stream
from services.coordinator.api.offset_delete import offset_delete
from services.coordinator.api.offset_fetch import offset_fetch
from services.coordinator.api.sync_group import sync_group
from services.coordinator.api.txn_offset_commit import txn_offset_commit
from shared.grpc_codecs import RewrittenHandlers
from shared.proto import coordinator_pb2 as cpb
from shared.proto import coordinator_pb2_grpc as cpb_grpc
from shared.proto import tidelog_pb2 as pb
from shared.request_context import Authorize, RequestContext, allow_all, authorized_handlers


class GroupCoordinatorServicer(cpb_grpc.GroupCoordinatorServicer):
    """Each method: the API module's function with the call's context. (A method the generated base
    class still answers for takes no context: it fails rather than run; the unit tests list the service's
    methods and find it.)"""

    def __init__(self, api: CoordinatorApi) -> None:
        self.api = api

    async def FindCoordinator(self, request: pb.FindCoordinatorRequest, context: Any,  # type: ignore[override]
                              ctx: RequestContext) -> pb.FindCoordinatorResponse:
        return await find_coordinator(self.api, ctx, request)

    async def ConsumerGroupHeartbeat(self, request: cpb.ConsumerGroupHeartbeatRequest, context: Any,  # type: ignore[override]
                                     ctx: RequestContext) -> cpb.ConsumerGroupHeartbeatResponse:
        return await consumer_group_heartbeat(self.api, ctx, request)

    async def OffsetCommit(self, request: cpb.OffsetCommitRequest, context: Any,  # type: ignore[override]
                           ctx: RequestContext) -> cpb.OffsetCommitResponse:
        return await offset_commit(self.api, ctx, request)

    def OffsetCommitStream(self, requests: AsyncIterator[cpb.OffsetCommitBatch], context: Any,  # type: ignore[override]
                           ctx: RequestContext) -> AsyncIterator[cpb.OffsetCommitBatchResponse]:
        return offset_commit_stream(self.api, ctx, requests)

    async def OffsetFetch(self, request: cpb.OffsetFetchRequest, context: Any,  # type: ignore[override]
                          ctx: RequestContext) -> cpb.OffsetFetchResponse:
        return await offset_fetch(self.api, ctx, request)

    async def OffsetDelete(self, request: cpb.OffsetDeleteRequest, context: Any,  # type: ignore[override]
                           ctx: RequestContext) -> cpb.OffsetDeleteResponse:
        return await offset_delete(self.api, ctx, request)

    async def DescribeGroups(self, request: cpb.DescribeGroupsRequest, context: Any,  # type: ignore[override]
                             ctx: RequestContext) -> cpb.DescribeGroupsResponse:
        return await describe_groups(self.api, ctx, request)

    async def ListGroups(self, request: cpb.ListGroupsRequest, context: Any,  # type: ignore[override]
                         ctx: RequestContext) -> cpb.ListGroupsResponse:
        return await list_groups(self.api, ctx, request)

    async def DeleteGroups(self, request: cpb.DeleteGroupsRequest, context: Any,  # type: ignore[override]
                           ctx: RequestContext) -> cpb.DeleteGroupsResponse:
        return await delete_groups(self.api, ctx, request)

    async def TxnOffsetCommit(self, request: cpb.TxnOffsetCommitRequest, context: Any,  # type: ignore[override]
                              ctx: RequestContext) -> cpb.TxnOffsetCommitResponse:
        return await txn_offset_commit(self.api, ctx, request)

    async def CompleteTxnOffsets(self, request: cpb.CompleteTxnOffsetsRequest, context: Any,  # type: ignore[override]
                                 ctx: RequestContext) -> cpb.CompleteTxnOffsetsResponse:
        return await complete_txn_offsets(self.api, ctx, request)

    async def JoinGroup(self, request: cpb.JoinGroupRequest, context: Any,  # type: ignore[override]
                        ctx: RequestContext) -> cpb.JoinGroupResponse:
        return await join_group(self.api, ctx, request)

    async def SyncGroup(self, request: cpb.SyncGroupRequest, context: Any,  # type: ignore[override]
                        ctx: RequestContext) -> cpb.SyncGroupResponse:
        return await sync_group(self.api, ctx, request)

    async def Heartbeat(self, request: cpb.HeartbeatRequest, context: Any,  # type: ignore[override]
                        ctx: RequestContext) -> cpb.HeartbeatResponse:
        return await heartbeat(self.api, ctx, request)

    async def LeaveGroup(self, request: cpb.LeaveGroupRequest, context: Any,  # type: ignore[override]
                         ctx: RequestContext) -> cpb.LeaveGroupResponse:
        return await leave_group(self.api, ctx, request)


def add_to_server(servicer: GroupCoordinatorServicer, server: Any, authorize: Authorize = allow_all) -> None:
    cpb_grpc.add_GroupCoordinatorServicer_to_server(
        servicer, RewrittenHandlers(server, authorized_handlers(authorize, hand_context=True)))
