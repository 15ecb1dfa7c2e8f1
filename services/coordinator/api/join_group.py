"""JoinGroup (classic protocol): the request handed to ``ClassicGroupService.join``; an empty proto
string stands for Kafka's null. The client host is the request's, else the caller's peer."""

from __future__ import annotations

from services.coordinator.api import CoordinatorApi
from services.coordinator.api.conversions import error_message, peer_host
from services.coordinator.authz import Op, Res, allowed, denied_message
from services.coordinator.classic_messages import JoinRequest, JoinResponse
from services.coordinator.group import GroupError
from shared.errors import ErrorCode
from shared.proto import coordinator_pb2 as cpb
from shared.request_context import RequestContext
from shared.security.access import access_of


async def join_group(c: CoordinatorApi, ctx: RequestContext, request: cpb.JoinGroupRequest) -> cpb.JoinGroupResponse:
    if (access := access_of(c)) is not None and not allowed(access, ctx, Op.READ, Res.GROUP, request.group_id):
        return cpb.JoinGroupResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, generation_id=-1,
                                     error_message=denied_message(Op.READ, Res.GROUP, request.group_id),
                                     member_id=request.member_id)
    req = JoinRequest(
        group_id=request.group_id, member_id=request.member_id, instance_id=request.group_instance_id or None,
        protocol_type=request.protocol_type, protocols=[(p.name, p.metadata) for p in request.protocols],
        session_timeout_ms=request.session_timeout_ms, rebalance_timeout_ms=request.rebalance_timeout_ms,
        client_id=request.client_id, client_host=request.client_host or peer_host(ctx.peer),
        reason=request.reason, api_version=request.api_version)
    try:
        return _to_proto(await c.classic.join(req))
    except GroupError as exc:
        return cpb.JoinGroupResponse(error_code=exc.code, error_message=str(exc), generation_id=-1,
                                     member_id=request.member_id)


def _to_proto(r: JoinResponse) -> cpb.JoinGroupResponse:
    return cpb.JoinGroupResponse(
        error_code=r.error, error_message=error_message(r.error, r.message), generation_id=r.generation_id,
        protocol_type=r.protocol_type or "", protocol_name=r.protocol_name or "", leader=r.leader,
        skip_assignment=r.skip_assignment, member_id=r.member_id,
        members=[cpb.JoinGroupMember(member_id=m.member_id, group_instance_id=m.instance_id or "", metadata=m.metadata)
                 for m in r.members])
