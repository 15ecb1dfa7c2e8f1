"""LeaveGroup (classic protocol): members leave (by member id or static instance id); an error for
the request, else one per member."""

from __future__ import annotations

from services.coordinator.api import CoordinatorApi
from services.coordinator.api.conversions import error_message
from services.coordinator.authz import Op, Res, allowed, denied_message
from services.coordinator.classic_messages import LeaveMember
from services.coordinator.group import GroupError
from shared.errors import ErrorCode
from shared.proto import coordinator_pb2 as cpb
from shared.request_context import RequestContext
from shared.security.access import access_of


async def leave_group(c: CoordinatorApi, ctx: RequestContext, request: cpb.LeaveGroupRequest) -> cpb.LeaveGroupResponse:
    if (access := access_of(c)) is not None and not allowed(access, ctx, Op.READ, Res.GROUP, request.group_id):
        return cpb.LeaveGroupResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED,
                                      error_message=denied_message(Op.READ, Res.GROUP, request.group_id))
    members = [LeaveMember(m.member_id, m.group_instance_id or None, m.reason) for m in request.members]
    try:
        error, codes = await c.classic.leave(request.group_id, members)
    except GroupError as exc:
        return cpb.LeaveGroupResponse(error_code=exc.code, error_message=str(exc))
    if error:
        return cpb.LeaveGroupResponse(error_code=error, error_message=error_message(error, ""))
    return cpb.LeaveGroupResponse(members=[
        cpb.LeaveGroupMemberResponse(member_id=m.member_id, group_instance_id=m.instance_id or "", error_code=code)
        for m, code in zip(members, codes, strict=True)])
