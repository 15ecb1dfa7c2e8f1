"""Produce, for both doors: append in the caller's order, count the usage, read the throttle, then wait
for replication as ``acks`` asks.

``append`` is the synchronous part (a stream's sequencer runs it request by request, so appends keep
their order); ``complete`` waits for acks=all; ``ready`` answers at once what waits for nothing.
The partitions themselves (validation, offsets, idempotence, the high watermark) are the replica
manager's ``Partition`` objects; this module decides per request.

``authorize`` (secure clusters only: callers test ``pipeline.access.enabled`` first) is Kafka's
``handleProduceRequest`` rule, run before anything else: a request with a transactional id or any
transactional batch needs TRANSACTIONAL_ID WRITE on that id (a transactional batch without an id is
refused too: CVE-2018-17196 was the bypass of checking only the id), else every partition is answered
``TRANSACTIONAL_ID_AUTHORIZATION_FAILED``; each topic needs WRITE, else its partitions get
``TOPIC_AUTHORIZATION_FAILED``. An idempotent batch needs IDEMPOTENT_WRITE on the cluster or WRITE on some
topic (KIP-679): WRITE on the topic it goes to is that, as in Kafka 3.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from services.broker import request_limits
from services.broker.api import BrokerApi
from services.broker.partition import Partition
from services.broker.pipeline import PRODUCE, PRODUCE_TYPES, RequestContext
from services.broker.replica_manager import ReplicaManager
from services.broker.replica_results import ProduceResult
from shared.errors import ErrorCode, TidelogError
from shared.records.header import ATTR_TRANSACTIONAL, peek_attributes, whole_batch_size
from shared.security.access import TOPIC, TRANSACTIONAL_ID, WRITE
from shared.types import TopicPartition

log = logging.getLogger(__name__)
ReplicationWait = tuple[TopicPartition, Partition, int, int]  # partition, its object, offset to reach, epoch


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


def has_transactional_batch(records: bytes) -> bool:
    """Does any whole batch in ``records`` carry the transactional attribute?"""
    pos, end = 0, len(records)
    while (size := whole_batch_size(records, pos, end)) is not None:
        if peek_attributes(records, pos) & ATTR_TRANSACTIONAL:
            return True
        pos += size
    return False


def authorize(b: BrokerApi, ctx: RequestContext, transactional_id: str | None,
              data: list[tuple[TopicPartition, bytes]]) -> dict[TopicPartition, ProduceResult]:
    """The partitions ACLs refuse, with their errors (empty: all allowed). Audited."""
    access = b.pipeline.access
    if transactional_id or any(has_transactional_batch(records) for _, records in data):
        if not transactional_id:
            exc = access.denied(ctx, WRITE, TRANSACTIONAL_ID, "", detail="transactional records without a "
                                                                         "transactional id")
            return {tp: ProduceResult(exc.code, exc.message) for tp, _ in data}
        if not access.allowed(ctx, WRITE, TRANSACTIONAL_ID, transactional_id):
            exc = access.denied(ctx, WRITE, TRANSACTIONAL_ID, transactional_id)
            return {tp: ProduceResult(exc.code, exc.message) for tp, _ in data}
    _, refused = access.partition(ctx, WRITE, TOPIC, data, lambda d: d[0].topic)
    return {tp: ProduceResult(ErrorCode.TOPIC_AUTHORIZATION_FAILED, f"{ctx.kafka_principal} may not write to "
                                                                    f"{tp.topic}") for tp, _ in refused}


def append(b: BrokerApi, ctx: RequestContext, call: ProduceCall) -> PendingProduce:
    started = time.perf_counter()
    results, waits = append_all(b.rm, call.acks, call.data)
    handler_s = time.perf_counter() - started
    nbytes = sum(len(records) for _, records in call.data)
    metrics = b.pipeline.metrics
    if metrics is not None:
        metrics.produced(call.data, results)
    throttle_ms = b.pipeline.account(ctx, PRODUCE, nbytes, handler_s, PRODUCE_TYPES)
    return PendingProduce(call, results, waits, throttle_ms, started - ctx.arrival, handler_s)


async def complete(b: BrokerApi, pending: PendingProduce) -> dict[TopicPartition, ProduceResult]:
    started = time.perf_counter()
    results = await wait_for_replication(pending.call.timeout_ms, pending.results, pending.waits)
    _done(b, pending, time.perf_counter() - started)
    return results


def ready(b: BrokerApi, pending: PendingProduce) -> dict[TopicPartition, ProduceResult] | None:
    """The results at once when nothing waits for replication: acks 0/1, or acks=all appends the high
    watermark already covers (an ISR of the leader alone, as ``wait_for_hw`` would answer at once): no task,
    no loop turn."""
    for _, part, offset, epoch in pending.waits:
        if not (part.high_watermark >= offset and part.is_leader and part.leader_epoch == epoch):
            return None
    _done(b, pending, 0.0)
    return pending.results


def _done(b: BrokerApi, pending: PendingProduce, remote_s: float) -> None:
    metrics = b.pipeline.metrics
    if metrics is not None:
        metrics.request_done("Produce", max(pending.held_s, 0.0), pending.local_s, remote_s)


def append_all(rm: ReplicaManager, acks: int, data: list[tuple[TopicPartition, bytes]],
               ) -> tuple[dict[TopicPartition, ProduceResult], list[ReplicationWait]]:
    """Append to every partition now, in the caller's order; the results and what
    ``wait_for_replication`` must wait for (acks=all)."""
    results: dict[TopicPartition, ProduceResult] = {}
    if acks not in (0, 1, -1):
        return {tp: ProduceResult(ErrorCode.INVALID_REQUIRED_ACKS, f"acks must be 0, 1 or -1, got {acks}")
                for tp, _ in data}, []
    waits: list[ReplicationWait] = []
    for tp, records in data:
        try:
            part = rm.leader_partition(tp)
            epoch = part.leader_epoch
            info = part.append_as_leader(records, acks)
            results[tp] = ProduceResult(base_offset=info.first_offset, log_append_time=info.log_append_time,
                                        log_start_offset=info.log_start_offset, last_offset=info.last_offset)
            if acks == -1:
                waits.append((tp, part, info.last_offset + 1, epoch))
        except TidelogError as exc:
            results[tp] = ProduceResult(exc.code, exc.args[0] if exc.args else exc.code.name)  # the code travels apart
        except Exception as exc:  # never let one partition's failure crash the request
            log.exception("produce failed", extra={"tp": str(tp)})
            results[tp] = ProduceResult(ErrorCode.UNKNOWN_SERVER_ERROR, str(exc))
    return results, waits


async def wait_for_replication(timeout_ms: int, results: dict[TopicPartition, ProduceResult],
                               waits: list[ReplicationWait]) -> dict[TopicPartition, ProduceResult]:
    """Wait until the appends of ``append_all`` are replicated as acks=all asks (no-op otherwise)."""
    if waits:
        timeout = request_limits.produce_timeout_ms(timeout_ms) / 1000
        done = await asyncio.gather(*(part.wait_for_hw(off, timeout, ep) for _, part, off, ep in waits))
        for (tp, part, _, _), ok in zip(waits, done):
            if not ok:
                code = ErrorCode.REQUEST_TIMED_OUT if part.is_leader else ErrorCode.NOT_LEADER_OR_FOLLOWER
                results[tp] = ProduceResult(code, f"{tp}: not replicated to the ISR within {timeout_ms} ms")
    return results
