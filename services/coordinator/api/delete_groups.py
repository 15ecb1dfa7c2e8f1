"""DeleteGroups: each group's tombstones written, then applied; an error per group."""

from __future__ import annotations

from services.coordinator.api import CoordinatorApi
from services.coordinator.group import GroupError
from shared.proto import coordinator_pb2 as cpb
from shared.request_context import RequestContext


async def delete_groups(c: CoordinatorApi, ctx: RequestContext,
                        request: cpb.DeleteGroupsRequest) -> cpb.DeleteGroupsResponse:
    resp = cpb.DeleteGroupsResponse()
    for gid in request.group_ids:
        try:
            pr = c.runtime.runtime_for(gid)
            recs = pr.shard.delete_group(gid)
            await c.runtime.write(pr, recs)
            pr.shard.apply_offsets(recs)
            resp.results.add(group_id=gid)
        except GroupError as exc:
            resp.results.add(group_id=gid, error_code=exc.code, error_message=str(exc))
    return resp
