"""``/v1/topics``: create, list, describe, delete, alter configs, add partitions.

Any controller answers; writes reaching a standby are forwarded to the active
controller (its REST URL is in etcd), so clients may use any controller URL.
"""

from __future__ import annotations

from typing import Annotated, Any

import httpx
from fastapi import APIRouter, Depends, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from services.controller.rest.deps import controller
from shared.errors import ErrorCode, TidelogError

router = APIRouter(prefix="/v1/topics", tags=["topics"])

ConfigValue = str | int | float | bool


class CreateTopic(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(..., description="topic name: letters, digits, '.', '_', '-'; at most 249 characters")
    partitions: int = Field(1, ge=1, le=10_000)
    replication_factor: int = Field(1, ge=1, le=32)
    configs: dict[str, ConfigValue] = Field(default_factory=dict, description="Kafka topic configs, e.g. retention.ms")


class AlterConfigs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    configs: dict[str, ConfigValue | None] = Field(..., description="new values; null removes an override")


class AddPartitions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    partitions: int = Field(..., ge=1, le=10_000, description="the new total number of partitions")


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


class NotActiveError(TidelogError):
    code = ErrorCode.NOT_CONTROLLER


async def _forward(ctl: Any, request: Request) -> Response | None:
    """None if this controller is active; else the active controller's answer to the same request."""
    if ctl.election is not None and ctl.election.active:
        return None
    active = await ctl.store.get(ctl.store.keys.controller())
    if active is None:
        raise NotActiveError("no active controller right now; retry shortly")
    url = active[0]["rest"] + request.url.path
    async with httpx.AsyncClient(timeout=30) as client:
        upstream = await client.request(
            request.method, url, content=await request.body(), headers={"content-type": "application/json"}
        )
    return Response(upstream.content, status_code=upstream.status_code, media_type="application/json")


Ctl = Annotated[Any, Depends(controller)]


@router.post("", status_code=201, response_model=TopicView, summary="Create a topic")
async def create_topic(body: CreateTopic, request: Request, ctl: Ctl) -> Any:
    if (fwd := await _forward(ctl, request)) is not None:
        return fwd
    return await ctl.topics.create(body.name, body.partitions, body.replication_factor, dict(body.configs))


@router.get("", summary="List topic names")
async def list_topics(ctl: Ctl) -> dict[str, list[str]]:
    return {"topics": await ctl.topics.topic_names()}


@router.get("/{name}", response_model=TopicView, summary="Partitions (leader, replicas, ISR, epochs) and configs")
async def describe_topic(name: str, ctl: Ctl) -> Any:
    return await ctl.topics.describe(name)


@router.delete("/{name}", status_code=204, summary="Delete a topic and its data")
async def delete_topic(name: str, request: Request, ctl: Ctl) -> Response:
    if (fwd := await _forward(ctl, request)) is not None:
        return fwd
    await ctl.topics.delete(name)
    return Response(status_code=204)


@router.patch("/{name}/configs", response_model=TopicView, summary="Set or remove config overrides")
async def alter_configs(name: str, body: AlterConfigs, request: Request, ctl: Ctl) -> Any:
    if (fwd := await _forward(ctl, request)) is not None:
        return fwd
    return await ctl.topics.alter_configs(name, dict(body.configs))


@router.post("/{name}/partitions", response_model=TopicView, summary="Grow the partition count")
async def add_partitions(name: str, body: AddPartitions, request: Request, ctl: Ctl) -> Any:
    if (fwd := await _forward(ctl, request)) is not None:
        return fwd
    return await ctl.topics.add_partitions(name, body.partitions)
