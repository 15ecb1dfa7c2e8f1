"""OffsetDelete: remove a group's committed offsets of some partitions (tombstones written, then applied).
When security is on (``authz``), as Kafka: GROUP DELETE, and TOPIC READ per topic (the partitions of
others answer TOPIC_AUTHORIZATION_FAILED)."""

from __future__ import annotations

from services.coordinator.api import CoordinatorApi
from services.coordinator.api.conversions import to_tps, topic_errors
from services.coordinator.authz import Op, Res, allowed, audit_change, denied_message, split_topics
from services.coordinator.group import GroupError
from shared.errors import ErrorCode
from shared.proto import coordinator_pb2 as cpb
from shared.request_context import RequestContext
from shared.security.access import access_of
from shared.types import TopicPartition


async def offset_delete(c: CoordinatorApi, ctx: RequestContext,
                        request: cpb.OffsetDeleteRequest) -> cpb.OffsetDeleteResponse:
    tps = to_tps(request.partitions)
    refused: dict[TopicPartition, int] = {}
    if (access := access_of(c)) is not None:
        if not allowed(access, ctx, Op.DELETE, Res.GROUP, request.group_id):
            return cpb.OffsetDeleteResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED,
                                            error_message=denied_message(Op.DELETE, Res.GROUP, request.group_id))
        denied = split_topics(access, ctx, Op.READ, (tp.topic for tp in tps))
        refused = {tp: int(ErrorCode.TOPIC_AUTHORIZATION_FAILED) for tp in tps if tp.topic in denied}
        tps = {tp for tp in tps if tp.topic not in denied}
    try:
        pr = c.runtime.runtime_for(request.group_id)
        errors, recs = pr.shard.delete_offsets(request.group_id, tps)
        await c.runtime.write(pr, recs)
        pr.shard.apply_offsets(recs)
    except GroupError as exc:
        return cpb.OffsetDeleteResponse(error_code=exc.code, error_message=str(exc))
    if recs:
        audit_change(ctx, f"GROUP:{request.group_id}", f"{len(recs)} offsets deleted")
    return cpb.OffsetDeleteResponse(topics=topic_errors({**errors, **refused}))
