"""CompleteTxnOffsets (internal): the transaction coordinator's outcome for a producer's pending
offset commits in one ``__consumer_offsets`` partition (or one group) -- Tidelog's stand-in for
Kafka's COMMIT/ABORT marker on that partition (``pending_offsets.py``).

Sent once the transaction's PrepareCommit/PrepareAbort is durable, and again until answered NONE. Internal: only from a coordinator's service certificate with CLUSTER_ACTION when
security is on (``authz.internal_refusal``: CLUSTER_AUTHORIZATION_FAILED).
Idempotent: once the pending records are tombstoned there is nothing left to complete. Answered once
the records are committed; they are applied then, in write order."""

from __future__ import annotations

import asyncio

from services.coordinator.api import CoordinatorApi
from services.coordinator.authz import internal_refusal
from services.coordinator.group import GroupError, fail
from services.coordinator.runtime import PartitionRuntime
from shared.errors import ErrorCode
from shared.offsets_topic import OFFSETS_TOPIC
from shared.proto import coordinator_pb2 as cpb
from shared.request_context import RequestContext
from shared.security.access import access_of


async def complete_txn_offsets(c: CoordinatorApi, ctx: RequestContext,
                               request: cpb.CompleteTxnOffsetsRequest) -> cpb.CompleteTxnOffsetsResponse:
    if (access := access_of(c)) is not None and (why := internal_refusal(access, ctx, "coordinator")) is not None:
        return cpb.CompleteTxnOffsetsResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message=why)
    target = request.WhichOneof("target")
    try:
        if target is None:
            raise fail(ErrorCode.INVALID_REQUEST, "name a group_id or an offsets_partition")
        group_id = request.group_id if target == "group_id" else None
        pr = c.runtime.runtime_for(request.group_id) if group_id is not None else _owned(c, request.offsets_partition)
        recs = pr.shard.complete_txn_offsets(request.producer_id, request.producer_epoch, request.committed,
                                             request.transaction_version, group_id)
        written = c.runtime.submit(pr, recs)

        def apply(f: asyncio.Future[int]) -> None:
            if not f.cancelled() and f.exception() is None:
                pr.shard.apply_offsets(recs)

        written.add_done_callback(apply)
        await written
    except GroupError as exc:
        return cpb.CompleteTxnOffsetsResponse(error_code=exc.code, error_message=str(exc))
    return cpb.CompleteTxnOffsetsResponse(completed=sum(1 for key, value in recs if value is None))


def _owned(c: CoordinatorApi, partition: int) -> PartitionRuntime:
    pr = c.runtime.partitions.get(partition)
    if pr is None:
        n = c.runtime.view.partitions_of(OFFSETS_TOPIC)
        if not 0 <= partition < max(n, 1):
            raise fail(ErrorCode.INVALID_REQUEST, f"{OFFSETS_TOPIC} has no partition {partition}")
        raise fail(ErrorCode.NOT_COORDINATOR, f"this instance does not own {OFFSETS_TOPIC} partition {partition}")
    if not pr.loaded:
        raise fail(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, f"{OFFSETS_TOPIC} partition {partition} is loading")
    return pr
