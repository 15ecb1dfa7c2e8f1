"""ListGroups: every group of the partitions this instance has loaded, consumer and classic. When security
is on (``authz``), as Kafka: all of them with CLUSTER DESCRIBE, else only the groups the principal may
DESCRIBE."""

from __future__ import annotations

from services.coordinator.api import CoordinatorApi
from services.coordinator.authz import Op, Res
from services.coordinator.classic_group import ClassicGroup
from services.coordinator.consumer_protocol import PROTOCOL_TYPE
from shared.proto import coordinator_pb2 as cpb
from shared.request_context import RequestContext
from shared.security.access import access_of
from shared.security.acl import CLUSTER_NAME


async def list_groups(c: CoordinatorApi, ctx: RequestContext, request: cpb.ListGroupsRequest) -> cpb.ListGroupsResponse:
    resp = cpb.ListGroupsResponse()
    access = access_of(c)
    if access is not None and access.allowed(ctx, Op.DESCRIBE, Res.CLUSTER, CLUSTER_NAME):
        access = None  # CLUSTER DESCRIBE: every group
    for pr in list(c.runtime.partitions.values()):
        if not pr.loaded:
            continue
        for gid in pr.shard.group_ids():
            if access is not None and not access.allowed(ctx, Op.DESCRIBE, Res.GROUP, gid):
                continue  # left out, not refused (no audit line per hidden group)
            g = pr.shard.describe(gid)
            if isinstance(g, ClassicGroup):
                resp.groups.add(group_id=gid, state=g.state, members=len(g.members),
                                protocol_type=g.protocol_type or "", group_type="classic")
            else:
                resp.groups.add(group_id=gid, state=g.state if g else "Empty", members=len(g.members) if g else 0,
                                protocol_type=PROTOCOL_TYPE, group_type="consumer")
    return resp
