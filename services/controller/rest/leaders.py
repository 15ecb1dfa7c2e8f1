"""``/v1/elect-leaders``: preferred-leader election (Kafka's kafka-leader-election.sh --election-type preferred)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field

from services.controller.rest.deps import controller
from services.controller.rest.topics import _forward
from shared.types import TopicPartition

router = APIRouter(prefix="/v1", tags=["leaders"])


class ElectLeaders(BaseModel):
    model_config = ConfigDict(extra="forbid")
    topic: str | None = Field(None, description="only this topic (default: every topic)")
    partitions: list[int] | None = Field(None, description="only these partitions of the topic")


@router.post("/elect-leaders", summary="Move leadership back to each partition's preferred (first) replica")
async def elect_leaders(request: Request, ctl: Annotated[Any, Depends(controller)],
                        body: ElectLeaders | None = None) -> Any:
    if (fwd := await _forward(ctl, request)) is not None:
        return fwd
    body = body or ElectLeaders()
    only = None
    if body.topic is not None:
        desc = await ctl.topics.describe(body.topic)  # 404 for an unknown topic
        parts = body.partitions if body.partitions is not None else [p["partition"] for p in desc["partitions"]]
        only = [TopicPartition(body.topic, p) for p in parts]
    changes = await ctl.partitions.elect_preferred(only)
    return {"elected": ctl.partitions.describe_changes(changes)}
