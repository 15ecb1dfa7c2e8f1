"""``/v1/balancer``: the continuous balancer's status, pause and resume, and decommissioning marks,
translated onto ``services.controller.api.balancer_*``. Every route is answered by the active controller
(it runs the balancer): others forward.

    GET    /v1/balancer                               status: enabled, paused, triggers, moves, last plan
    POST   /v1/balancer/pause                         start no new move (kept across failovers)
    POST   /v1/balancer/resume
    POST   /v1/balancer/decommissioning/{broker}      exclude a broker: move everything off it
    DELETE /v1/balancer/decommissioning/{broker}      use it again
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Request

from services.controller.api import balancer_decommissioning as decom_api
from services.controller.api import balancer_pause as pause_api
from services.controller.api import balancer_status as status_api
from services.controller.api.balancer_decommissioning import DecommissioningBroker, DecommissioningView
from services.controller.api.balancer_pause import BalancerPaused, SetBalancerPaused
from services.controller.api.balancer_status import BalancerStatus, DescribeBalancer
from services.controller.api.fields import INT32_MAX
from services.controller.rest.deps import Api, Ctx
from services.controller.rest.errors import error_responses
from services.controller.rest.topics import _forward

router = APIRouter(prefix="/v1/balancer", tags=["balancer"])
BrokerId = Annotated[int, Path(ge=0, le=INT32_MAX, description="broker id")]


@router.get("", response_model=BalancerStatus, summary="The continuous balancer's status",
            responses=error_responses(503))
async def describe_balancer(request: Request, c: Api, ctx: Ctx) -> Any:
    if (fwd := await _forward(c, request)) is not None:
        return fwd
    return await status_api.describe_balancer(c, ctx, DescribeBalancer())


@router.post("/pause", response_model=BalancerPaused, summary="Pause the balancer: no new move starts",
             responses=error_responses(400, 503))
async def pause_balancer(request: Request, c: Api, ctx: Ctx) -> Any:
    if (fwd := await _forward(c, request)) is not None:
        return fwd
    return await pause_api.pause_balancer(c, ctx, SetBalancerPaused(True))


@router.post("/resume", response_model=BalancerPaused, summary="Resume the balancer",
             responses=error_responses(400, 503))
async def resume_balancer(request: Request, c: Api, ctx: Ctx) -> Any:
    if (fwd := await _forward(c, request)) is not None:
        return fwd
    return await pause_api.resume_balancer(c, ctx, SetBalancerPaused(False))


@router.post("/decommissioning/{broker}", response_model=DecommissioningView,
             summary="Mark a broker as being decommissioned: the balancer moves every replica off it",
             responses=error_responses(400, 503))
async def mark_decommissioning(broker: BrokerId, request: Request, c: Api, ctx: Ctx) -> Any:
    if (fwd := await _forward(c, request)) is not None:
        return fwd
    return await decom_api.mark_decommissioning(c, ctx, DecommissioningBroker(broker))


@router.delete("/decommissioning/{broker}", response_model=DecommissioningView,
               summary="Clear a broker's decommissioning mark", responses=error_responses(400, 503))
async def unmark_decommissioning(broker: BrokerId, request: Request, c: Api, ctx: Ctx) -> Any:
    if (fwd := await _forward(c, request)) is not None:
        return fwd
    return await decom_api.unmark_decommissioning(c, ctx, DecommissioningBroker(broker))
