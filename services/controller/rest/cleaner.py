"""``/v1/cleaner``: log compaction across the cluster, asked of every live broker.

Jobs in progress (log, worker, progress), each compacted log's dirty ratio and compaction
delay, quarantined logs, and per worker the bytes cleaned and the rate. The brokers are read
from etcd; each answers over its LogCleaner gRPC service (``shared.client.cleaner_status``).
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Depends
from pydantic import BaseModel

from services.controller.rest.deps import controller
from shared.client.cleaner_status import cleaner_status

router = APIRouter(prefix="/v1", tags=["cleaner"])


class CleanerJob(BaseModel):
    job: str
    log: str
    worker: str
    progress: float
    lease_deadline_ms: int


class CompactedLog(BaseModel):
    log: str
    dirty_ratio: float
    compaction_delay_ms: int
    first_dirty: int
    first_uncleanable: int
    size_bytes: int


class QuarantinedLog(BaseModel):
    log: str
    reason: str


class WorkerRate(BaseModel):
    worker: str
    cleaned_bytes: int
    jobs_done: int
    mb_per_s: float


class BrokerCleaning(BaseModel):
    broker: str
    broker_id: int | None = None
    error: str | None = None
    cleaned_bytes: int = 0
    jobs_done: int = 0
    jobs_refused: int = 0
    jobs: list[CleanerJob] = []
    logs: list[CompactedLog] = []
    quarantined: list[QuarantinedLog] = []
    workers: list[WorkerRate] = []


@router.get("/cleaner", response_model=list[BrokerCleaning], summary="Log compaction status of every broker")
async def get_cleaner(ctl: Annotated[Any, Depends(controller)]) -> list[BrokerCleaning]:
    brokers = await ctl.store.get_prefix(ctl.store.keys.brokers_prefix())
    addresses = sorted(v["address"] for v, _, _ in brokers.values() if isinstance(v, dict) and v.get("address"))
    report = await asyncio.to_thread(cleaner_status, addresses)
    return [BrokerCleaning(**b) for b in report]  # type: ignore[arg-type]
