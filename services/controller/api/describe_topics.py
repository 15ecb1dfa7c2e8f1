"""ListTopics and DescribeTopic (Kafka's Metadata and DescribeConfigs for one topic): two reads of the
same topic records, in one module. Any controller answers (reads come from etcd)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from services.controller.api import ControllerApi
from services.controller.authz import Op, Res
from shared.request_context import RequestContext
from shared.security.access import access_of


@dataclass(frozen=True, slots=True)
class ListTopics:
    pass


@dataclass(frozen=True, slots=True)
class DescribeTopic:
    name: str


class TopicList(BaseModel):
    topics: list[str]


class PartitionView(BaseModel):
    partition: int
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    partition_epoch: int


class TopicView(BaseModel):
    name: str
    topic_id: str
    partitions: list[PartitionView]
    replication_factor: int
    configs: dict[str, Any]
    config_overrides: dict[str, Any]


async def list_topics(c: ControllerApi, ctx: RequestContext, request: ListTopics) -> TopicList:
    """Every topic, or when security is on only those the principal may DESCRIBE (as Kafka's Metadata)."""
    names = await c.topic_manager().topic_names()
    if (access := access_of(c)) is not None:
        names = [n for n in names if access.allowed(ctx, Op.DESCRIBE, Res.TOPIC, n)]
    return TopicList(topics=names)


async def describe_topic(c: ControllerApi, ctx: RequestContext, request: DescribeTopic) -> TopicView:
    return TopicView(**await c.topic_manager().describe(request.name))
