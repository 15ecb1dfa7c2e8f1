"""Mark a broker as being decommissioned (``POST|DELETE /v1/balancer/decommissioning/{broker}``): the
balancer excludes it — moves every replica off it and places none on it — instead of filling it again
once ``tidelog brokers decommission`` emptied it. The mark (etcd ``balancer/decommissioning/<id>``) is
dropped by the balancer once the broker is gone and holds nothing, or removed here."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel

from services.controller.api import ControllerApi
from services.controller.balancer_loop import balancer_key
from shared.errors import ErrorCode, NotActiveError, TidelogError
from shared.request_context import RequestContext


@dataclass(frozen=True, slots=True)
class DecommissioningBroker:
    broker: int


class DecommissioningView(BaseModel):
    broker: int
    decommissioning: bool


async def _set(c: ControllerApi, broker: int, on: bool) -> DecommissioningView:
    if broker < 0:
        raise TidelogError(f"invalid broker id {broker}", code=ErrorCode.INVALID_REQUEST)
    if c.election is None or not c.election.active:
        raise NotActiveError("not the active controller")
    key = balancer_key(c.store, f"decommissioning/{broker}")
    got = await c.store.get(key)
    op = c.store.op_put(key, {"broker": broker}) if on else c.store.op_delete(key)
    guard = c.store.cmp_mod_revision(key, got[2]) if got else c.store.cmp_absent(key)
    await c.election.write([op], [guard], "decommissioning mark changed concurrently; retry")
    return DecommissioningView(broker=broker, decommissioning=on)


async def mark_decommissioning(c: ControllerApi, ctx: RequestContext,
                               request: DecommissioningBroker) -> DecommissioningView:
    return await _set(c, request.broker, True)


async def unmark_decommissioning(c: ControllerApi, ctx: RequestContext,
                                 request: DecommissioningBroker) -> DecommissioningView:
    return await _set(c, request.broker, False)
