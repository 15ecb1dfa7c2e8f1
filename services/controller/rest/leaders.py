"""``/v1/elect-leaders``: preferred-leader election (Kafka's kafka-leader-election.sh --election-type
preferred), translated onto ``services.controller.api.elect_leaders``; forwarded to the active controller
like topic writes."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from services.controller.api import elect_leaders as elect_leaders_api
from services.controller.api.elect_leaders import ElectLeaders, ElectLeadersResult
from services.controller.rest.deps import Api, Ctx
from services.controller.rest.errors import error_responses
from services.controller.rest.topics import _forward

router = APIRouter(prefix="/v1", tags=["leaders"])


@router.post("/elect-leaders", response_model=ElectLeadersResult,
             summary="Move leadership back to each partition's preferred (first) replica",
             responses=error_responses(400, 404, 503))
async def elect_leaders(body: ElectLeaders, request: Request, c: Api, ctx: Ctx) -> Any:
    if (fwd := await _forward(c, request)) is not None:
        return fwd
    return await elect_leaders_api.elect_leaders(c, ctx, body)
