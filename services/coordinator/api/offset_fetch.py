"""OffsetFetch: a group's committed offsets, of the partitions asked for or of all it has. With
``require_stable`` (KIP-447), a partition with a transaction's commit pending answers
UNSTABLE_OFFSET_COMMIT instead (the client retries until the transaction completes).

When security is on (``authz``), as Kafka's ``handleOffsetFetchRequest``: GROUP DESCRIBE, else
GROUP_AUTHORIZATION_FAILED; asked-for partitions of topics without TOPIC DESCRIBE answer
TOPIC_AUTHORIZATION_FAILED, and a fetch of every partition leaves those topics out."""

from __future__ import annotations

from services.coordinator.api import CoordinatorApi
from services.coordinator.api.conversions import to_tps
from services.coordinator.authz import Op, Res, allowed, denied_message, split_topics
from services.coordinator.group import GroupError
from services.coordinator.records import OffsetValue
from shared.errors import ErrorCode
from shared.proto import coordinator_pb2 as cpb
from shared.request_context import RequestContext
from shared.security.access import access_of


async def offset_fetch(c: CoordinatorApi, ctx: RequestContext, request: cpb.OffsetFetchRequest) -> cpb.OffsetFetchResponse:
    access = access_of(c)
    if access is not None and not allowed(access, ctx, Op.DESCRIBE, Res.GROUP, request.group_id):
        return cpb.OffsetFetchResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED,
                                       error_message=denied_message(Op.DESCRIBE, Res.GROUP, request.group_id))
    try:
        pr = c.runtime.runtime_for(request.group_id)
    except GroupError as exc:
        return cpb.OffsetFetchResponse(error_code=exc.code, error_message=str(exc))
    wanted = to_tps(request.partitions) if request.partitions else None
    by: dict[str, list[cpb.OffsetFetchPartition]] = {}
    offsets = pr.shard.fetch_offsets(request.group_id, wanted)
    if access is not None:
        denied = split_topics(access, ctx, Op.DESCRIBE, (tp.topic for tp in offsets))
        for tp in [tp for tp in offsets if tp.topic in denied]:
            del offsets[tp]
            if wanted is not None:
                by.setdefault(tp.topic, []).append(cpb.OffsetFetchPartition(
                    partition=tp.partition, committed_offset=-1, committed_leader_epoch=-1,
                    error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED))
    unstable = pr.shard.unstable(request.group_id, offsets) if request.require_stable else set()
    for tp, v in sorted(offsets.items()):
        by.setdefault(tp.topic, []).append(_partition(tp.partition, v, tp in unstable))
    return cpb.OffsetFetchResponse(topics=[cpb.OffsetFetchTopic(name=t, partitions=ps) for t, ps in sorted(by.items())])


def _partition(partition: int, v: OffsetValue | None, unstable: bool) -> cpb.OffsetFetchPartition:
    if unstable:
        return cpb.OffsetFetchPartition(partition=partition, committed_offset=-1, committed_leader_epoch=-1,
                                        error_code=ErrorCode.UNSTABLE_OFFSET_COMMIT)
    if v is None:
        return cpb.OffsetFetchPartition(partition=partition, committed_offset=-1, committed_leader_epoch=-1)
    return cpb.OffsetFetchPartition(partition=partition, committed_offset=v.offset, committed_leader_epoch=v.leader_epoch,
                                    metadata=v.metadata, commit_timestamp=v.commit_timestamp)
