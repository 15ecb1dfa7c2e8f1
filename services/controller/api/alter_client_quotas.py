"""AlterClientQuotas: set or remove quota keys per entity; ``validate_only`` checks without writing.
Refusals are INVALID_REQUEST (``QuotaConfigError``). Any controller answers: etcd orders the writes."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr

from services.controller.api import ControllerApi
from services.controller.api.fields import EntityName
from shared.quota.entities import QUOTA_KEYS, QuotaConfigError, QuotaEntity
from shared.request_context import RequestContext


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


async def alter_client_quotas(c: ControllerApi, ctx: RequestContext, request: AlterQuotas) -> dict[str, Any]:
    """``{"entries": [per entity: the entity and its values after the change], "validate_only": ...}``."""
    changes = []
    for e in request.entries:
        entity = QuotaEntity.from_dict(e.entity)
        ops: list[tuple[str, float | None]] = []
        for op in e.ops:
            if op.remove == (op.value is not None):
                raise QuotaConfigError(f"{entity}: {op.key}: give either a value or remove=true")
            ops.append((op.key, op.value))
        changes.append((entity, ops))
    results = await c.quotas.alter(changes, request.validate_only)
    return {"entries": results, "validate_only": request.validate_only}
