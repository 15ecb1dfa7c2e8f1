"""OffsetDelete: remove a group's committed offsets of some partitions (tombstones written, then applied)."""

from __future__ import annotations

from services.coordinator.api import CoordinatorApi
from services.coordinator.api.conversions import to_tps, topic_errors
from services.coordinator.group import GroupError
from shared.proto import coordinator_pb2 as cpb
from shared.request_context import RequestContext


async def offset_delete(c: CoordinatorApi, ctx: RequestContext,
                        request: cpb.OffsetDeleteRequest) -> cpb.OffsetDeleteResponse:
    try:
        pr = c.runtime.runtime_for(request.group_id)
        errors, recs = pr.shard.delete_offsets(request.group_id, to_tps(request.partitions))
        await c.runtime.write(pr, recs)
        pr.shard.apply_offsets(recs)
    except GroupError as exc:
        return cpb.OffsetDeleteResponse(error_code=exc.code, error_message=str(exc))
    return cpb.OffsetDeleteResponse(topics=topic_errors(errors))
