"""``/v1/groups``: list, describe (members, committed offsets, lag), delete, reset offsets.
Any controller answers; it asks the coordinator instances (see ``groups_admin``)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Response
from pydantic import BaseModel, ConfigDict, Field

from services.controller.groups_admin import GroupAdmin
from services.controller.rest.deps import controller
from shared.errors import ErrorCode, TidelogError

router = APIRouter(prefix="/v1/groups", tags=["groups"])


def admin(ctl: Annotated[Any, Depends(controller)]) -> GroupAdmin:
    return GroupAdmin(ctl.store)


class ResetOffsets(BaseModel):
    model_config = ConfigDict(extra="forbid")
    topic: str = Field(..., description="the topic whose committed offsets change")
    partitions: list[int] | None = Field(None, description="only these partitions (default: all)")
    to: Literal["earliest", "latest", "timestamp", "offset", "shift-by"] = Field(
        ..., description="as kafka-consumer-groups.sh: --to-earliest, --to-latest, --to-datetime, --to-offset, --shift-by")
    value: int | None = Field(None, description="the timestamp (ms), offset or shift for timestamp / offset / shift-by")
    execute: bool = Field(False, description="commit the new offsets (default: dry run, nothing changes)")


@router.get("")
async def list_groups(ga: Annotated[GroupAdmin, Depends(admin)]) -> dict[str, Any]:
    return {"groups": await ga.list_groups()}


@router.get("/{group_id}")
async def describe_group(group_id: str, ga: Annotated[GroupAdmin, Depends(admin)]) -> dict[str, Any]:
    return await ga.describe(group_id)


@router.delete("/{group_id}", status_code=204)
async def delete_group(group_id: str, ga: Annotated[GroupAdmin, Depends(admin)]) -> Response:
    await ga.delete(group_id)
    return Response(status_code=204)


@router.post("/{group_id}/offsets/reset")
async def reset_offsets(group_id: str, body: ResetOffsets, ga: Annotated[GroupAdmin, Depends(admin)]) -> dict[str, Any]:
    if body.to in ("timestamp", "offset", "shift-by") and body.value is None:
        raise TidelogError(f"'to': {body.to!r} needs a 'value'", code=ErrorCode.INVALID_REQUEST)
    tps = await ga.partitions_of(body.topic, body.partitions)
    plan = await ga.reset_offsets(group_id, tps, body.to, body.value, body.execute)
    return {"group_id": group_id, "executed": body.execute, "partitions": plan}
