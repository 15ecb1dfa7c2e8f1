"""gRPC methods of the classic group protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup):
protobuf in, ``ClassicGroupService`` calls, protobuf out. Translation only; an empty proto string
stands for Kafka's null. Mixed into ``GroupCoordinatorServicer``."""

from __future__ import annotations

from typing import Any

from services.coordinator.classic_messages import JoinRequest, JoinResponse, LeaveMember, SyncRequest, SyncResponse
from services.coordinator.classic_service import ClassicGroupService
from services.coordinator.group import GroupError
from shared.errors import ErrorCode
from shared.proto import coordinator_pb2 as cpb


def peer_host(peer: str) -> str:
    """gRPC's ``ipv4:127.0.0.1:5000`` as Kafka shows a client host: ``/127.0.0.1``."""
    kind, _, rest = peer.partition(":")
    host = rest.rpartition(":")[0] if kind in ("ipv4", "ipv6") else peer
    return "/" + host.strip("[]") if host else ""


def _message(code: int, message: str) -> str:
    if message or code == ErrorCode.NONE:
        return message
    try:
        return ErrorCode(code).name
    except ValueError:
        return ""


def join_to_proto(r: JoinResponse) -> cpb.JoinGroupResponse:
    return cpb.JoinGroupResponse(
        error_code=r.error, error_message=_message(r.error, r.message), generation_id=r.generation_id,
        protocol_type=r.protocol_type or "", protocol_name=r.protocol_name or "", leader=r.leader,
        skip_assignment=r.skip_assignment, member_id=r.member_id,
        members=[cpb.JoinGroupMember(member_id=m.member_id, group_instance_id=m.instance_id or "", metadata=m.metadata)
                 for m in r.members])


def sync_to_proto(r: SyncResponse) -> cpb.SyncGroupResponse:
    return cpb.SyncGroupResponse(error_code=r.error, error_message=_message(r.error, r.message),
                                 protocol_type=r.protocol_type or "", protocol_name=r.protocol_name or "",
                                 assignment=r.assignment)


class ClassicGroupRpcs:
    classic: ClassicGroupService

    async def JoinGroup(self, request: cpb.JoinGroupRequest, context: Any) -> cpb.JoinGroupResponse:
        req = JoinRequest(
            group_id=request.group_id, member_id=request.member_id, instance_id=request.group_instance_id or None,
            protocol_type=request.protocol_type, protocols=[(p.name, p.metadata) for p in request.protocols],
            session_timeout_ms=request.session_timeout_ms, rebalance_timeout_ms=request.rebalance_timeout_ms,
            client_id=request.client_id, client_host=request.client_host or peer_host(context.peer() or ""),
            reason=request.reason, api_version=request.api_version)
        try:
            return join_to_proto(await self.classic.join(req))
        except GroupError as exc:
            return cpb.JoinGroupResponse(error_code=exc.code, error_message=str(exc), generation_id=-1,
                                         member_id=request.member_id)

    async def SyncGroup(self, request: cpb.SyncGroupRequest, context: Any) -> cpb.SyncGroupResponse:
        req = SyncRequest(
            group_id=request.group_id, member_id=request.member_id, generation_id=request.generation_id,
            instance_id=request.group_instance_id or None, protocol_type=request.protocol_type or None,
            protocol_name=request.protocol_name or None,
            assignments={a.member_id: a.assignment for a in request.assignments})
        try:
            return sync_to_proto(await self.classic.sync(req))
        except GroupError as exc:
            return cpb.SyncGroupResponse(error_code=exc.code, error_message=str(exc))

    async def Heartbeat(self, request: cpb.HeartbeatRequest, context: Any) -> cpb.HeartbeatResponse:
        try:
            code = await self.classic.heartbeat(request.group_id, request.member_id,
                                                request.group_instance_id or None, request.generation_id)
        except GroupError as exc:
            return cpb.HeartbeatResponse(error_code=exc.code, error_message=str(exc))
        return cpb.HeartbeatResponse(error_code=code, error_message=_message(code, ""))

    async def LeaveGroup(self, request: cpb.LeaveGroupRequest, context: Any) -> cpb.LeaveGroupResponse:
        members = [LeaveMember(m.member_id, m.group_instance_id or None, m.reason) for m in request.members]
        try:
            error, codes = await self.classic.leave(request.group_id, members)
        except GroupError as exc:
            return cpb.LeaveGroupResponse(error_code=exc.code, error_message=str(exc))
        if error:
            return cpb.LeaveGroupResponse(error_code=error, error_message=_message(error, ""))
        return cpb.LeaveGroupResponse(members=[
            cpb.LeaveGroupMemberResponse(member_id=m.member_id, group_instance_id=m.instance_id or "", error_code=code)
            for m, code in zip(members, codes, strict=True)])
