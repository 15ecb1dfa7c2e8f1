"""``/v1/topics``: create, list, describe, delete, alter configs, add partitions.

Any controller answers; writes reaching a standby are forwarded to the active
controller (its REST URL is in etcd), so clients may use any controller URL.
"""

from __future__ import annotations

from typing import Annotated, Any

import httpx
from fastapi import APIRouter, Depends, Path, Request, Response
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr

from services.controller.rest.deps import controller
from services.controller.rest.errors import (
    INT64_MAX,
    INT64_MIN,
    TOPIC_NAME_MAX,
    TOPIC_NAME_PATTERN,
    TOPIC_NAME_SCHEMA,
    error_responses,
)
from services.controller.topics import MAX_PARTITIONS
from shared.errors import NotActiveError

router = APIRouter(prefix="/v1/topics", tags=["topics"])

#: A config value: Kafka's string form ("604800000", "true"), or a JSON number/boolean of the
#: config's own type. Integers are int64; "3" is never read as a JSON integer field elsewhere.
ConfigValue = Annotated[StrictInt, Field(ge=INT64_MIN, le=INT64_MAX)] | StrictFloat | StrictBool | Annotated[
    StrictStr, Field(max_length=1024)]
ConfigName = Annotated[StrictStr, Field(min_length=1, max_length=255)]
TopicName = Annotated[str, Path(description="topic name", pattern=TOPIC_NAME_PATTERN, min_length=1,
                                max_length=TOPIC_NAME_MAX)]


class CreateTopic(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    # Name rules are checked by the controller (INVALID_TOPIC_EXCEPTION, Kafka's code); the schema states them.
    name: StrictStr = Field(..., description="topic name: letters, digits, '.', '_', '-'; at most 249 characters",
                            json_schema_extra=TOPIC_NAME_SCHEMA)
    partitions: StrictInt = Field(1, ge=1, le=MAX_PARTITIONS)
    replication_factor: StrictInt = Field(1, ge=1, le=32)
    configs: dict[ConfigName, ConfigValue] = Field(default_factory=dict, description="Kafka topic configs, e.g. retention.ms")


class AlterConfigs(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    configs: dict[ConfigName, ConfigValue | None] = Field(..., description="new values; null removes an override")


class AddPartitions(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    partitions: StrictInt = Field(..., ge=1, le=MAX_PARTITIONS, description="the new total number of partitions")


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


async def _forward(ctl: Any, request: Request) -> Response | None:
    """None if this controller is active; else the active controller's answer to the same request."""
    if ctl.election is not None and ctl.election.active:
        return None
    active = await ctl.store.get(ctl.store.keys.controller())
    if active is None:
        raise NotActiveError("no active controller right now; retry shortly")
    url = active[0]["rest"] + request.url.path
    try:
        async with httpx.AsyncClient(timeout=60) as client:
            upstream = await client.request(
                request.method, url, content=await request.body(), headers={"content-type": "application/json"}
            )
    except httpx.HTTPError as exc:
        raise NotActiveError(f"the active controller did not answer ({type(exc).__name__}); retry shortly") from None
    return Response(upstream.content, status_code=upstream.status_code, media_type="application/json")


Ctl = Annotated[Any, Depends(controller)]


@router.post("", status_code=201, response_model=TopicView, summary="Create a topic",
             responses=error_responses(400, 409, 503))
async def create_topic(body: CreateTopic, request: Request, ctl: Ctl) -> Any:
    if (fwd := await _forward(ctl, request)) is not None:
        return fwd
    return await ctl.topics.create(body.name, body.partitions, body.replication_factor, dict(body.configs))


@router.get("", response_model=TopicList, summary="List topic names")
async def list_topics(ctl: Ctl) -> dict[str, list[str]]:
    return {"topics": await ctl.topics.topic_names()}


@router.get("/{name}", response_model=TopicView, summary="Partitions (leader, replicas, ISR, epochs) and configs",
            responses=error_responses(400, 404))
async def describe_topic(name: TopicName, ctl: Ctl) -> Any:
    return await ctl.topics.describe(name)


@router.delete("/{name}", status_code=204, summary="Delete a topic and its data",
               responses=error_responses(400, 404, 503))
async def delete_topic(name: TopicName, request: Request, ctl: Ctl) -> Response:
    if (fwd := await _forward(ctl, request)) is not None:
        return fwd
    await ctl.topics.delete(name)
    return Response(status_code=204)


@router.patch("/{name}/configs", response_model=TopicView, summary="Set or remove config overrides",
              responses=error_responses(400, 404, 503))
async def alter_configs(name: TopicName, body: AlterConfigs, request: Request, ctl: Ctl) -> Any:
    if (fwd := await _forward(ctl, request)) is not None:
        return fwd
    return await ctl.topics.alter_configs(name, dict(body.configs))


@router.post("/{name}/partitions", response_model=TopicView, summary="Grow the partition count",
             responses=error_responses(400, 404, 503))
async def add_partitions(name: TopicName, body: AddPartitions, request: Request, ctl: Ctl) -> Any:
    if (fwd := await _forward(ctl, request)) is not None:
        return fwd
    return await ctl.topics.add_partitions(name, body.partitions)
