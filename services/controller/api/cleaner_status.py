"""Log compaction across the cluster, asked of every live broker: jobs in progress (log, worker,
progress), each compacted log's dirty ratio, compaction delay and last cleaning, quarantined logs, and per worker
the bytes cleaned and the rate. The brokers are read from etcd; each answers over its LogCleaner gRPC
service (``shared.client.cleaner_status``); a broker that does not answer is listed with its error."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from pydantic import BaseModel

from services.controller.api import ControllerApi
from shared.client import cleaner_status as cleaner_client
from shared.request_context import RequestContext


@dataclass(frozen=True, slots=True)
class DescribeCleaner:
    pass


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
    last_cleaned_ms: int | None = None  # wall-clock ms of the last cleaning since the broker started; None: none


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


async def cleaner_status(c: ControllerApi, ctx: RequestContext, request: DescribeCleaner) -> list[BrokerCleaning]:
    brokers = await c.store.get_prefix(c.store.keys.brokers_prefix())
    addresses = sorted(v["address"] for v, _, _ in brokers.values() if isinstance(v, dict) and v.get("address"))
    report = await asyncio.to_thread(cleaner_client.cleaner_status, addresses)
    return [BrokerCleaning(**b) for b in report]  # type: ignore[arg-type]
