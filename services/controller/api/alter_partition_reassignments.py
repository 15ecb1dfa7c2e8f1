"""AlterPartitionReassignments (Kafka's KIP-455): start, replace or cancel partition reassignments.

The request is Kafka's reassignment file (``kafka-reassign-partitions.sh --reassignment-json-file``):
``{"version": 1, "partitions": [{"topic", "partition", "replicas", "log_dirs"}]}``; ``replicas: null``
cancels that partition's reassignment (Kafka's null target). Cancel also has its own request, naming
the partitions. The whole request is validated before anything is written: the first invalid partition
refuses it (INVALID_REPLICA_ASSIGNMENT, UNKNOWN_TOPIC_OR_PARTITION, NO_REASSIGNMENT_IN_PROGRESS).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

from services.controller.api import ControllerApi
from services.controller.api.fields import INT32_MAX, TOPIC_NAME_MAX, TOPIC_NAME_PATTERN
from services.controller.reassignment import Request, Step
from services.controller.topics import MAX_PARTITIONS
from shared.errors import ErrorCode, TidelogError
from shared.request_context import RequestContext
from shared.types import TopicPartition

BrokerId = Annotated[StrictInt, Field(ge=0, le=INT32_MAX)]
PartitionId = Annotated[StrictInt, Field(ge=0, le=MAX_PARTITIONS - 1)]
#: A topic name as Kafka allows it (checked here: a plan naming an impossible topic is a bad body).
TopicName = Annotated[StrictStr, Field(min_length=1, max_length=TOPIC_NAME_MAX, pattern=TOPIC_NAME_PATTERN)]
#: Partitions one request may name.
MAX_PLAN_PARTITIONS = 100_000


class PlanPartition(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    topic: TopicName
    partition: PartitionId
    replicas: list[BrokerId] | None = Field(..., max_length=64,
                                            description="target replicas, preferred leader first; null cancels")
    log_dirs: list[StrictStr] | None = Field(None, max_length=64, description='"any" per replica (the only choice)')


class ReassignmentPlan(BaseModel):
    """Kafka's reassignment JSON file."""

    model_config = ConfigDict(extra="forbid", strict=True)
    version: Literal[1] = 1
    partitions: list[PlanPartition] = Field(..., min_length=1, max_length=MAX_PLAN_PARTITIONS)


class PartitionRef(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    topic: TopicName
    partition: PartitionId


class CancelReassignments(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    partitions: list[PartitionRef] = Field(..., min_length=1, max_length=MAX_PLAN_PARTITIONS)


class PartitionReassignmentResult(BaseModel):
    topic: str
    partition: int
    replicas: list[int] = Field(description="the replica set now (the union while the move runs)")
    adding_replicas: list[int]
    removing_replicas: list[int]
    done: bool = Field(description="already complete (or cancelled): no reassignment left in progress")


class AlterReassignmentsResult(BaseModel):
    partitions: list[PartitionReassignmentResult]


def requests_of(plan: ReassignmentPlan) -> list[Request]:
    out: list[Request] = []
    for p in plan.partitions:
        if p.log_dirs is not None:
            if p.replicas is None or len(p.log_dirs) != len(p.replicas):
                raise TidelogError(f"{p.topic}-{p.partition}: log_dirs must name one directory per replica",
                                   code=ErrorCode.INVALID_REQUEST)
            if any(d != "any" for d in p.log_dirs):
                raise TidelogError(f"{p.topic}-{p.partition}: only \"any\" log directory is supported",
                                   code=ErrorCode.INVALID_REQUEST)
        out.append((TopicPartition(p.topic, p.partition), list(p.replicas) if p.replicas is not None else None))
    return out


def result_of(steps: dict[TopicPartition, Step], requests: list[Request]) -> AlterReassignmentsResult:
    out = []
    for tp, _ in requests:
        step = steps.get(tp)
        if step is None:  # nothing to do: already the replica set
            out.append(PartitionReassignmentResult(topic=tp.topic, partition=tp.partition, replicas=[],
                                                   adding_replicas=[], removing_replicas=[], done=True))
            continue
        r = step.reassignment
        out.append(PartitionReassignmentResult(
            topic=tp.topic, partition=tp.partition, replicas=step.replicas, adding_replicas=r.adding if r else [],
            removing_replicas=r.removing if r else [], done=r is None))
    return AlterReassignmentsResult(partitions=out)


async def alter_partition_reassignments(c: ControllerApi, ctx: RequestContext,
                                        request: ReassignmentPlan) -> AlterReassignmentsResult:
    requests = requests_of(request)
    steps = await c.partition_controller().alter_reassignments(requests)
    return result_of(steps, requests)


async def cancel_partition_reassignments(c: ControllerApi, ctx: RequestContext,
                                         request: CancelReassignments) -> AlterReassignmentsResult:
    requests: list[Request] = [(TopicPartition(p.topic, p.partition), None) for p in request.partitions]
    steps = await c.partition_controller().alter_reassignments(requests)
    return result_of(steps, requests)
