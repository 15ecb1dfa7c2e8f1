"""Fetch, for both doors: the consumer quota check, the read (``read``: the one fetch reader per
partition, a long poll until ``min_bytes``, bounded by ``max_bytes``), metrics and usage accounting.
Followers' fetches are not a client's usage. A sessionless follower fetch (``replica_id`` >= 0) is
refused with ``STALE_BROKER_EPOCH`` unless its ``replica_epoch`` is that broker's current one, and per
partition with ``NOT_LEADER_OR_FOLLOWER`` unless the broker is one of the partition's replicas
(``fetch_reader``): before anything is read, so it neither moves a high watermark nor reads past it.

ACLs (secure clusters, before anything else): a consumer needs READ on each topic (the others are
answered ``TOPIC_AUTHORIZATION_FAILED``); a follower (``replica_id`` >= 0) must come with the verified
certificate of that very broker (``CN=broker-<replica_id>``, CVE-2018-1288) and CLUSTER_ACTION, else every
partition is answered ``TOPIC_AUTHORIZATION_FAILED``, as Kafka answers an unauthorized follower."""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass

from services.broker.api import BrokerApi
from services.broker.fetch_reader import read_partition, refused, replica_refusal
from services.broker.pipeline import FETCH, FETCH_TYPES, RequestContext
from services.broker.replica_manager import ReplicaManager
from services.broker.replica_results import FetchParams, FetchPartitionResult, FetchSpec
from shared.errors import ErrorCode
from shared.security.access import CLUSTER, CLUSTER_ACTION, READ, TOPIC, Access, AuthorizationFailed, service_id
from shared.security.acl import CLUSTER_NAME
from shared.types import TopicPartition

#: Fetches over more partitions than this wait on the broker-wide change signal.
FETCH_WAIT_PER_PARTITION_MAX = 16

DEFAULT_MAX_BYTES = 50 * 1024 * 1024


@dataclass(slots=True)
class FetchCall:
    replica_id: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    specs: list[FetchSpec]
    isolation_level: int = 0  # 1: read_committed
    replica_epoch: int = 0  # followers: their broker epoch (KIP-380); 0 (not sent) is refused


async def fetch(b: BrokerApi, ctx: RequestContext, call: FetchCall,
                ) -> tuple[dict[TopicPartition, FetchPartitionResult] | None, int]:
    """``(results, throttle_ms)``; results None when a consumer over its quota gets no data, at once."""
    consumer = call.replica_id < 0
    denied = None
    if b.pipeline.access.enabled:
        denied = authorize(b.pipeline.access, ctx, call)
        if denied and not call.specs:
            return denied, 0
    throttle_ms = b.pipeline.throttle_ms(ctx, FETCH_TYPES) if consumer else 0
    if throttle_ms:
        return None, throttle_ms
    if not consumer:
        code = replica_refusal(b.rm.view.brokers, call.replica_id, call.replica_epoch)
        if code:
            return {s.tp: refused(code) for s in call.specs}, 0
    params = FetchParams(replica_id=call.replica_id, max_wait_ms=call.max_wait_ms, min_bytes=call.min_bytes,
                         max_bytes=call.max_bytes or DEFAULT_MAX_BYTES, specs=call.specs,
                         isolation_level=call.isolation_level)
    started = time.perf_counter()
    results = await read(b.rm, params)
    metrics = b.pipeline.metrics
    if metrics is not None:
        metrics.fetched(results)
        waited_s = time.perf_counter() - started - params.read_time_s
        metrics.request_done("Fetch" if consumer else "FetchFollower", max(started - ctx.arrival, 0.0),
                             params.read_time_s, max(waited_s, 0.0))
    if consumer:  # replication is not a client's usage
        nbytes = sum(len(r.records) for r in results.values())
        throttle_ms = b.pipeline.account(ctx, FETCH, nbytes, params.read_time_s, FETCH_TYPES)
    if denied:
        results.update(denied)
    return results, throttle_ms


def follower_refusal(access: Access, ctx: RequestContext, replica_id: int) -> AuthorizationFailed | None:
    """Why a fetch claiming to be broker ``replica_id``'s is refused (None: it is that broker). Audited."""
    try:
        access.require_service(ctx, "broker")
    except AuthorizationFailed as exc:
        return exc
    if service_id(ctx) != replica_id:
        return access.denied(ctx, CLUSTER_ACTION, CLUSTER, CLUSTER_NAME,
                             detail=f"a fetch as replica {replica_id} from {ctx.cert_subject}")
    return None


def authorize(access: Access, ctx: RequestContext, call: FetchCall) -> dict[TopicPartition, FetchPartitionResult]:
    """Drop from ``call.specs`` what ACLs refuse; the refused partitions' answers."""
    if call.replica_id >= 0:
        if follower_refusal(access, ctx, call.replica_id) is None:
            return {}
        specs, call.specs = call.specs, []
        return {s.tp: refused(ErrorCode.TOPIC_AUTHORIZATION_FAILED) for s in specs}
    ok, denied = access.partition(ctx, READ, TOPIC, call.specs, lambda s: s.tp.topic)
    if not denied:
        return {}
    call.specs = ok
    return {s.tp: refused(ErrorCode.TOPIC_AUTHORIZATION_FAILED) for s in denied}


async def read(rm: ReplicaManager, params: FetchParams) -> dict[TopicPartition, FetchPartitionResult]:
    """Serve a fetch; the time spent reading is added to the caller's ``params.read_time_s``."""
    bounded = params.bounded()
    deadline = time.monotonic() + bounded.max_wait_ms / 1000
    while True:
        started = time.perf_counter()
        results, total, error = _read_once(rm, bounded)
        params.read_time_s += time.perf_counter() - started  # the caller's: request quotas and metrics read it
        remaining = deadline - time.monotonic()
        if total >= bounded.min_bytes or error or remaining <= 0:
            return results
        if not await _wait_for_change(rm, bounded.specs, remaining):
            return results  # nothing changed while waiting: the same answer, without reading again


def _read_once(rm: ReplicaManager, params: FetchParams) -> tuple[dict[TopicPartition, FetchPartitionResult], int, bool]:
    out: dict[TopicPartition, FetchPartitionResult] = {}
    total = 0
    error = False
    consumer = params.replica_id < 0
    for spec in params.specs:
        # Once the request's max_bytes is spent this reads nothing (min_one only for the first).
        r = read_partition(rm, spec.tp, spec.offset, spec.leader_epoch,
                           min(spec.max_bytes, params.max_bytes - total), for_consumer=consumer,
                           min_one=total == 0, read_committed=consumer and params.isolation_level == 1,
                           before_read=None if consumer else
                           lambda part, o=spec.offset, lso=spec.log_start_offset:
                           part.update_follower(params.replica_id, o, lso),
                           replica_id=params.replica_id)
        total += len(r.records)
        error = error or r.error != ErrorCode.NONE
        out[spec.tp] = r
    return out, total, error


async def _wait_for_change(rm: ReplicaManager, specs: list[FetchSpec], timeout: float) -> bool:
    """Wait until one of the partitions changes (True) or ``timeout`` passes (False).

    A few partitions wait on their own events; a fetch over many (a follower's) waits on the
    broker-wide signal instead of one task per partition every round, and re-reads on any change."""
    if len(specs) > FETCH_WAIT_PER_PARTITION_MAX:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(rm.any_change().wait(), timeout)
            return True
        return False
    events = [rm.partitions[s.tp].changed for s in specs if s.tp in rm.partitions]
    if not events:
        return False
    waiters = [asyncio.ensure_future(ev.wait()) for ev in events]
    try:
        done, _ = await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waiters:
            w.cancel()
    return bool(done)
