"""DeleteGroups: each group's tombstones written, then applied; an error per group. When security is
on (``authz``), a group the principal may not DELETE is GROUP_AUTHORIZATION_FAILED."""

from __future__ import annotations

from services.coordinator.api import CoordinatorApi
from services.coordinator.authz import Op, Res, allowed, audit_change, denied_message
from services.coordinator.group import GroupError
from shared.errors import ErrorCode
from shared.proto import coordinator_pb2 as cpb
from shared.request_context import RequestContext
from shared.security.access import access_of


async def delete_groups(c: CoordinatorApi, ctx: RequestContext,
                        request: cpb.DeleteGroupsRequest) -> cpb.DeleteGroupsResponse:
    resp = cpb.DeleteGroupsResponse()
    access = access_of(c)
    for gid in request.group_ids:
        if access is not None and not allowed(access, ctx, Op.DELETE, Res.GROUP, gid):
            resp.results.add(group_id=gid, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED,
                             error_message=denied_message(Op.DELETE, Res.GROUP, gid))
            continue
        try:
            pr = c.runtime.runtime_for(gid)
            recs = pr.shard.delete_group(gid)
            await c.runtime.write(pr, recs)
            pr.shard.apply_offsets(recs)
            resp.results.add(group_id=gid)
            audit_change(ctx, f"GROUP:{gid}")
        except GroupError as exc:
            resp.results.add(group_id=gid, error_code=exc.code, error_message=str(exc))
    return resp
