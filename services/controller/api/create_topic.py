"""CreateTopics, one topic a request: name, partitions, replication factor and config overrides,
written by the active controller (``TopicManager.create``: INVALID_TOPIC_EXCEPTION,
TOPIC_ALREADY_EXISTS, INVALID_REPLICATION_FACTOR, INVALID_CONFIG, ...)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

from services.controller.api import ControllerApi
from services.controller.api.describe_topics import TopicView
from services.controller.api.fields import TOPIC_NAME_SCHEMA, ConfigName, ConfigValue
from services.controller.topics import MAX_PARTITIONS
from shared.request_context import RequestContext


class CreateTopic(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    # Name rules are checked by the controller (INVALID_TOPIC_EXCEPTION, Kafka's code); the schema states them.
    name: StrictStr = Field(..., description="topic name: letters, digits, '.', '_', '-'; at most 249 characters",
                            json_schema_extra=TOPIC_NAME_SCHEMA)
    partitions: StrictInt = Field(1, ge=1, le=MAX_PARTITIONS)
    replication_factor: StrictInt = Field(1, ge=1, le=32)
    configs: dict[ConfigName, ConfigValue] = Field(default_factory=dict, description="Kafka topic configs, e.g. retention.ms")


async def create_topic(c: ControllerApi, ctx: RequestContext, request: CreateTopic) -> TopicView:
    created = await c.topic_manager().create(request.name, request.partitions, request.replication_factor,
                                             dict(request.configs))
    return TopicView(**created)
