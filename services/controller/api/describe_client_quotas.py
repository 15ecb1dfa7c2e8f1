"""DescribeClientQuotas (entries matching a filter; ``<default>`` names a default entity) and the
effective quotas of a client (which entry applies to a user and client id, and at which precedence
level): two reads of the same quota entries, in one module. Any controller answers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from services.controller.api import ControllerApi
from services.controller.quota_configs import EntityFilter, parse_component
from shared.request_context import RequestContext


@dataclass(frozen=True, slots=True)
class DescribeClientQuotas:
    """Per component a name, ``<default>``, or None (any); ``strict``: only entities with exactly these."""

    user: str | None = None
    client_id: str | None = None
    strict: bool = False


@dataclass(frozen=True, slots=True)
class EffectiveQuotas:
    user: str
    client_id: str


async def describe_client_quotas(c: ControllerApi, ctx: RequestContext,
                                 request: DescribeClientQuotas) -> dict[str, Any]:
    """``{"entries": [{"entity": ..., "values": ...}, ...]}``."""
    flt = EntityFilter(parse_component(request.user), parse_component(request.client_id), request.strict)
    return {"entries": await c.quotas.describe(flt)}


async def effective_quotas(c: ControllerApi, ctx: RequestContext, request: EffectiveQuotas) -> dict[str, Any]:
    """``{"user", "client_id", "quotas": per key the value that applies, its entry and precedence level}``."""
    return await c.quotas.effective(request.user, request.client_id)
