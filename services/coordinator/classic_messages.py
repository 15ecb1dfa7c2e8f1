"""What the classic group protocol takes and gives: requests, responses and the decisions of one call
(records to write, parked requests answered). Plain data, no behaviour."""

from __future__ import annotations

from dataclasses import dataclass, field

from services.coordinator.classic_group import Protocol
from services.coordinator.record_builder import Rec
from shared.errors import ErrorCode

#: JoinGroup v4+: a member without an id is given one (MEMBER_ID_REQUIRED) and must join again with it.
MEMBER_ID_REQUIRED_VERSION = 4
#: JoinGroup v9+: a static member's rejoin can tell the leader to skip the assignment.
SKIP_ASSIGNMENT_VERSION = 9
LATEST_JOIN_VERSION = 9


@dataclass(frozen=True)
class JoinRequest:
    group_id: str
    member_id: str = ""
    instance_id: str | None = None
    protocol_type: str = ""
    protocols: list[Protocol] = field(default_factory=list)
    session_timeout_ms: int = 45_000
    rebalance_timeout_ms: int = 300_000
    client_id: str = ""
    client_host: str = ""
    reason: str = ""
    api_version: int = LATEST_JOIN_VERSION


@dataclass(frozen=True)
class JoinedMember:
    member_id: str
    instance_id: str | None
    metadata: bytes


@dataclass(frozen=True)
class JoinResponse:
    error: int = ErrorCode.NONE
    member_id: str = ""
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    skip_assignment: bool = False
    members: tuple[JoinedMember, ...] = ()  # the leader's only
    message: str = ""


@dataclass(frozen=True)
class SyncRequest:
    group_id: str
    member_id: str
    generation_id: int
    instance_id: str | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignments: dict[str, bytes] = field(default_factory=dict)  # the leader's only


@dataclass(frozen=True)
class SyncResponse:
    error: int = ErrorCode.NONE
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""
    message: str = ""


@dataclass(frozen=True)
class LeaveMember:
    member_id: str = ""
    instance_id: str | None = None
    reason: str = ""


@dataclass
class Decisions:
    records: list[Rec] = field(default_factory=list)
    joins: dict[int, JoinResponse] = field(default_factory=dict)  # ticket -> response
    syncs: dict[int, SyncResponse] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.records or self.joins or self.syncs)
