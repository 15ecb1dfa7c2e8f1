"""OffsetFetch: a group's committed offsets, of the partitions asked for or of all it has."""

from __future__ import annotations

from services.coordinator.api import CoordinatorApi
from services.coordinator.api.conversions import to_tps
from services.coordinator.group import GroupError
from shared.proto import coordinator_pb2 as cpb
from shared.request_context import RequestContext


async def offset_fetch(c: CoordinatorApi, ctx: RequestContext, request: cpb.OffsetFetchRequest) -> cpb.OffsetFetchResponse:
    try:
        pr = c.runtime.runtime_for(request.group_id)
    except GroupError as exc:
        return cpb.OffsetFetchResponse(error_code=exc.code, error_message=str(exc))
    wanted = to_tps(request.partitions) if request.partitions else None
    by: dict[str, list[cpb.OffsetFetchPartition]] = {}
    for tp, v in sorted(pr.shard.fetch_offsets(request.group_id, wanted).items()):
        part = (cpb.OffsetFetchPartition(partition=tp.partition, committed_offset=-1, committed_leader_epoch=-1)
                if v is None else
                cpb.OffsetFetchPartition(partition=tp.partition, committed_offset=v.offset,
                                         committed_leader_epoch=v.leader_epoch, metadata=v.metadata,
                                         commit_timestamp=v.commit_timestamp))
        by.setdefault(tp.topic, []).append(part)
    return cpb.OffsetFetchResponse(topics=[cpb.OffsetFetchTopic(name=t, partitions=ps) for t, ps in sorted(by.items())])
