"""``/v1/brokers/{broker}/configs``: dynamic broker configs (per broker id or ``<default>``), translated
onto ``services.controller.api.broker_configs``; writes are forwarded to the active controller."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from services.controller.api import broker_configs as api
from services.controller.api.broker_configs import (
    AlterBrokerConfigs,
    AlterBrokerConfigsOf,
    BrokerConfigsView,
    DescribeBrokerConfigs,
)
from services.controller.rest.deps import Api, Ctx
from services.controller.rest.errors import error_responses
from services.controller.rest.topics import _forward

router = APIRouter(prefix="/v1/brokers", tags=["brokers"])


@router.get("/{broker}/configs", response_model=BrokerConfigsView,
            summary="Dynamic configs set for a broker (or <default>)", responses=error_responses(400))
async def describe_broker_configs(broker: str, c: Api, ctx: Ctx) -> Any:
    return await api.describe_broker_configs(c, ctx, DescribeBrokerConfigs(broker))


@router.patch("/{broker}/configs", response_model=BrokerConfigsView,
              summary="Set or remove (null) dynamic configs of a broker (or <default>)",
              responses=error_responses(400, 503))
async def alter_broker_configs(broker: str, body: AlterBrokerConfigs, request: Request, c: Api, ctx: Ctx) -> Any:
    if (fwd := await _forward(c, request)) is not None:
        return fwd
    return await api.alter_broker_configs(c, ctx, AlterBrokerConfigsOf(broker, dict(body.configs)))
