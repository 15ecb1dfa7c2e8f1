"""ConsumerGroupHeartbeat (KIP-848): a member joins, heartbeats, leaves; the group's shard decides,
its records are written, and the member gets its epoch and, when it changed, its assignment."""

from __future__ import annotations

from services.coordinator.api import CoordinatorApi
from services.coordinator.api.conversions import from_tps, peer_host, to_tps
from services.coordinator.authz import Op, Res, allowed, denied_message, split_topics
from services.coordinator.group import GroupError
from services.coordinator.membership import HeartbeatRequest
from shared.errors import ErrorCode
from shared.proto import coordinator_pb2 as cpb
from shared.request_context import RequestContext
from shared.security.access import access_of


async def consumer_group_heartbeat(c: CoordinatorApi, ctx: RequestContext, request: cpb.ConsumerGroupHeartbeatRequest,
                                   ) -> cpb.ConsumerGroupHeartbeatResponse:
    if (access := access_of(c)) is not None:
        if not allowed(access, ctx, Op.READ, Res.GROUP, request.group_id):
            return cpb.ConsumerGroupHeartbeatResponse(
                error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED,
                error_message=denied_message(Op.READ, Res.GROUP, request.group_id))
        # Kafka (KIP-848): the subscribed topics need DESCRIBE
        if denied := split_topics(access, ctx, Op.DESCRIBE, request.subscribed_topic_names):
            return cpb.ConsumerGroupHeartbeatResponse(
                error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                error_message=f"TOPIC_AUTHORIZATION_FAILED: not authorized to DESCRIBE {', '.join(sorted(denied))}")
    try:
        pr = c.runtime.runtime_for(request.group_id)
        result, recs = pr.shard.heartbeat(_heartbeat_request(request, ctx), c.runtime.now_ms())
        await c.runtime.write(pr, recs)
    except GroupError as exc:
        return cpb.ConsumerGroupHeartbeatResponse(error_code=exc.code, error_message=str(exc))
    resp = cpb.ConsumerGroupHeartbeatResponse(member_id=result.member_id, member_epoch=result.member_epoch,
                                              heartbeat_interval_ms=result.heartbeat_interval_ms,
                                              has_assignment=result.assignment is not None)
    if result.assignment is not None:
        resp.assignment.extend(from_tps(result.assignment))
    return resp


def _heartbeat_request(request: cpb.ConsumerGroupHeartbeatRequest, ctx: RequestContext) -> HeartbeatRequest:
    return HeartbeatRequest(
        group_id=request.group_id, member_id=request.member_id, member_epoch=request.member_epoch,
        instance_id=request.instance_id or None, rack_id=request.rack_id or None,
        rebalance_timeout_ms=request.rebalance_timeout_ms or 300_000,
        subscribed_topic_names=list(request.subscribed_topic_names),
        subscribed_topic_regex=request.subscribed_topic_regex or None,
        server_assignor=request.server_assignor or None, owned=to_tps(request.owned_partitions),
        client_id=request.client_id, client_host=peer_host(ctx.peer))
