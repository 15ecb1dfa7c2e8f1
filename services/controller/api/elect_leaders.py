"""ElectLeaders, preferred election (kafka-leader-election.sh --election-type preferred).

As with the Kafka tool, the scope is explicit: a topic (optionally some of its
partitions), or every partition with ``all_topic_partitions`` (``--all-topic-partitions``).
An empty request is refused rather than read as "all".
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr

from services.controller.api import ControllerApi
from services.controller.api.fields import TOPIC_NAME_SCHEMA
from services.controller.topics import MAX_PARTITIONS
from shared.errors import ErrorCode, TidelogError
from shared.request_context import RequestContext
from shared.types import TopicPartition

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


def scope(request: ElectLeaders) -> str | None:
    """The topic to act on, None for all partitions; refuses an unclear scope (INVALID_REQUEST)."""
    if request.all_topic_partitions:
        if request.topic is not None or request.partitions is not None:
            raise TidelogError("all_topic_partitions excludes topic and partitions", code=ErrorCode.INVALID_REQUEST)
        return None
    if request.topic is None:
        raise TidelogError("name a topic, or ask for every partition with all_topic_partitions: true",
                           code=ErrorCode.INVALID_REQUEST)
    return request.topic


async def elect_leaders(c: ControllerApi, ctx: RequestContext, request: ElectLeaders) -> ElectLeadersResult:
    topic = scope(request)
    only = None
    if topic is not None:
        desc = await c.topic_manager().describe(topic)  # UNKNOWN_TOPIC_OR_PARTITION for an unknown topic
        existing = [p["partition"] for p in desc["partitions"]]
        if request.partitions is not None and (unknown := sorted(set(request.partitions) - set(existing))):
            raise TidelogError(f"{topic} has no partitions {unknown[:10]}", code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        only = [TopicPartition(topic, p) for p in (request.partitions if request.partitions is not None else existing)]
    pc = c.partition_controller()
    changes = await pc.elect_preferred(only)
    return ElectLeadersResult(elected=[ElectedLeader(**e) for e in pc.describe_changes(changes)])
