"""``/v1/topics``: create, list, describe, delete, alter configs, add partitions.

Any controller answers; writes reaching a standby are forwarded to the active
controller (its REST URL is in etcd), so clients may use any controller URL.
Each route translates onto its API (``services/controller/api``).
"""

from __future__ import annotations

from typing import Annotated, Any

import httpx
from fastapi import APIRouter, Path, Request, Response

from services.controller.api import ControllerApi
from services.controller.api import alter_configs as alter_configs_api
from services.controller.api import create_partitions as create_partitions_api
from services.controller.api import create_topic as create_topic_api
from services.controller.api import delete_topic as delete_topic_api
from services.controller.api import describe_topics as describe_topics_api
from services.controller.api.alter_configs import AlterConfigs
from services.controller.api.create_partitions import AddPartitions
from services.controller.api.create_topic import CreateTopic
from services.controller.api.describe_topics import TopicList, TopicView
from services.controller.api.fields import TOPIC_NAME_MAX, TOPIC_NAME_PATTERN
from services.controller.rest.deps import Api, Ctx, forward_headers, forward_verify
from services.controller.rest.errors import error_responses
from shared.errors import NotActiveError

router = APIRouter(prefix="/v1/topics", tags=["topics"])

TopicName = Annotated[str, Path(description="topic name", pattern=TOPIC_NAME_PATTERN, min_length=1,
                                max_length=TOPIC_NAME_MAX)]


async def _forward(c: ControllerApi, request: Request) -> Response | None:
    """None if this controller is active; else the active controller's answer to the same request (with
    the caller's credential: the active controller checks it again; over TLS, verified by the cluster CA)."""
    if c.active:
        return None
    active = await c.store.get(c.store.keys.controller())
    if active is None:
        raise NotActiveError("no active controller right now; retry shortly")
    url = active[0]["rest"] + request.url.path
    try:
        async with httpx.AsyncClient(timeout=60, verify=forward_verify(c)) as client:
            upstream = await client.request(
                request.method, url, content=await request.body(), headers=forward_headers(request)
            )
    except httpx.HTTPError as exc:
        raise NotActiveError(f"the active controller did not answer ({type(exc).__name__}); retry shortly") from None
    request.state.forwarded = True  # the active controller audits the change
    headers = {k: v for k, v in upstream.headers.items() if k.lower() in ("www-authenticate", "retry-after")}
    return Response(upstream.content, status_code=upstream.status_code, media_type="application/json",
                    headers=headers)


@router.post("", status_code=201, response_model=TopicView, summary="Create a topic",
             responses=error_responses(400, 409, 503))
async def create_topic(body: CreateTopic, request: Request, c: Api, ctx: Ctx) -> Any:
    if (fwd := await _forward(c, request)) is not None:
        return fwd
    return await create_topic_api.create_topic(c, ctx, body)


@router.get("", response_model=TopicList, summary="List topic names")
async def list_topics(c: Api, ctx: Ctx) -> Any:
    return await describe_topics_api.list_topics(c, ctx, describe_topics_api.ListTopics())


@router.get("/{name}", response_model=TopicView, summary="Partitions (leader, replicas, ISR, epochs) and configs",
            responses=error_responses(400, 404))
async def describe_topic(name: TopicName, c: Api, ctx: Ctx) -> Any:
    return await describe_topics_api.describe_topic(c, ctx, describe_topics_api.DescribeTopic(name))


@router.delete("/{name}", status_code=204, summary="Delete a topic and its data",
               responses=error_responses(400, 404, 503))
async def delete_topic(name: TopicName, request: Request, c: Api, ctx: Ctx) -> Response:
    if (fwd := await _forward(c, request)) is not None:
        return fwd
    await delete_topic_api.delete_topic(c, ctx, delete_topic_api.DeleteTopic(name))
    return Response(status_code=204)


@router.patch("/{name}/configs", response_model=TopicView, summary="Set or remove config overrides",
              responses=error_responses(400, 404, 503))
async def alter_configs(name: TopicName, body: AlterConfigs, request: Request, c: Api, ctx: Ctx) -> Any:
    if (fwd := await _forward(c, request)) is not None:
        return fwd
    return await alter_configs_api.alter_configs(c, ctx, alter_configs_api.AlterTopicConfigs(name, dict(body.configs)))


@router.post("/{name}/partitions", response_model=TopicView, summary="Grow the partition count",
             responses=error_responses(400, 404, 503))
async def add_partitions(name: TopicName, body: AddPartitions, request: Request, c: Api, ctx: Ctx) -> Any:
    if (fwd := await _forward(c, request)) is not None:
        return fwd
    return await create_partitions_api.create_partitions(c, ctx, create_partitions_api.CreatePartitions(name, body.partitions))
