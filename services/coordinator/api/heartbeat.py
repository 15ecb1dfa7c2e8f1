"""Heartbeat (classic protocol): a member says it is alive; the answer says whether to rejoin."""

from __future__ import annotations

from services.coordinator.api import CoordinatorApi
from services.coordinator.api.conversions import error_message
from services.coordinator.authz import Op, Res, allowed, denied_message
from services.coordinator.group import GroupError
from shared.errors import ErrorCode
from shared.proto import coordinator_pb2 as cpb
from shared.request_context import RequestContext
from shared.security.access import access_of


async def heartbeat(c: CoordinatorApi, ctx: RequestContext, request: cpb.HeartbeatRequest) -> cpb.HeartbeatResponse:
    if (access := access_of(c)) is not None and not allowed(access, ctx, Op.READ, Res.GROUP, request.group_id):
        return cpb.HeartbeatResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED,
                                     error_message=denied_message(Op.READ, Res.GROUP, request.group_id))
    try:
        code = await c.classic.heartbeat(request.group_id, request.member_id, request.group_instance_id or None,
                                         request.generation_id)
    except GroupError as exc:
        return cpb.HeartbeatResponse(error_code=exc.code, error_message=str(exc))
    return cpb.HeartbeatResponse(error_code=code, error_message=error_message(code, ""))
