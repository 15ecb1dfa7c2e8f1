"""Group APIs on the Kafka door, forwarded to the group's coordinator (``group_routing``): the classic
protocol (JoinGroup 11, SyncGroup 14, Heartbeat 12, LeaveGroup 13), offsets (OffsetCommit 8,
OffsetFetch 9, OffsetDelete 47) and group administration (ListGroups 16, DescribeGroups 15,
DeleteGroups 42). KIP-848's ConsumerGroupHeartbeat and ConsumerGroupDescribe are in ``groups_consumer``.

Translation only: Kafka's fields to the coordinator's gRPC messages and back; the rules are the
coordinator's. A client's address travels as ``client_host`` ("/127.0.0.1", Kafka's form).

ACLs are checked here, before anything is forwarded (the broker reaches the coordinator with its own
service certificate), as Kafka's ``KafkaApis``: READ on the group for membership (Join, Sync, Heartbeat,
Leave) and OffsetCommit, DESCRIBE for OffsetFetch and DescribeGroups, DELETE for DeleteGroups and
OffsetDelete (``GROUP_AUTHORIZATION_FAILED``); OffsetCommit and OffsetDelete need READ on each topic,
OffsetFetch DESCRIBE (``TOPIC_AUTHORIZATION_FAILED`` per partition; a fetch of every topic leaves the
others out); ListGroups lists every group with DESCRIBE on the cluster, else those the principal may
DESCRIBE.
"""

from __future__ import annotations

from typing import Any

from services.broker.kafka.apis import Connection, KafkaApis, Reply
from services.broker.kafka.group_routing import CoordinatorRouter, NoCoordinator
from services.broker.kafka.metadata import coordinator_node
from services.broker.pipeline import RequestContext
from shared.errors import ErrorCode
from shared.kafka.messages import RequestFrame
from shared.proto import coordinator_pb2 as cpb
from shared.security.access import CLUSTER, DELETE, DESCRIBE, GROUP, READ, TOPIC
from shared.security.acl import AclOperation

JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 11, 12, 13, 14
OFFSET_COMMIT, OFFSET_FETCH, OFFSET_DELETE = 8, 9, 47
DESCRIBE_GROUPS, LIST_GROUPS, DELETE_GROUPS = 15, 16, 42
JOIN_SLACK_S = 10.0  # beyond the rebalance timeout (and the initial delay) a JoinGroup may wait
_NOT_REQUESTED = -(2**31)
_GROUP_OPERATIONS = sum(1 << op for op in (3, 6, 8))  # READ, DELETE, DESCRIBE: all allowed until ACLs exist


def _ms(td: Any) -> int:
    return int(td.total_seconds() * 1000) if hasattr(td, "total_seconds") else int(td)


def client_host(conn: Connection) -> str:
    host = conn.peer.removeprefix("ipv4:").rsplit(":", 1)[0]
    return "/" + host


def group_denied(apis: KafkaApis, ctx: RequestContext, op: AclOperation, group_id: str) -> int:
    """0, or GROUP_AUTHORIZATION_FAILED (audited) when ACLs refuse ``op`` on the group."""
    access = apis.pipeline.access
    if not access.enabled or access.check(ctx, op, GROUP, group_id):
        return 0
    return int(ErrorCode.GROUP_AUTHORIZATION_FAILED)


def topics_denied(apis: KafkaApis, ctx: RequestContext, op: AclOperation, names: Any) -> set[str]:
    """The topics of ``names`` ACLs refuse ``op`` on (audited)."""
    access = apis.pipeline.access
    if not access.enabled:
        return set()
    return {n for n in set(names) if not access.check(ctx, op, TOPIC, n)}


def _router(apis: KafkaApis) -> CoordinatorRouter:
    router: CoordinatorRouter | None = apis.groups
    if router is None:
        raise NoCoordinator(ErrorCode.COORDINATOR_NOT_AVAILABLE, "no link to the group coordinators")
    return router


async def handle_join_group(apis: KafkaApis, req: RequestFrame, ctx: RequestContext, conn: Connection) -> Reply:
    b = req.body
    session_ms = _ms(b.session_timeout)
    rebalance_ms = _ms(getattr(b, "rebalance_timeout", b.session_timeout))
    request = cpb.JoinGroupRequest(
        group_id=b.group_id, session_timeout_ms=session_ms, rebalance_timeout_ms=rebalance_ms,
        member_id=b.member_id, group_instance_id=getattr(b, "group_instance_id", None) or "",
        protocol_type=b.protocol_type, protocols=[cpb.JoinGroupProtocol(name=p.name, metadata=p.metadata)
                                                 for p in b.protocols],
        reason=getattr(b, "reason", None) or "", client_id=req.client_id, client_host=client_host(conn),
        api_version=req.api.version)
    fail = {"generation_id": -1, "protocol_name": None, "leader": "", "member_id": b.member_id, "members": []}
    if denied := group_denied(apis, ctx, READ, b.group_id):
        return {**fail, "error_code": denied}, 0
    try:
        r = await _router(apis).call(b.group_id, "JoinGroup", request,
                                     timeout_s=max(rebalance_ms, session_ms) / 1000 + JOIN_SLACK_S + 5)
    except NoCoordinator as exc:
        return {**fail, "error_code": int(exc.code)}, 0
    return {"error_code": r.error_code, "generation_id": r.generation_id, "protocol_type": r.protocol_type or None,
            "protocol_name": r.protocol_name or None, "leader": r.leader, "skip_assignment": r.skip_assignment,
            "member_id": r.member_id,
            "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id or None,
                         "metadata": m.metadata} for m in r.members]}, 0


async def handle_sync_group(apis: KafkaApis, req: RequestFrame, ctx: RequestContext, conn: Connection) -> Reply:
    b = req.body
    request = cpb.SyncGroupRequest(
        group_id=b.group_id, generation_id=b.generation_id, member_id=b.member_id,
        group_instance_id=getattr(b, "group_instance_id", None) or "",
        protocol_type=getattr(b, "protocol_type", None) or "", protocol_name=getattr(b, "protocol_name", None) or "",
        assignments=[cpb.SyncGroupAssignment(member_id=a.member_id, assignment=a.assignment) for a in b.assignments])
    if denied := group_denied(apis, ctx, READ, b.group_id):
        return {"error_code": denied, "assignment": b""}, 0
    try:
        r = await _router(apis).call(b.group_id, "SyncGroup", request, timeout_s=330)
    except NoCoordinator as exc:
        return {"error_code": int(exc.code), "assignment": b""}, 0
    return {"error_code": r.error_code, "protocol_type": r.protocol_type or None,
            "protocol_name": r.protocol_name or None, "assignment": r.assignment}, 0


async def handle_heartbeat(apis: KafkaApis, req: RequestFrame, ctx: RequestContext, conn: Connection) -> Reply:
    b = req.body
    request = cpb.HeartbeatRequest(group_id=b.group_id, generation_id=b.generation_id, member_id=b.member_id,
                                   group_instance_id=getattr(b, "group_instance_id", None) or "")
    if denied := group_denied(apis, ctx, READ, b.group_id):
        return {"error_code": denied}, 0
    try:
        r = await _router(apis).call(b.group_id, "Heartbeat", request)
    except NoCoordinator as exc:
        return {"error_code": int(exc.code)}, 0
    return {"error_code": r.error_code}, 0


async def handle_leave_group(apis: KafkaApis, req: RequestFrame, ctx: RequestContext, conn: Connection) -> Reply:
    b = req.body
    if req.api.version >= 3:
        members = [cpb.LeaveGroupMember(member_id=m.member_id, group_instance_id=m.group_instance_id or "",
                                        reason=getattr(m, "reason", None) or "") for m in b.members]
    else:
        members = [cpb.LeaveGroupMember(member_id=b.member_id)]
    if denied := group_denied(apis, ctx, READ, b.group_id):
        return {"error_code": denied, "members": []}, 0
    try:
        r = await _router(apis).call(b.group_id, "LeaveGroup", cpb.LeaveGroupRequest(group_id=b.group_id,
                                                                                      members=members))
    except NoCoordinator as exc:
        return {"error_code": int(exc.code), "members": []}, 0
    if req.api.version < 3 and r.error_code == 0 and r.members:
        return {"error_code": r.members[0].error_code}, 0
    return {"error_code": r.error_code,
            "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id or None,
                         "error_code": m.error_code} for m in r.members]}, 0


# -- offsets ----------------------------------------------------------------------------------------------


async def handle_offset_commit(apis: KafkaApis, req: RequestFrame, ctx: RequestContext, conn: Connection) -> Reply:
    b = req.body
    generation = getattr(b, "generation_id_or_member_epoch", getattr(b, "generation_id", -1))
    request = cpb.OffsetCommitRequest(
        group_id=b.group_id, member_id=b.member_id, member_epoch=int(generation),
        group_instance_id=getattr(b, "group_instance_id", None) or "",
        topics=[cpb.OffsetCommitTopic(name=t.name, partitions=[
            cpb.OffsetCommitPartition(partition=p.partition_index, committed_offset=p.committed_offset,
                                      committed_leader_epoch=getattr(p, "committed_leader_epoch", -1),
                                      committed_metadata=p.committed_metadata or "")
            for p in t.partitions]) for t in b.topics])

    def every(code: int) -> dict[str, Any]:
        return {"topics": [{"name": t.name, "partitions": [{"partition_index": p.partition_index, "error_code": code}
                                                          for p in t.partitions]} for t in b.topics]}

    if denied := group_denied(apis, ctx, READ, b.group_id):
        return every(denied), 0
    refused = topics_denied(apis, ctx, READ, (t.name for t in b.topics))
    if refused:
        kept = [t for t in request.topics if t.name not in refused]
        del request.topics[:]
        request.topics.extend(kept)
    errors: dict[tuple[str, int], int] = {}
    if request.topics:
        try:
            r = await _router(apis).call(b.group_id, "OffsetCommit", request)
        except NoCoordinator as exc:
            return every(int(exc.code)), 0
        if r.error_code:
            return every(r.error_code), 0
        errors = {(t.name, p.partition): p.error_code for t in r.topics for p in t.partitions}
    for t in b.topics:
        if t.name in refused:
            errors.update({(t.name, p.partition_index): int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                           for p in t.partitions})
    return {"topics": [{"name": t.name, "partitions": [
        {"partition_index": p.partition_index, "error_code": errors.get((t.name, p.partition_index), 0)}
        for p in t.partitions]} for t in b.topics]}, 0


async def _offset_fetch(apis: KafkaApis, group_id: str, topics: Any, require_stable: bool = False,
                        ctx: RequestContext | None = None) -> dict[str, Any]:
    """One group's committed offsets as Kafka's response group (topics None: every committed partition).
    ``require_stable`` (v7+, KIP-447): a partition with a transaction's offset commit pending answers
    UNSTABLE_OFFSET_COMMIT (retriable) instead of an offset."""
    refused: set[str] = set()
    if ctx is not None and apis.pipeline.access.enabled:
        if denied := group_denied(apis, ctx, DESCRIBE, group_id):
            return {"group_id": group_id, "error_code": denied, "topics": []}
        access = apis.pipeline.access
        refused = topics_denied(apis, ctx, DESCRIBE, (t.name for t in topics)) if topics is not None else set()
        if topics is None:  # every topic: those the principal may not describe are left out
            result = await _offset_fetch(apis, group_id, None, require_stable)
            result["topics"] = [t for t in result["topics"] if access.allowed(ctx, DESCRIBE, TOPIC, t["name"])]
            return result
        if refused:
            result = await _offset_fetch(apis, group_id, [t for t in topics if t.name not in refused], require_stable)
            if result["error_code"]:
                return result
            by_name = {t["name"]: t for t in result["topics"]}
            result["topics"] = [by_name.get(t.name) or {"name": t.name, "partitions": [
                {"partition_index": p, "committed_offset": -1, "committed_leader_epoch": -1, "metadata": "",
                 "error_code": int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)} for p in t.partition_indexes]}
                for t in topics]
            return result
    request = cpb.OffsetFetchRequest(group_id=group_id, require_stable=require_stable, partitions=[
        cpb.TopicPartitions(topic=t.name, partitions=list(t.partition_indexes)) for t in topics or ()])
    try:
        r = await _router(apis).call(group_id, "OffsetFetch", request)
    except NoCoordinator as exc:
        return {"group_id": group_id, "error_code": int(exc.code), "topics": []}
    if r.error_code:
        return {"group_id": group_id, "error_code": r.error_code, "topics": []}
    found = {(t.name, p.partition): p for t in r.topics for p in t.partitions}
    wanted = ([(t.name, list(t.partition_indexes)) for t in topics] if topics is not None
              else [(t.name, [p.partition for p in t.partitions]) for t in r.topics])
    out = []
    for name, parts in wanted:
        entries = []
        for p in parts:
            c = found.get((name, p))
            entries.append({"partition_index": p, "committed_offset": c.committed_offset if c else -1,
                            "committed_leader_epoch": c.committed_leader_epoch if c else -1,
                            "metadata": (c.metadata if c else "") or "", "error_code": c.error_code if c else 0})
        out.append({"name": name, "partitions": entries})
    return {"group_id": group_id, "error_code": 0, "topics": out}


async def handle_offset_fetch(apis: KafkaApis, req: RequestFrame, ctx: RequestContext, conn: Connection) -> Reply:
    b = req.body
    stable = bool(getattr(b, "require_stable", False))
    if req.api.version >= 8:
        return {"groups": [await _offset_fetch(apis, g.group_id, g.topics, stable, ctx) for g in b.groups]}, 0
    g = await _offset_fetch(apis, b.group_id, b.topics, stable, ctx)
    if g["error_code"] and req.api.version < 2:  # v0-1 have no top-level error: every partition carries it
        return {"topics": [{"name": t.name, "partitions": [
            {"partition_index": p, "committed_offset": -1, "metadata": "", "error_code": g["error_code"]}
            for p in t.partition_indexes]} for t in b.topics or ()]}, 0
    return {"topics": g["topics"], "error_code": g["error_code"]}, 0


async def handle_offset_delete(apis: KafkaApis, req: RequestFrame, ctx: RequestContext, conn: Connection) -> Reply:
    b = req.body
    request = cpb.OffsetDeleteRequest(group_id=b.group_id, partitions=[
        cpb.TopicPartitions(topic=t.name, partitions=[p.partition_index for p in t.partitions]) for t in b.topics])
    if denied := group_denied(apis, ctx, DELETE, b.group_id):
        return {"error_code": denied, "topics": []}, 0
    refused = topics_denied(apis, ctx, READ, (t.name for t in b.topics))
    if refused:
        kept = [p for p in request.partitions if p.topic not in refused]
        del request.partitions[:]
        request.partitions.extend(kept)
    errors: dict[tuple[str, int], int] = {}
    if request.partitions:
        try:
            r = await _router(apis).call(b.group_id, "OffsetDelete", request)
        except NoCoordinator as exc:
            return {"error_code": int(exc.code), "topics": []}, 0
        if r.error_code:
            return {"error_code": r.error_code, "topics": []}, 0
        errors = {(t.name, p.partition): p.error_code for t in r.topics for p in t.partitions}
    for t in b.topics:
        if t.name in refused:
            errors.update({(t.name, p.partition_index): int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                           for p in t.partitions})
    return {"error_code": 0, "topics": [{"name": t.name, "partitions": [
        {"partition_index": p.partition_index, "error_code": errors.get((t.name, p.partition_index), 0)}
        for p in t.partitions]} for t in b.topics]}, 0


# -- group administration --------------------------------------------------------------------------------


def _kafka_state(state: str) -> str:
    """Consumer groups' states in Kafka's spelling (classic groups' are already Kafka's)."""
    return {"EMPTY": "Empty", "ASSIGNING": "Assigning", "RECONCILING": "Reconciling", "STABLE": "Stable",
            "DEAD": "Dead"}.get(state.upper(), state) if state.isupper() else state


async def handle_describe_groups(apis: KafkaApis, req: RequestFrame, ctx: RequestContext, conn: Connection) -> Reply:
    b = req.body
    ops = _GROUP_OPERATIONS if getattr(b, "include_authorized_operations", False) else _NOT_REQUESTED
    out = []
    access = apis.pipeline.access
    for group_id in b.groups:
        if denied := group_denied(apis, ctx, DESCRIBE, group_id):
            out.append({"error_code": denied, "group_id": group_id, "group_state": "", "protocol_type": "",
                        "protocol_data": "", "members": [], "authorized_operations": ops})
            continue
        if access.enabled and ops != _NOT_REQUESTED:
            ops = sum(1 << op for op in (3, 6, 8) if access.allowed(ctx, AclOperation(op), GROUP, group_id))
        try:
            r = await _router(apis).call(group_id, "DescribeGroups", cpb.DescribeGroupsRequest(group_ids=[group_id]))
        except NoCoordinator as exc:
            out.append({"error_code": int(exc.code), "group_id": group_id, "group_state": "", "protocol_type": "",
                        "protocol_data": "", "members": [], "authorized_operations": ops})
            continue
        for g in r.groups:
            unknown = g.error_code == ErrorCode.GROUP_ID_NOT_FOUND or g.state in ("Dead", "DEAD")
            out.append({
                # Kafka answers an unknown group as Dead, without an error
                "error_code": 0 if unknown else g.error_code, "group_id": g.group_id,
                "group_state": "Dead" if unknown else _kafka_state(g.state),
                "protocol_type": g.protocol_type or ("consumer" if g.members else ""),
                "protocol_data": g.assignor, "authorized_operations": ops,
                "members": [{"member_id": m.member_id, "group_instance_id": m.instance_id or None,
                             "client_id": m.client_id, "client_host": m.client_host,
                             "member_metadata": m.member_metadata, "member_assignment": m.member_assignment}
                            for m in g.members]})
    return {"groups": out}, 0


async def handle_list_groups(apis: KafkaApis, req: RequestFrame, ctx: RequestContext, conn: Connection) -> Reply:
    """The groups this broker is the coordinator of (FindCoordinator's answer): admin clients ask every
    broker and merge, so each group is listed once."""
    b = req.body
    states = {s.lower() for s in getattr(b, "states_filter", ()) or ()}
    types = {t.lower() for t in getattr(b, "types_filter", ()) or ()}
    router = _router(apis)
    groups = []
    error = 0
    access = apis.pipeline.access
    every = not access.enabled or access.allowed(ctx, DESCRIBE, CLUSTER)
    for address in router.all_addresses():
        try:
            r = await router.call_at(address, "ListGroups", cpb.ListGroupsRequest())
        except NoCoordinator:
            error = int(ErrorCode.COORDINATOR_NOT_AVAILABLE)
            continue
        for g in r.groups:
            if coordinator_node(apis, g.group_id) != apis.broker.broker_id:
                continue
            if not every and not access.allowed(ctx, DESCRIBE, GROUP, g.group_id):
                continue
            state = _kafka_state(g.state)
            gtype = g.group_type or "consumer"
            if (states and state.lower() not in states) or (types and gtype.lower() not in types):
                continue
            groups.append({"group_id": g.group_id, "protocol_type": g.protocol_type or "consumer",
                           "group_state": state, "group_type": gtype.capitalize()})
    return {"error_code": error, "groups": groups}, 0


async def handle_delete_groups(apis: KafkaApis, req: RequestFrame, ctx: RequestContext, conn: Connection) -> Reply:
    results = []
    for group_id in req.body.groups_names:
        if denied := group_denied(apis, ctx, DELETE, group_id):
            results.append({"group_id": group_id, "error_code": denied})
            continue
        try:
            r = await _router(apis).call(group_id, "DeleteGroups", cpb.DeleteGroupsRequest(group_ids=[group_id]))
            code = r.results[0].error_code if r.results else 0
        except NoCoordinator as exc:
            code = int(exc.code)
        results.append({"group_id": group_id, "error_code": code})
    return {"results": results}, 0


def register(apis: KafkaApis) -> None:
    apis.register(JOIN_GROUP, (0, 9), handle_join_group)
    apis.register(SYNC_GROUP, (0, 5), handle_sync_group)
    apis.register(HEARTBEAT, (0, 4), handle_heartbeat)
    apis.register(LEAVE_GROUP, (0, 5), handle_leave_group)
    apis.register(OFFSET_COMMIT, (2, 9), handle_offset_commit)
    apis.register(OFFSET_FETCH, (1, 9), handle_offset_fetch)
    apis.register(OFFSET_DELETE, (0, 0), handle_offset_delete)
    apis.register(DESCRIBE_GROUPS, (0, 5), handle_describe_groups)
    apis.register(LIST_GROUPS, (0, 5), handle_list_groups)
    apis.register(DELETE_GROUPS, (0, 2), handle_delete_groups)
