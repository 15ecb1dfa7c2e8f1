"""DeleteGroups, one group a request: an empty group and its committed offsets (GROUP_ID_NOT_FOUND,
NON_EMPTY_GROUP while it has members, COORDINATOR_NOT_AVAILABLE)."""

from __future__ import annotations

from dataclasses import dataclass

from services.controller.api import ControllerApi
from shared.request_context import RequestContext


@dataclass(frozen=True, slots=True)
class DeleteGroup:
    group_id: str


async def delete_group(c: ControllerApi, ctx: RequestContext, request: DeleteGroup) -> None:
    await c.groups.delete(request.group_id)
