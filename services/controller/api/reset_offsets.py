"""Reset an inactive group's committed offsets as ``kafka-consumer-groups.sh --reset-offsets`` does
(Kafka's AlterConsumerGroupOffsets with the tool's planning): a dry run unless ``execute``.
NON_EMPTY_GROUP while the group has members, UNKNOWN_TOPIC_OR_PARTITION, INVALID_REQUEST."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr

from services.controller.api import ControllerApi
from services.controller.api.fields import INT32_MAX, INT64_MAX, INT64_MIN, TOPIC_NAME_SCHEMA
from shared.errors import ErrorCode, TidelogError
from shared.request_context import RequestContext


# What to reset and to what (the request's body on the REST door; the path names the group).
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


@dataclass(frozen=True, slots=True)
class ResetGroupOffsets:
    group_id: str
    spec: ResetOffsets


async def reset_offsets(c: ControllerApi, ctx: RequestContext, request: ResetGroupOffsets) -> dict[str, Any]:
    """``{"group_id", "executed", "partitions": [{"topic", "partition", "current_offset", "new_offset"}]}``."""
    spec = request.spec
    if spec.to in ("timestamp", "offset", "shift-by") and spec.value is None:
        raise TidelogError(f"'to': {spec.to!r} needs a 'value'", code=ErrorCode.INVALID_REQUEST)
    tps = await c.groups.partitions_of(spec.topic, spec.partitions)
    plan = await c.groups.reset_offsets(request.group_id, tps, spec.to, spec.value, spec.execute)
    return {"group_id": request.group_id, "executed": spec.execute, "partitions": plan}
