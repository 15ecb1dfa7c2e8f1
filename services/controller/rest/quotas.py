"""``/v1/quotas``: client quotas in the shape of Kafka's DescribeClientQuotas / AlterClientQuotas.

    GET  /v1/quotas?user=&client_id=&strict=     entries matching the filter (``<default>`` names a default)
    POST /v1/quotas/alter                        set/remove keys per entity; ``validate_only``
    GET  /v1/quotas/effective?user=&client_id=   which entry applies to a client and why (precedence level)
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr

from services.controller.quota_configs import EntityFilter, QuotaConfigs, parse_component
from services.controller.rest.deps import controller
from services.controller.rest.errors import NAME_MAX, NAME_PATTERN, error_responses
from shared.quota.entities import ANONYMOUS, QUOTA_KEYS, QuotaConfigError, QuotaEntity

router = APIRouter(prefix="/v1/quotas", tags=["quotas"])
Ctl = Annotated[Any, Depends(controller)]


#: A user name or client id (``<default>`` names the default entity in queries).
EntityName = Annotated[StrictStr, Field(min_length=1, max_length=NAME_MAX, pattern=NAME_PATTERN)]
_NAME = {"min_length": 1, "max_length": NAME_MAX, "pattern": NAME_PATTERN}
_E400 = error_responses(400)


class QuotaOp(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    key: StrictStr = Field(..., max_length=64,
                           description="producer_byte_rate, consumer_byte_rate, request_percentage or cluster_wide")
    value: float | None = Field(None, allow_inf_nan=False, description="the new value (omit with remove)")
    remove: StrictBool = Field(False, description="remove the key from the entity")


class EntityAlteration(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    entity: dict[Literal["user", "client-id"], EntityName | None] = Field(
        ..., min_length=1, description='e.g. {"user": "alice", "client-id": null} (null: the default entity of that type)')
    ops: list[QuotaOp] = Field(..., min_length=1, max_length=len(QUOTA_KEYS) * 2)


class AlterQuotas(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    entries: list[EntityAlteration] = Field(..., min_length=1, max_length=1000)
    validate_only: StrictBool = False


def _configs(ctl: Any) -> QuotaConfigs:
    return QuotaConfigs(ctl.store)


@router.get("", summary="Describe quota entries (filter by entity)", responses=_E400)
async def describe_quotas(ctl: Ctl, user: str | None = Query(None, description="a user name or <default>", **_NAME),
                          client_id: str | None = Query(None, description="a client id or <default>", **_NAME),
                          strict: bool = Query(False, description="only entities with exactly these components"),
                          ) -> dict[str, Any]:
    flt = EntityFilter(parse_component(user), parse_component(client_id), strict)
    return {"entries": await _configs(ctl).describe(flt)}


@router.post("/alter", summary="Set or remove quota keys per entity", responses=_E400)
async def alter_quotas(body: AlterQuotas, ctl: Ctl) -> dict[str, Any]:
    changes = []
    for e in body.entries:
        entity = QuotaEntity.from_dict(e.entity)
        ops: list[tuple[str, float | None]] = []
        for op in e.ops:
            if op.remove == (op.value is not None):
                raise QuotaConfigError(f"{entity}: {op.key}: give either a value or remove=true")
            ops.append((op.key, op.value))
        changes.append((entity, ops))
    results = await _configs(ctl).alter(changes, body.validate_only)
    return {"entries": results, "validate_only": body.validate_only}


@router.get("/effective", summary="The quotas that apply to a user and client id, and why", responses=_E400)
async def effective_quotas(ctl: Ctl, user: str = Query(ANONYMOUS, description="the principal (ANONYMOUS today)", **_NAME),
                           client_id: str = Query("", description="the client id the client sends (may be empty)",
                                                  max_length=NAME_MAX, pattern=NAME_PATTERN)) -> dict[str, Any]:
    return await _configs(ctl).effective(user, client_id)
