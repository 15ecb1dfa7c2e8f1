"""SyncGroup (classic protocol): the leader's assignments in, each member's assignment out."""

from __future__ import annotations

from services.coordinator.api import CoordinatorApi
from services.coordinator.api.conversions import error_message
from services.coordinator.authz import Op, Res, allowed, denied_message
from services.coordinator.classic_messages import SyncRequest, SyncResponse
from services.coordinator.group import GroupError
from shared.errors import ErrorCode
from shared.proto import coordinator_pb2 as cpb
from shared.request_context import RequestContext
from shared.security.access import access_of


async def sync_group(c: CoordinatorApi, ctx: RequestContext, request: cpb.SyncGroupRequest) -> cpb.SyncGroupResponse:
    if (access := access_of(c)) is not None and not allowed(access, ctx, Op.READ, Res.GROUP, request.group_id):
        return cpb.SyncGroupResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED,
                                     error_message=denied_message(Op.READ, Res.GROUP, request.group_id))
    req = SyncRequest(
        group_id=request.group_id, member_id=request.member_id, generation_id=request.generation_id,
        instance_id=request.group_instance_id or None, protocol_type=request.protocol_type or None,
        protocol_name=request.protocol_name or None,
        assignments={a.member_id: a.assignment for a in request.assignments})
    try:
        return _to_proto(await c.classic.sync(req))
    except GroupError as exc:
        return cpb.SyncGroupResponse(error_code=exc.code, error_message=str(exc))


def _to_proto(r: SyncResponse) -> cpb.SyncGroupResponse:
    return cpb.SyncGroupResponse(error_code=r.error, error_message=error_message(r.error, r.message),
                                 protocol_type=r.protocol_type or "", protocol_name=r.protocol_name or "",
                                 assignment=r.assignment)
