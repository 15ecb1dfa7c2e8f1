"""``/v1/quotas``: client quotas in the shape of Kafka's DescribeClientQuotas / AlterClientQuotas.

    GET  /v1/quotas?user=&client_id=&strict=     entries matching the filter (``<default>`` names a default)
    POST /v1/quotas/alter                        set/remove keys per entity; ``validate_only``
    GET  /v1/quotas/effective?user=&client_id=   which entry applies to a client and why (precedence level)

Each route translates onto ``services.controller.api.describe_client_quotas`` / ``alter_client_quotas``.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query

from services.controller.api import alter_client_quotas as alter_client_quotas_api
from services.controller.api import describe_client_quotas as describe_client_quotas_api
from services.controller.api.alter_client_quotas import AlterQuotas
from services.controller.api.fields import NAME_MAX, NAME_PATTERN
from services.controller.rest.deps import Api, Ctx
from services.controller.rest.errors import error_responses
from shared.quota.entities import ANONYMOUS

router = APIRouter(prefix="/v1/quotas", tags=["quotas"])

_NAME = {"min_length": 1, "max_length": NAME_MAX, "pattern": NAME_PATTERN}
_E400 = error_responses(400)


@router.get("", summary="Describe quota entries (filter by entity)", responses=_E400)
async def describe_quotas(c: Api, ctx: Ctx, user: str | None = Query(None, description="a user name or <default>", **_NAME),
                          client_id: str | None = Query(None, description="a client id or <default>", **_NAME),
                          strict: bool = Query(False, description="only entities with exactly these components"),
                          ) -> dict[str, Any]:
    request = describe_client_quotas_api.DescribeClientQuotas(user, client_id, strict)
    return await describe_client_quotas_api.describe_client_quotas(c, ctx, request)


@router.post("/alter", summary="Set or remove quota keys per entity", responses=_E400)
async def alter_quotas(body: AlterQuotas, c: Api, ctx: Ctx) -> dict[str, Any]:
    return await alter_client_quotas_api.alter_client_quotas(c, ctx, body)


@router.get("/effective", summary="The quotas that apply to a user and client id, and why", responses=_E400)
async def effective_quotas(c: Api, ctx: Ctx, user: str = Query(ANONYMOUS, description="the principal (ANONYMOUS today)", **_NAME),
                           client_id: str = Query("", description="the client id the client sends (may be empty)",
                                                  max_length=NAME_MAX, pattern=NAME_PATTERN)) -> dict[str, Any]:
    request = describe_client_quotas_api.EffectiveQuotas(user, client_id)
    return await describe_client_quotas_api.effective_quotas(c, ctx, request)
