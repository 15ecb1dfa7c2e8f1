"""KIP-848's consumer group protocol on the Kafka door: ConsumerGroupHeartbeat (68) and
ConsumerGroupDescribe (69), forwarded to the group's coordinator like the classic group APIs.

Kafka's heartbeat leaves a field null when it did not change since the member's last heartbeat
(subscription, regex, assignor, rack, instance id, rebalance timeout, owned partitions); the
coordinator's gRPC heartbeat takes the member's whole state. The broker that serves a group (the one
FindCoordinator names) keeps each member's last fields and fills the nulls in; a member it has no state
for that sends nulls is answered ``FENCED_MEMBER_EPOCH``, which makes the client rejoin with every field
(as after a coordinator move in Kafka). Topics travel as topic ids on the Kafka door, names on gRPC.

ACLs, as Kafka: the heartbeat needs READ on the group (``GROUP_AUTHORIZATION_FAILED``) and DESCRIBE on
every subscribed topic name (``TOPIC_AUTHORIZATION_FAILED``, naming them); ConsumerGroupDescribe DESCRIBE
on each group.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from services.broker.kafka.apis import Connection, KafkaApis, Reply
from services.broker.kafka.group_routing import CoordinatorRouter, NoCoordinator
from services.broker.kafka.groups import _router, client_host, group_denied, topics_denied
from services.broker.pipeline import RequestContext
from shared.errors import ErrorCode
from shared.kafka.messages import RequestFrame
from shared.proto import coordinator_pb2 as cpb
from shared.security.access import DESCRIBE, READ

CONSUMER_GROUP_HEARTBEAT, CONSUMER_GROUP_DESCRIBE = 68, 69
LEAVE_EPOCHS = (-1, -2)  # leaving, and a static member leaving temporarily
MAX_MEMBERS_CACHED = 100_000
_NOT_REQUESTED = -(2**31)
_GROUP_OPERATIONS = sum(1 << op for op in (3, 6, 8))


@dataclass
class MemberFields:
    """What a member last told about itself (the fields a heartbeat may leave null)."""

    instance_id: str = ""
    rack_id: str = ""
    rebalance_timeout_ms: int = 300_000
    subscribed_topic_names: list[str] = field(default_factory=list)
    subscribed_topic_regex: str = ""
    server_assignor: str = ""
    owned: list[tuple[str, list[int]]] = field(default_factory=list)


class MemberCache:
    def __init__(self) -> None:
        self.members: dict[tuple[str, str], MemberFields] = {}

    def merge(self, body: Any, names: dict[uuid.UUID, str]) -> MemberFields | None:
        """The member's whole state: this heartbeat's fields over the last known ones; None when a null
        field has nothing to stand for it."""
        key = (body.group_id, body.member_id)
        known = self.members.get(key)
        joining = int(body.member_epoch) == 0
        fields = MemberFields() if joining or known is None else MemberFields(**vars(known))
        nulls = False

        def take(value: Any, attr: str, convert: Any = None) -> None:
            nonlocal nulls
            if value is None:
                if known is None and not joining:
                    nulls = True
                return
            setattr(fields, attr, convert(value) if convert else value)

        take(body.instance_id, "instance_id")
        take(body.rack_id, "rack_id")
        rt = body.rebalance_timeout
        take(None if rt is None or int(rt.total_seconds() * 1000) < 0 else int(rt.total_seconds() * 1000),
             "rebalance_timeout_ms")
        take(body.subscribed_topic_names, "subscribed_topic_names", list)
        take(getattr(body, "subscribed_topic_regex", None), "subscribed_topic_regex")
        take(body.server_assignor, "server_assignor")
        take(body.topic_partitions, "owned",
             lambda tps: [(names[t.topic_id], list(t.partitions)) for t in tps if t.topic_id in names])
        if nulls and known is None:
            return None
        return fields

    def remember(self, group_id: str, member_id: str, fields: MemberFields) -> None:
        if len(self.members) >= MAX_MEMBERS_CACHED:
            self.members.pop(next(iter(self.members)))
        self.members[(group_id, member_id)] = fields

    def forget(self, group_id: str, member_id: str) -> None:
        self.members.pop((group_id, member_id), None)


async def handle_heartbeat(apis: KafkaApis, req: RequestFrame, ctx: RequestContext, conn: Connection) -> Reply:
    b = req.body
    if denied := group_denied(apis, ctx, READ, b.group_id):
        return {"error_code": denied, "error_message": None, "member_id": b.member_id, "member_epoch": -1,
                "heartbeat_interval_ms": 0, "assignment": None}, 0
    refused = topics_denied(apis, ctx, DESCRIBE, getattr(b, "subscribed_topic_names", None) or ())
    if refused:
        return {"error_code": int(ErrorCode.TOPIC_AUTHORIZATION_FAILED), "error_message":
                f"Topics {sorted(refused)} are not authorized for DESCRIBE", "member_id": b.member_id,
                "member_epoch": -1, "heartbeat_interval_ms": 0, "assignment": None}, 0
    names, ids = apis.topic_ids()
    cache: MemberCache = apis.consumer_members
    fields = cache.merge(b, names)
    if fields is None:
        return {"error_code": int(ErrorCode.FENCED_MEMBER_EPOCH), "error_message":
                "this broker has no state for the member: rejoin with epoch 0", "member_id": b.member_id,
                "member_epoch": -1, "heartbeat_interval_ms": 0, "assignment": None}, 0
    request = cpb.ConsumerGroupHeartbeatRequest(
        group_id=b.group_id, member_id=b.member_id, member_epoch=int(b.member_epoch),
        instance_id=fields.instance_id, rack_id=fields.rack_id, rebalance_timeout_ms=fields.rebalance_timeout_ms,
        subscribed_topic_names=fields.subscribed_topic_names, subscribed_topic_regex=fields.subscribed_topic_regex,
        server_assignor=fields.server_assignor, client_id=req.client_id,
        owned_partitions=[cpb.TopicPartitions(topic=t, partitions=ps) for t, ps in fields.owned])
    router: CoordinatorRouter = _router(apis)
    try:
        r = await router.call(b.group_id, "ConsumerGroupHeartbeat", request)
    except NoCoordinator as exc:
        return {"error_code": int(exc.code), "error_message": str(exc), "member_id": b.member_id,
                "member_epoch": -1, "heartbeat_interval_ms": 0, "assignment": None}, 0
    if r.error_code or int(b.member_epoch) in LEAVE_EPOCHS:
        cache.forget(b.group_id, b.member_id)
    else:
        if r.member_id != b.member_id:
            cache.forget(b.group_id, b.member_id)
        cache.remember(b.group_id, r.member_id, fields)
    assignment = None
    if r.has_assignment:
        assignment = {"topic_partitions": [{"topic_id": ids[t.topic], "partitions": list(t.partitions)}
                                           for t in r.assignment if t.topic in ids]}
    return {"error_code": r.error_code, "error_message": r.error_message or None,
            "member_id": r.member_id or b.member_id or None, "member_epoch": r.member_epoch,
            "heartbeat_interval_ms": r.heartbeat_interval_ms, "assignment": assignment}, 0


def _assignment(tps: Any, ids: dict[str, uuid.UUID]) -> dict[str, Any]:
    return {"topic_partitions": [{"topic_id": ids.get(t.topic, uuid.UUID(int=0)), "topic_name": t.topic,
                                  "partitions": list(t.partitions)} for t in tps]}


async def handle_describe(apis: KafkaApis, req: RequestFrame, ctx: RequestContext, conn: Connection) -> Reply:
    b = req.body
    ops = _GROUP_OPERATIONS if b.include_authorized_operations else _NOT_REQUESTED
    _, ids = apis.topic_ids()
    out = []
    for group_id in b.group_ids:
        empty = {"group_id": group_id, "group_state": "", "group_epoch": -1, "assignment_epoch": -1,
                 "assignor_name": "", "members": [], "authorized_operations": ops}
        if denied := group_denied(apis, ctx, DESCRIBE, group_id):
            out.append({**empty, "error_code": denied, "error_message": None})
            continue
        try:
            r = await _router(apis).call(group_id, "DescribeGroups", cpb.DescribeGroupsRequest(group_ids=[group_id]))
        except NoCoordinator as exc:
            out.append({**empty, "error_code": int(exc.code), "error_message": str(exc)})
            continue
        for g in r.groups:
            if g.error_code or g.state.upper() == "DEAD":
                out.append({**empty, "error_code": int(g.error_code or ErrorCode.GROUP_ID_NOT_FOUND),
                            "error_message": g.error_message or f"group {group_id} does not exist"})
                continue
            if g.group_type == "classic":
                out.append({**empty, "error_code": int(ErrorCode.GROUP_ID_NOT_FOUND),
                            "error_message": f"group {group_id} is not a consumer group"})
                continue
            out.append({
                "error_code": 0, "error_message": None, "group_id": g.group_id, "group_state": g.state.capitalize(),
                "group_epoch": g.group_epoch, "assignment_epoch": g.assignment_epoch, "assignor_name": g.assignor,
                "authorized_operations": ops,
                "members": [{"member_id": m.member_id, "instance_id": m.instance_id or None, "rack_id": None,
                             "member_epoch": m.member_epoch, "client_id": m.client_id,
                             "client_host": m.client_host or client_host(conn),
                             "subscribed_topic_names": list(m.subscribed_topic_names),
                             "subscribed_topic_regex": m.subscribed_topic_regex or None,
                             "assignment": _assignment(m.assignment, ids),
                             "target_assignment": _assignment(m.target_assignment, ids), "member_type": 1}
                            for m in g.members]})
    return {"groups": out}, 0


def register(apis: KafkaApis) -> None:
    apis.consumer_members = MemberCache()
    apis.register(CONSUMER_GROUP_HEARTBEAT, (0, 1), handle_heartbeat)
    apis.register(CONSUMER_GROUP_DESCRIBE, (0, 1), handle_describe)
