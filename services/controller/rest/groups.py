"""``/v1/groups``: list, describe (members, committed offsets, lag), delete, reset offsets.
Any controller answers; it asks the coordinator instances (see ``groups_admin``)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Path, Response
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr

from services.controller.groups_admin import GroupAdmin
from services.controller.rest.deps import controller
from services.controller.rest.errors import (
    INT32_MAX,
    INT64_MAX,
    INT64_MIN,
    NAME_MAX,
    PATH_NAME_PATTERN,
    TOPIC_NAME_SCHEMA,
    error_responses,
)
from shared.errors import ErrorCode, TidelogError

router = APIRouter(prefix="/v1/groups", tags=["groups"])

GroupId = Annotated[str, Path(description="the group id (group.id)", pattern=PATH_NAME_PATTERN, min_length=1,
                              max_length=NAME_MAX)]
_E404 = "Unknown group (GROUP_ID_NOT_FOUND)"
_E503 = "No coordinator serves the group right now (COORDINATOR_NOT_AVAILABLE): retry shortly"


def admin(ctl: Annotated[Any, Depends(controller)]) -> GroupAdmin:
    return GroupAdmin(ctl.store)


class ResetOffsets(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    topic: StrictStr = Field(..., description="the topic whose committed offsets change", json_schema_extra=TOPIC_NAME_SCHEMA)
    partitions: list[Annotated[StrictInt, Field(ge=0, le=INT32_MAX)]] | None = Field(
        None, description="only these partitions (default: all)")
    to: Literal["earliest", "latest", "timestamp", "offset", "shift-by"] = Field(
        ..., description="as kafka-consumer-groups.sh: --to-earliest, --to-latest, --to-datetime, --to-offset, --shift-by")
    value: Annotated[StrictInt, Field(ge=INT64_MIN, le=INT64_MAX)] | None = Field(
        None, description="the timestamp (ms), offset or shift for timestamp / offset / shift-by")
    execute: StrictBool = Field(False, description="commit the new offsets (default: dry run, nothing changes)")


@router.get("", summary="List the groups of every coordinator")
async def list_groups(ga: Annotated[GroupAdmin, Depends(admin)]) -> dict[str, Any]:
    return {"groups": await ga.list_groups()}


@router.get("/{group_id}", summary="Describe a group: members, committed offsets, lag",
            responses=error_responses(400, e404=_E404, e503=_E503))
async def describe_group(group_id: GroupId, ga: Annotated[GroupAdmin, Depends(admin)]) -> dict[str, Any]:
    return await ga.describe(group_id)


@router.delete("/{group_id}", status_code=204, summary="Delete an empty group and its committed offsets",
               responses=error_responses(400, e404=_E404, e409="The group has members (NON_EMPTY_GROUP)", e503=_E503))
async def delete_group(group_id: GroupId, ga: Annotated[GroupAdmin, Depends(admin)]) -> Response:
    await ga.delete(group_id)
    return Response(status_code=204)


@router.post("/{group_id}/offsets/reset", summary="Reset an inactive group's committed offsets (dry run by default)",
             responses=error_responses(400, e404="Unknown topic or partition (UNKNOWN_TOPIC_OR_PARTITION)",
                                       e409="The group has members (NON_EMPTY_GROUP)", e503=_E503))
async def reset_offsets(group_id: GroupId, body: ResetOffsets, ga: Annotated[GroupAdmin, Depends(admin)]) -> dict[str, Any]:
    if body.to in ("timestamp", "offset", "shift-by") and body.value is None:
        raise TidelogError(f"'to': {body.to!r} needs a 'value'", code=ErrorCode.INVALID_REQUEST)
    tps = await ga.partitions_of(body.topic, body.partitions)
    plan = await ga.reset_offsets(group_id, tps, body.to, body.value, body.execute)
    return {"group_id": group_id, "executed": body.execute, "partitions": plan}
