"""DeleteTopics, one topic a request: the active controller removes the topic and its partitions; the
brokers delete the data (UNKNOWN_TOPIC_OR_PARTITION for a topic that does not exist)."""

from __future__ import annotations

from dataclasses import dataclass

from services.controller.api import ControllerApi
from shared.request_context import RequestContext


@dataclass(frozen=True, slots=True)
class DeleteTopic:
    name: str


async def delete_topic(c: ControllerApi, ctx: RequestContext, request: DeleteTopic) -> None:
    await c.topic_manager().delete(request.name)
