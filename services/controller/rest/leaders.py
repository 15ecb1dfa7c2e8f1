"""``/v1/elect-leaders``: preferred-leader election (Kafka's kafka-leader-election.sh --election-type preferred).

As with the Kafka tool, the scope is explicit: a topic (optionally some of its
partitions), or every partition with ``all_topic_partitions: true``
(``--all-topic-partitions``). An empty request is refused rather than read as "all".
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr

from services.controller.rest.deps import controller
from services.controller.rest.errors import TOPIC_NAME_SCHEMA, error_responses
from services.controller.rest.topics import _forward
from services.controller.topics import MAX_PARTITIONS
from shared.errors import ErrorCode, TidelogError
from shared.types import TopicPartition

router = APIRouter(prefix="/v1", tags=["leaders"])

PartitionId = Annotated[StrictInt, Field(ge=0, le=MAX_PARTITIONS - 1)]


class ElectLeaders(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    topic: StrictStr | None = Field(None, description="only this topic", json_schema_extra=TOPIC_NAME_SCHEMA)
    partitions: list[PartitionId] | None = Field(None, max_length=MAX_PARTITIONS,
                                                 description="only these partitions of the topic (needs topic)")
    all_topic_partitions: StrictBool = Field(False, description="every partition of every topic (instead of topic)")


class ElectedLeader(BaseModel):
    topic: str
    partition: int
    leader: int
    leader_epoch: int


class ElectLeadersResult(BaseModel):
    elected: list[ElectedLeader]


def scope(body: ElectLeaders) -> str | None:
    """The topic to act on, None for all partitions; refuses an unclear scope (INVALID_REQUEST)."""
    if body.all_topic_partitions:
        if body.topic is not None or body.partitions is not None:
            raise TidelogError("all_topic_partitions excludes topic and partitions", code=ErrorCode.INVALID_REQUEST)
        return None
    if body.topic is None:
        raise TidelogError("name a topic, or ask for every partition with all_topic_partitions: true",
                           code=ErrorCode.INVALID_REQUEST)
    return body.topic


@router.post("/elect-leaders", response_model=ElectLeadersResult,
             summary="Move leadership back to each partition's preferred (first) replica",
             responses=error_responses(400, 404, 503))
async def elect_leaders(body: ElectLeaders, request: Request, ctl: Annotated[Any, Depends(controller)]) -> Any:
    if (fwd := await _forward(ctl, request)) is not None:
        return fwd
    topic = scope(body)
    only = None
    if topic is not None:
        desc = await ctl.topics.describe(topic)  # 404 for an unknown topic
        existing = [p["partition"] for p in desc["partitions"]]
        if body.partitions is not None and (unknown := sorted(set(body.partitions) - set(existing))):
            raise TidelogError(f"{topic} has no partitions {unknown[:10]}", code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        only = [TopicPartition(topic, p) for p in (body.partitions if body.partitions is not None else existing)]
    changes = await ctl.partitions.elect_preferred(only)
    return {"elected": ctl.partitions.describe_changes(changes)}
