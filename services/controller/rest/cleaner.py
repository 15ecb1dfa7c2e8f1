"""``/v1/cleaner``: log compaction across the cluster, asked of every live broker
(``services.controller.api.cleaner_status``)."""

from __future__ import annotations

from fastapi import APIRouter

from services.controller.api import cleaner_status as cleaner_status_api
from services.controller.api.cleaner_status import BrokerCleaning
from services.controller.rest.deps import Api, Ctx

router = APIRouter(prefix="/v1", tags=["cleaner"])


@router.get("/cleaner", response_model=list[BrokerCleaning], summary="Log compaction status of every broker")
async def get_cleaner(c: Api, ctx: Ctx) -> list[BrokerCleaning]:
    return await cleaner_status_api.cleaner_status(c, ctx, cleaner_status_api.DescribeCleaner())
