"""ListGroups (every coordinator's groups) and DescribeGroups for one group (members, committed offsets,
lag): two reads, in one module. Any controller answers; it asks the coordinator instances
(``GroupAdmin``): GROUP_ID_NOT_FOUND, COORDINATOR_NOT_AVAILABLE."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from services.controller.api import ControllerApi
from services.controller.authz import Op, Res
from shared.request_context import RequestContext
from shared.security.access import access_of
from shared.security.acl import CLUSTER_NAME


@dataclass(frozen=True, slots=True)
class ListGroups:
    pass


@dataclass(frozen=True, slots=True)
class DescribeGroup:
    group_id: str


async def list_groups(c: ControllerApi, ctx: RequestContext, request: ListGroups) -> dict[str, Any]:
    """``{"groups": [{"group_id", "state", "members"}, ...]}``; when security is on, without CLUSTER DESCRIBE
    only the groups the principal may DESCRIBE (as Kafka's ListGroups)."""
    groups = await c.groups.list_groups()
    access = access_of(c)
    if access is not None and not access.allowed(ctx, Op.DESCRIBE, Res.CLUSTER, CLUSTER_NAME):
        groups = [g for g in groups if access.allowed(ctx, Op.DESCRIBE, Res.GROUP, str(g.get("group_id", "")))]
    return {"groups": groups}


async def describe_group(c: ControllerApi, ctx: RequestContext, request: DescribeGroup) -> dict[str, Any]:
    """The group's state and epochs, its members with their partitions, and per partition the committed
    offset, log end offset and lag (``GroupAdmin.describe``)."""
    return await c.groups.describe(request.group_id)
