"""``/v1/log-dirs`` and ``/v1/brokers/{broker}/log-dirs``: disk use per broker and per partition replica
(Kafka's DescribeLogDirs), translated onto ``services.controller.api.describe_log_dirs``. Any controller
answers: it asks the brokers itself."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from services.controller.api import describe_log_dirs as api
from services.controller.api.describe_log_dirs import DescribeLogDirs, LogDirsView
from services.controller.rest.deps import Api, Ctx
from services.controller.rest.errors import error_responses

router = APIRouter(prefix="/v1", tags=["brokers"])

Topics = Annotated[list[str] | None, Query(description="only these topics (repeatable)")]


@router.get("/log-dirs", response_model=LogDirsView, summary="Disk use of every live broker and its replicas",
            responses=error_responses(400))
async def describe_all(c: Api, ctx: Ctx, topic: Topics = None) -> Any:
    return await api.describe_log_dirs(c, ctx, DescribeLogDirs(None, topic))


@router.get("/brokers/{broker}/log-dirs", response_model=LogDirsView,
            summary="Disk use of one broker and its replicas", responses=error_responses(400))
async def describe_one(broker: int, c: Api, ctx: Ctx, topic: Topics = None) -> Any:
    return await api.describe_log_dirs(c, ctx, DescribeLogDirs([broker], topic))
