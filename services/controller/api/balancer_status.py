"""The continuous balancer's status (``GET /v1/balancer``): enabled, paused, the last check and why it
fired, the balancer's moves in flight with their goals, and the last plan. Answered by the active
controller (the one running the balancer); the REST door forwards there."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field

from services.controller.api import ControllerApi
from shared.errors import NotActiveError
from shared.request_context import RequestContext


@dataclass(frozen=True, slots=True)
class DescribeBalancer:
    pass


class BalancerMoveView(BaseModel):
    topic: str
    partition: int
    replicas: list[int] = Field(description="the target replicas, preferred leader first")
    goal: str = Field(description="racks, availability, replicas, leaders or bytes")
    adding: list[int] = []
    started_ms: int | None = None


class BalancerStatus(BaseModel):
    enabled: bool
    paused: bool
    configs: dict[str, Any] = Field(description="the balancer.* settings of the active controller")
    last_check_ms: int | None = Field(None, description="when the last check ran (ms since the epoch)")
    last_triggers: list[str] = Field(description="why the last check found the cluster out of balance")
    idle_reason: str = Field("", description="why the last check started no move although triggers fired")
    last_error: str = ""
    moves_in_flight: list[BalancerMoveView]
    last_plan: list[BalancerMoveView]
    last_plan_ms: int | None = None
    decommissioning: list[int] = Field(description="brokers marked as being decommissioned (excluded)")
    moves_started: int = Field(description="moves started by this controller since it became active")
    moves_completed: int


def the_balancer(c: ControllerApi) -> Any:
    loop = c.balancer
    if loop is None or not c.active:
        raise NotActiveError("not the active controller (the balancer runs there)")
    return loop


async def describe_balancer(c: ControllerApi, ctx: RequestContext, request: DescribeBalancer) -> BalancerStatus:
    loop = the_balancer(c)
    paused = await loop.read_paused()
    moves, _, _ = await loop.read_state()
    decom = await loop.read_decommissioning()
    return BalancerStatus(
        enabled=loop.config.enable, paused=paused, configs=loop.config.as_kafka(), last_check_ms=loop.last_check_ms,
        last_triggers=list(loop.last_triggers), idle_reason=loop.last_idle, last_error=loop.last_error,
        moves_in_flight=[BalancerMoveView(topic=m.tp.topic, partition=m.tp.partition, replicas=m.replicas,
                                          goal=m.goal, adding=m.adding, started_ms=m.started_ms)
                         for m in moves.values()],
        last_plan=[BalancerMoveView(topic=m.tp.topic, partition=m.tp.partition, replicas=list(m.replicas), goal=m.goal)
                   for m in loop.last_plan],
        last_plan_ms=loop.last_plan_ms, decommissioning=sorted(decom), moves_started=loop.started,
        moves_completed=loop.completed)
