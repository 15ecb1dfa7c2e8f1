"""CreatePartitions: grow a topic to a new total number of partitions (INVALID_PARTITIONS when it would
not grow), written by the active controller."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, StrictInt

from services.controller.api import ControllerApi
from services.controller.api.describe_topics import TopicView
from services.controller.topics import MAX_PARTITIONS
from shared.request_context import RequestContext


# The request's body on the REST door (the path names the topic).
class AddPartitions(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    partitions: StrictInt = Field(..., ge=1, le=MAX_PARTITIONS, description="the new total number of partitions")


@dataclass(frozen=True, slots=True)
class CreatePartitions:
    name: str
    total: int


async def create_partitions(c: ControllerApi, ctx: RequestContext, request: CreatePartitions) -> TopicView:
    return TopicView(**await c.topic_manager().add_partitions(request.name, request.total))
