"""Fetch, for both doors: the consumer quota check, the read (``ReplicaManager.fetch``: long poll,
min/max bytes), metrics and usage accounting. Followers' fetches are not a client's usage."""

from __future__ import annotations

import time
from dataclasses import dataclass

from services.broker.api import BrokerApi
from services.broker.pipeline import FETCH, FETCH_TYPES, RequestContext
from services.broker.replica_manager import FetchParams, FetchPartitionResult, FetchSpec
from shared.types import TopicPartition

DEFAULT_MAX_BYTES = 50 * 1024 * 1024


@dataclass(slots=True)
class FetchCall:
    replica_id: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    specs: list[FetchSpec]


async def fetch(b: BrokerApi, ctx: RequestContext, call: FetchCall,
                ) -> tuple[dict[TopicPartition, FetchPartitionResult] | None, int]:
    """``(results, throttle_ms)``; results None when a consumer over its quota gets no data, at once."""
    consumer = call.replica_id < 0
    throttle_ms = b.pipeline.throttle_ms(ctx, FETCH_TYPES) if consumer else 0
    if throttle_ms:
        return None, throttle_ms
    params = FetchParams(replica_id=call.replica_id, max_wait_ms=call.max_wait_ms, min_bytes=call.min_bytes,
                         max_bytes=call.max_bytes or DEFAULT_MAX_BYTES, specs=call.specs)
    started = time.perf_counter()
    results = await b.rm.fetch(params)
    metrics = b.pipeline.metrics
    if metrics is not None:
        metrics.fetched(results)
        waited_s = time.perf_counter() - started - params.read_time_s
        metrics.request_done("Fetch" if consumer else "FetchFollower", max(started - ctx.arrival, 0.0),
                             params.read_time_s, max(waited_s, 0.0))
    if consumer:  # replication is not a client's usage
        nbytes = sum(len(r.records) for r in results.values())
        throttle_ms = b.pipeline.account(ctx, FETCH, nbytes, params.read_time_s, FETCH_TYPES)
    return results, throttle_ms
