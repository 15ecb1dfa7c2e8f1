"""AlterConfigs on a topic (Kafka's IncrementalAlterConfigs SET/DELETE): new values, ``None`` removes an
override; checked as at creation (INVALID_CONFIG), written by the active controller."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from services.controller.api import ControllerApi
from services.controller.api.describe_topics import TopicView
from services.controller.api.fields import ConfigName, ConfigValue
from shared.request_context import RequestContext


# The request's body on the REST door (the path names the topic).
class AlterConfigs(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    configs: dict[ConfigName, ConfigValue | None] = Field(..., description="new values; null removes an override")


@dataclass(frozen=True, slots=True)
class AlterTopicConfigs:
    name: str
    configs: dict[str, Any]


async def alter_configs(c: ControllerApi, ctx: RequestContext, request: AlterTopicConfigs) -> TopicView:
    return TopicView(**await c.topic_manager().alter_configs(request.name, dict(request.configs)))
