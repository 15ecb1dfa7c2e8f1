"""``/v1/groups``: list, describe (members, committed offsets, lag), delete, reset offsets.
Any controller answers; each route translates onto its API (``services/controller/api``:
``describe_groups``, ``delete_group``, ``reset_offsets``), which asks the coordinator instances."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Response

from services.controller.api import delete_group as delete_group_api
from services.controller.api import describe_groups as describe_groups_api
from services.controller.api import reset_offsets as reset_offsets_api
from services.controller.api.fields import NAME_MAX
from services.controller.api.reset_offsets import ResetOffsets
from services.controller.rest.deps import Api, Ctx
from services.controller.rest.errors import PATH_NAME_PATTERN, error_responses

router = APIRouter(prefix="/v1/groups", tags=["groups"])

GroupId = Annotated[str, Path(description="the group id (group.id)", pattern=PATH_NAME_PATTERN, min_length=1,
                              max_length=NAME_MAX)]
_E404 = "Unknown group (GROUP_ID_NOT_FOUND)"
_E503 = "No coordinator serves the group right now (COORDINATOR_NOT_AVAILABLE): retry shortly"


@router.get("", summary="List the groups of every coordinator")
async def list_groups(c: Api, ctx: Ctx) -> dict[str, Any]:
    return await describe_groups_api.list_groups(c, ctx, describe_groups_api.ListGroups())


@router.get("/{group_id}", summary="Describe a group: members, committed offsets, lag",
            responses=error_responses(400, e404=_E404, e503=_E503))
async def describe_group(group_id: GroupId, c: Api, ctx: Ctx) -> dict[str, Any]:
    return await describe_groups_api.describe_group(c, ctx, describe_groups_api.DescribeGroup(group_id))


@router.delete("/{group_id}", status_code=204, summary="Delete an empty group and its committed offsets",
               responses=error_responses(400, e404=_E404, e409="The group has members (NON_EMPTY_GROUP)", e503=_E503))
async def delete_group(group_id: GroupId, c: Api, ctx: Ctx) -> Response:
    await delete_group_api.delete_group(c, ctx, delete_group_api.DeleteGroup(group_id))
    return Response(status_code=204)


@router.post("/{group_id}/offsets/reset", summary="Reset an inactive group's committed offsets (dry run by default)",
             responses=error_responses(400, e404="Unknown topic or partition (UNKNOWN_TOPIC_OR_PARTITION)",
                                       e409="The group has members (NON_EMPTY_GROUP)", e503=_E503))
async def reset_offsets(group_id: GroupId, body: ResetOffsets, c: Api, ctx: Ctx) -> dict[str, Any]:
    return await reset_offsets_api.reset_offsets(c, ctx, reset_offsets_api.ResetGroupOffsets(group_id, body))
