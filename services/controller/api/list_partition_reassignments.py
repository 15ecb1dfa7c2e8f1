"""ListPartitionReassignments (Kafka's KIP-455): the reassignments in progress, each with its full
replica set, the replicas being added and removed, and its target. Read from etcd: any controller
answers."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, StrictStr

from services.controller.api import ControllerApi
from services.controller.api.fields import TOPIC_NAME_SCHEMA
from shared.request_context import RequestContext


class ListPartitionReassignments(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    topics: list[StrictStr] | None = Field(None, max_length=10_000, description="only these topics",
                                           json_schema_extra={"items": TOPIC_NAME_SCHEMA})


class OngoingReassignment(BaseModel):
    topic: str
    partition: int
    replicas: list[int]
    adding_replicas: list[int]
    removing_replicas: list[int]
    target_replicas: list[int]


class ReassignmentList(BaseModel):
    reassignments: list[OngoingReassignment]


async def list_partition_reassignments(c: ControllerApi, ctx: RequestContext,
                                       request: ListPartitionReassignments) -> ReassignmentList:
    got = await c.partition_controller().list_reassignments()
    wanted = set(request.topics) if request.topics is not None else None
    return ReassignmentList(reassignments=[OngoingReassignment(**r) for r in got  # type: ignore[arg-type]
                                           if wanted is None or r["topic"] in wanted])
