"""OffsetCommit, unary and streamed: check the commit against the group, queue its records for
writing, answer once they are written (the offsets are applied then, in write order).

``start_commit`` is the synchronous part: commits are queued in the order they are started, so a
stream's commits are written in the stream's order whatever the brokers take. ``offset_commit_stream``
starts each batch's commits as it reads them, keeps at most ``STREAM_IN_FLIGHT`` batches in flight
and answers the batches in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable

from services.coordinator.api import CoordinatorApi
from services.coordinator.api.conversions import topic_errors
from services.coordinator.authz import Op, Res, allowed, denied_message, split_topics
from services.coordinator.group import GroupError
from services.coordinator.shard import OffsetCommit
from shared.errors import ErrorCode
from shared.proto import coordinator_pb2 as cpb
from shared.request_context import RequestContext
from shared.security.access import access_of
from shared.types import TopicPartition

#: Batches of commits one OffsetCommitStream may have in flight; the stream stops reading beyond it.
STREAM_IN_FLIGHT = 64


async def offset_commit(c: CoordinatorApi, ctx: RequestContext,
                        request: cpb.OffsetCommitRequest) -> cpb.OffsetCommitResponse:
    return await start_commit(c, ctx, request)


async def offset_commit_stream(c: CoordinatorApi, ctx: RequestContext, batches: AsyncIterator[cpb.OffsetCommitBatch],
                               ) -> AsyncIterator[cpb.OffsetCommitBatchResponse]:
    queue: asyncio.Queue[list[Awaitable[cpb.OffsetCommitResponse]] | None] = asyncio.Queue(STREAM_IN_FLIGHT)

    async def read() -> None:
        try:
            async for batch in batches:
                await queue.put([start_commit(c, ctx, request) for request in batch.commits])
        finally:
            await queue.put(None)

    reader = asyncio.ensure_future(read())
    try:
        while (commits := await queue.get()) is not None:
            yield cpb.OffsetCommitBatchResponse(responses=[await commit for commit in commits])
    finally:
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader


def start_commit(c: CoordinatorApi, ctx: RequestContext,
                 request: cpb.OffsetCommitRequest) -> Awaitable[cpb.OffsetCommitResponse]:
    """Check the commit and queue its records for writing now; the awaitable gives the response once
    they are written (the offsets are applied then, in write order, whoever awaits).

    When security is on (``authz``): GROUP READ, else every partition answers GROUP_AUTHORIZATION_FAILED
    and nothing is written; partitions of topics without TOPIC READ answer TOPIC_AUTHORIZATION_FAILED and
    the others are committed (Kafka's ``handleOffsetCommitRequest``)."""
    denied: set[str] = set()
    if (access := access_of(c)) is not None:
        if not allowed(access, ctx, Op.READ, Res.GROUP, request.group_id):
            code = ErrorCode.GROUP_AUTHORIZATION_FAILED
            return _answered(cpb.OffsetCommitResponse(
                error_code=code, error_message=denied_message(Op.READ, Res.GROUP, request.group_id),
                topics=topic_errors({TopicPartition(t.name, p.partition): code
                                     for t in request.topics for p in t.partitions})))
        denied = split_topics(access, ctx, Op.READ, (t.name for t in request.topics))
    commits = [OffsetCommit(TopicPartition(t.name, p.partition), p.committed_offset,
                            p.committed_leader_epoch if p.committed_leader_epoch else -1, p.committed_metadata)
               for t in request.topics if t.name not in denied for p in t.partitions]
    refused = {TopicPartition(t.name, p.partition): int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
               for t in request.topics if t.name in denied for p in t.partitions}
    if refused and not commits:
        return _answered(cpb.OffsetCommitResponse(topics=topic_errors(refused)))
    started = time.perf_counter()
    rt = c.runtime
    try:
        pr = rt.runtime_for(request.group_id)
        errors, recs = pr.shard.commit_offsets(request.group_id, request.member_id, request.member_epoch, commits,
                                               rt.now_ms(), request.group_instance_id or None)
        written = rt.submit(pr, recs)
    except GroupError as exc:
        return _answered(cpb.OffsetCommitResponse(error_code=exc.code, error_message=str(exc)))
    if refused:
        errors = {**errors, **refused}

    def apply(f: asyncio.Future[int]) -> None:  # runs in write order, whether or not anyone awaits
        if not f.cancelled() and f.exception() is None:
            pr.shard.apply_offsets(recs)

    written.add_done_callback(apply)
    return _finish_commit(c, written, errors, started)


async def _finish_commit(c: CoordinatorApi, written: asyncio.Future[int], errors: dict[TopicPartition, int],
                         started: float) -> cpb.OffsetCommitResponse:
    try:
        await written
    except GroupError as exc:
        return cpb.OffsetCommitResponse(error_code=exc.code, error_message=str(exc))
    if c.metrics is not None:
        c.metrics.commits.inc()
        c.metrics.commit_time.observe(time.perf_counter() - started)
    return cpb.OffsetCommitResponse(topics=topic_errors(errors))


async def _answered(resp: cpb.OffsetCommitResponse) -> cpb.OffsetCommitResponse:
    return resp
