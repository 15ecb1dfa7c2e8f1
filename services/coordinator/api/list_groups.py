"""ListGroups: every group of the partitions this instance has loaded, consumer and classic."""

from __future__ import annotations

from services.coordinator.api import CoordinatorApi
from services.coordinator.classic_group import ClassicGroup
from services.coordinator.consumer_protocol import PROTOCOL_TYPE
from shared.proto import coordinator_pb2 as cpb
from shared.request_context import RequestContext


async def list_groups(c: CoordinatorApi, ctx: RequestContext, request: cpb.ListGroupsRequest) -> cpb.ListGroupsResponse:
    resp = cpb.ListGroupsResponse()
    for pr in list(c.runtime.partitions.values()):
        if not pr.loaded:
            continue
        for gid in pr.shard.group_ids():
            g = pr.shard.describe(gid)
            if isinstance(g, ClassicGroup):
                resp.groups.add(group_id=gid, state=g.state, members=len(g.members),
                                protocol_type=g.protocol_type or "", group_type="classic")
            else:
                resp.groups.add(group_id=gid, state=g.state if g else "Empty", members=len(g.members) if g else 0,
                                protocol_type=PROTOCOL_TYPE, group_type="consumer")
    return resp
