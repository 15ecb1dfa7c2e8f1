"""Produce, for both doors: append in the caller's order, count the usage, read the throttle, then wait
for replication as ``acks`` asks.

``append`` is the synchronous part (a stream's sequencer runs it request by request, so appends keep
their order); ``complete`` waits for acks=all; ``ready`` answers at once what waits for nothing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from services.broker.api import BrokerApi
from services.broker.pipeline import PRODUCE, PRODUCE_TYPES, RequestContext
from services.broker.replica_manager import ProduceResult, ReplicationWait
from shared.types import TopicPartition


@dataclass(slots=True)
class ProduceCall:
    acks: int
    timeout_ms: int
    data: list[tuple[TopicPartition, bytes]]


@dataclass(slots=True)
class PendingProduce:
    call: ProduceCall
    results: dict[TopicPartition, ProduceResult]
    waits: list[ReplicationWait]
    throttle_ms: int
    held_s: float  # from arrival to the append
    local_s: float  # appending


def append(b: BrokerApi, ctx: RequestContext, call: ProduceCall) -> PendingProduce:
    started = time.perf_counter()
    results, waits = b.rm.append(call.acks, call.data)
    handler_s = time.perf_counter() - started
    nbytes = sum(len(records) for _, records in call.data)
    metrics = b.pipeline.metrics
    if metrics is not None:
        metrics.produced(call.data, results)
    throttle_ms = b.pipeline.account(ctx, PRODUCE, nbytes, handler_s, PRODUCE_TYPES)
    return PendingProduce(call, results, waits, throttle_ms, started - ctx.arrival, handler_s)


async def complete(b: BrokerApi, pending: PendingProduce) -> dict[TopicPartition, ProduceResult]:
    started = time.perf_counter()
    results = await b.rm.complete_produce(pending.call.timeout_ms, pending.results, pending.waits)
    _done(b, pending, time.perf_counter() - started)
    return results


def ready(b: BrokerApi, pending: PendingProduce) -> dict[TopicPartition, ProduceResult] | None:
    """The results at once when nothing waits for replication (acks 0/1): no task, no loop turn."""
    if pending.waits:
        return None
    _done(b, pending, 0.0)
    return pending.results


def _done(b: BrokerApi, pending: PendingProduce, remote_s: float) -> None:
    metrics = b.pipeline.metrics
    if metrics is not None:
        metrics.request_done("Produce", max(pending.held_s, 0.0), pending.local_s, remote_s)
