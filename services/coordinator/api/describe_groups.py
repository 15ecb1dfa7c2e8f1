"""DescribeGroups: each group's state and members, for consumer groups (KIP-848) and classic groups
alike; a group that does not exist is GROUP_ID_NOT_FOUND, in state Dead. When security is on
(``authz``), a group the principal may not DESCRIBE is GROUP_AUTHORIZATION_FAILED, with no state, no
members (their ids and epochs would let anyone commit as them), as Kafka's ``handleDescribeGroupsRequest``."""

from __future__ import annotations

from services.coordinator.api import CoordinatorApi
from services.coordinator.api.conversions import from_tps
from services.coordinator.authz import Op, Res, allowed, denied_message
from services.coordinator.classic_group import STABLE, ClassicGroup
from services.coordinator.consumer_protocol import PROTOCOL_TYPE, assigned_partitions, subscribed_topics
from services.coordinator.group import STATE_NAMES, ConsumerGroup, GroupError, fail
from services.coordinator.runtime import PartitionRuntime
from shared.errors import ErrorCode
from shared.proto import coordinator_pb2 as cpb
from shared.request_context import RequestContext
from shared.security.access import access_of


async def describe_groups(c: CoordinatorApi, ctx: RequestContext,
                          request: cpb.DescribeGroupsRequest) -> cpb.DescribeGroupsResponse:
    resp = cpb.DescribeGroupsResponse()
    access = access_of(c)
    for gid in request.group_ids:
        if access is not None and not allowed(access, ctx, Op.DESCRIBE, Res.GROUP, gid):
            resp.groups.add(group_id=gid, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED,
                            error_message=denied_message(Op.DESCRIBE, Res.GROUP, gid))
            continue
        try:
            pr = c.runtime.runtime_for(gid)
            g = pr.shard.describe(gid)
            if g is None:
                raise fail(ErrorCode.GROUP_ID_NOT_FOUND, f"group {gid!r} does not exist")
        except GroupError as exc:
            resp.groups.add(group_id=gid, error_code=exc.code, error_message=str(exc), state="Dead")
            continue
        if isinstance(g, ClassicGroup):
            _describe_classic(resp.groups.add(), g, pr)
        else:
            _describe_consumer(resp.groups.add(), g, pr)
    return resp


def _describe_consumer(dg: cpb.DescribedGroup, g: ConsumerGroup, pr: PartitionRuntime) -> None:
    dg.MergeFrom(cpb.DescribedGroup(group_id=g.group_id, state=g.state, group_epoch=g.epoch,
                                    assignment_epoch=g.target_epoch, assignor=g.assignor_name(),
                                    coordinator_partition=pr.partition, protocol_type=PROTOCOL_TYPE,
                                    group_type="consumer"))
    for m in sorted(g.members.values(), key=lambda m: m.member_id):
        dg.members.add(member_id=m.member_id, instance_id=m.instance_id or "", client_id=m.client_id,
                       client_host=m.client_host, member_epoch=m.epoch, state=STATE_NAMES.get(m.state, "UNKNOWN"),
                       assignment=from_tps(m.assigned), target_assignment=from_tps(g.target.get(m.member_id, ())),
                       subscribed_topic_names=m.subscribed_topics, subscribed_topic_regex=m.regex or "")


def _describe_classic(dg: cpb.DescribedGroup, g: ClassicGroup, pr: PartitionRuntime) -> None:
    """Kafka's DescribeGroups of a classic group (members' metadata only once Stable), plus the topics and
    partitions read from the consumer protocol's bytes."""
    dg.MergeFrom(cpb.DescribedGroup(group_id=g.group_id, state=g.state, group_epoch=g.generation,
                                    assignment_epoch=g.generation, assignor=g.protocol_name or "",
                                    coordinator_partition=pr.partition, protocol_type=g.protocol_type or "",
                                    group_type="classic"))
    consumer = g.protocol_type == PROTOCOL_TYPE
    for m in g.members.values():
        metadata = m.metadata(g.protocol_name) if g.state == STABLE else b""
        tps = assigned_partitions(m.assignment) if consumer else None
        topics = subscribed_topics(m.metadata(g.protocol_name)) if consumer and g.protocol_name else None
        dg.members.add(member_id=m.member_id, instance_id=m.instance_id or "", client_id=m.client_id,
                       client_host=m.client_host, member_epoch=g.generation, member_metadata=metadata,
                       member_assignment=m.assignment, assignment=from_tps(tps or ()),
                       subscribed_topic_names=sorted(topics or ()))
