"""Pause and resume the continuous balancer (``POST /v1/balancer/pause|resume``). The state is an etcd
key (``balancer/paused``), so a controller failover keeps it. Pausing starts no new move; the moves in
flight complete (cancel them with ``tidelog reassign cancel`` if need be)."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel

from services.controller.api import ControllerApi
from services.controller.balancer_loop import balancer_key
from shared.errors import NotActiveError
from shared.request_context import RequestContext


@dataclass(frozen=True, slots=True)
class SetBalancerPaused:
    paused: bool


class BalancerPaused(BaseModel):
    paused: bool


async def _set(c: ControllerApi, paused: bool) -> BalancerPaused:
    if c.election is None or not c.election.active:
        raise NotActiveError("not the active controller")
    key = balancer_key(c.store, "paused")
    got = await c.store.get(key)
    op = c.store.op_put(key, {"paused": True}) if paused else c.store.op_delete(key)
    guard = c.store.cmp_mod_revision(key, got[2]) if got else c.store.cmp_absent(key)
    await c.election.write([op], [guard], "balancer pause changed concurrently; retry")
    loop = c.balancer
    if loop is not None:
        loop.paused = paused
    return BalancerPaused(paused=paused)


async def pause_balancer(c: ControllerApi, ctx: RequestContext, request: SetBalancerPaused) -> BalancerPaused:
    return await _set(c, True)


async def resume_balancer(c: ControllerApi, ctx: RequestContext, request: SetBalancerPaused) -> BalancerPaused:
    return await _set(c, False)
