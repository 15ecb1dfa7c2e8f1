"""Dynamic broker configs (Kafka's IncrementalAlterConfigs / DescribeConfigs on ConfigResource BROKER):
per broker id, or for ``<default>`` (every broker). Today: the replication throttle rates
(``leader.replication.throttled.rate``, ``follower.replication.throttled.rate``), which brokers apply
at once (they watch the keys). Written by the active controller, fenced by its epoch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

from services.controller.api import ControllerApi
from shared.config import BROKER_CONFIGS, validate_broker_configs
from shared.errors import ErrorCode, NotActiveError, TidelogError
from shared.request_context import RequestContext

DEFAULT = "<default>"


class AlterBrokerConfigs(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    configs: dict[StrictStr, StrictInt | StrictStr | None] = Field(
        ..., description="new values; null removes the override")


@dataclass(frozen=True, slots=True)
class DescribeBrokerConfigs:
    broker: str


@dataclass(frozen=True, slots=True)
class AlterBrokerConfigsOf:
    broker: str
    configs: dict[str, Any]


class BrokerConfigsView(BaseModel):
    broker: str = Field(description="the broker id, or <default>")
    configs: dict[str, Any] = Field(description="the overrides set for it")


def entity(broker: str) -> str:
    """A broker id or ``<default>``; INVALID_REQUEST otherwise."""
    if broker == DEFAULT or (broker.isdigit() and int(broker) >= 0):
        return broker if broker == DEFAULT else str(int(broker))
    raise TidelogError(f"expected a broker id or {DEFAULT}, got {broker!r}", code=ErrorCode.INVALID_REQUEST)


async def describe_broker_configs(c: ControllerApi, ctx: RequestContext,
                                  request: DescribeBrokerConfigs) -> BrokerConfigsView:
    name = entity(request.broker)
    got = await c.store.get(c.store.keys.broker_config(name))
    return BrokerConfigsView(broker=name, configs=dict(got[0]) if got else {})


async def alter_broker_configs(c: ControllerApi, ctx: RequestContext,
                               request: AlterBrokerConfigsOf) -> BrokerConfigsView:
    name = entity(request.broker)
    unknown = sorted(k for k in request.configs if k not in BROKER_CONFIGS)
    if unknown:
        raise TidelogError(f"unknown dynamic broker configs {unknown}", code=ErrorCode.INVALID_CONFIG)
    sets = validate_broker_configs({k: v for k, v in request.configs.items() if v is not None})
    if c.election is None or not c.election.active:
        raise NotActiveError("not the active controller")
    key = c.store.keys.broker_config(name)
    got = await c.store.get(key)
    current = dict(got[0]) if got else {}
    current.update(sets)
    for k, v in request.configs.items():
        if v is None:
            current.pop(k, None)
    op = c.store.op_put(key, current) if current else c.store.op_delete(key)
    guard = c.store.cmp_mod_revision(key, got[2]) if got else c.store.cmp_absent(key)
    await c.election.write([op], [guard], "broker configs changed concurrently; retry")
    return BrokerConfigsView(broker=name, configs=current)
