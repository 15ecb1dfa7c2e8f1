"""The ``__consumer_offsets`` record of a classic group: GroupMetadataKey (type 2) and GroupMetadataValue,
in Kafka's byte layout. Pure.

    GroupMetadataValue (v0-v3 non-flexible, v4 flexible; we write v3, which every Kafka reads):
        protocolType string, generation int32, protocol nullable string, leader nullable string,
        v2+ currentStateTimestamp int64,
        members [](memberId string, v3+ groupInstanceId nullable string, clientId string,
                   clientHost string, v1+ rebalanceTimeout int32, sessionTimeout int32,
                   subscription bytes, assignment bytes)

Non-flexible: strings int16 length (-1 null), bytes and arrays int32 length. Flexible (v4): compact
strings/bytes/arrays (unsigned varint length + 1) and a tagged-field section after every struct.
A member's ``subscription`` is its metadata for the group's protocol only (the other protocols it
offered are not kept), so a loaded member supports exactly that protocol, as in Kafka.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from services.coordinator import records as r
from services.coordinator.classic_group import EMPTY, STABLE, ClassicGroup, ClassicMember
from shared.errors import CorruptRecordError

GROUP_METADATA_VALUE_VERSION = 3


@dataclass(frozen=True)
class ClassicMemberValue:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int = -1
    members: list[ClassicMemberValue] = field(default_factory=list)


def encode_key(group_id: str) -> bytes:
    return r.encode_key(r.RecordKey(r.GROUP_METADATA_CLASSIC, group_id))


def _str(s: str) -> bytes:
    b = s.encode()
    if len(b) > 0x7FFF:
        raise ValueError("string longer than 32767 bytes")
    return struct.pack(">h", len(b)) + b


def _nstr(s: str | None) -> bytes:
    return struct.pack(">h", -1) if s is None else _str(s)


def _bytes(b: bytes) -> bytes:
    return struct.pack(">i", len(b)) + b


def encode_value(v: GroupMetadataValue) -> bytes:
    out = [struct.pack(">h", GROUP_METADATA_VALUE_VERSION), _str(v.protocol_type), struct.pack(">i", v.generation),
           _nstr(v.protocol), _nstr(v.leader), struct.pack(">q", v.current_state_timestamp),
           struct.pack(">i", len(v.members))]
    for m in v.members:
        out += [_str(m.member_id), _nstr(m.instance_id), _str(m.client_id), _str(m.client_host),
                struct.pack(">ii", m.rebalance_timeout_ms, m.session_timeout_ms), _bytes(m.subscription),
                _bytes(m.assignment)]
    return b"".join(out)


class _ValueReader(r._Reader):
    """Reads either layout: ``flexible`` picks compact lengths and tagged fields."""

    def __init__(self, data: bytes, flexible: bool) -> None:
        super().__init__(data)
        self.flexible = flexible

    def nstr(self) -> str | None:
        if self.flexible:
            return self.cstr()
        n = self.int(">h")
        return None if n < 0 else self.take(n).decode()

    def string(self) -> str:
        s = self.nstr()
        if s is None:
            raise CorruptRecordError("GroupMetadataValue: null string where one is required")
        return s

    def blob(self) -> bytes:
        if self.flexible:
            n = self.uvarint()
            return b"" if n == 0 else self.take(n - 1)
        n = self.int(">i")
        return b"" if n < 0 else self.take(n)

    def count(self) -> int:
        return self.array_len() if self.flexible else max(self.int(">i"), 0)

    def tags(self) -> None:
        if self.flexible:
            self.skip_tags()


def decode_value(data: bytes) -> GroupMetadataValue:
    """GroupMetadataValue v0-v4."""
    head = _ValueReader(data, False)
    version = head.int(">h")
    if not 0 <= version <= 4:
        raise CorruptRecordError(f"GroupMetadataValue v{version} is not supported")
    rd = _ValueReader(data, version >= 4)
    rd.pos = head.pos
    try:
        protocol_type, generation = rd.string(), rd.int(">i")
        protocol, leader = rd.nstr(), rd.nstr()
        timestamp = rd.int(">q") if version >= 2 else -1
        members = []
        for _ in range(rd.count()):
            member_id = rd.string()
            instance_id = rd.nstr() if version >= 3 else None
            client_id, client_host = rd.string(), rd.string()
            rebalance = rd.int(">i") if version >= 1 else -1
            session = rd.int(">i")
            subscription, assignment = rd.blob(), rd.blob()
            rd.tags()
            members.append(ClassicMemberValue(member_id, instance_id, client_id, client_host,
                                              session if rebalance < 0 else rebalance, session, subscription, assignment))
        rd.tags()
    except UnicodeDecodeError as exc:
        raise CorruptRecordError(f"GroupMetadataValue: {exc}") from exc
    return GroupMetadataValue(protocol_type, generation, protocol, leader, timestamp, members)


# -- group <-> record ---------------------------------------------------------------------------

def group_record(group: ClassicGroup, assignment: dict[str, bytes] | None = None) -> tuple[bytes, bytes]:
    """The group's GroupMetadataKey and GroupMetadataValue (each member with its metadata for the chosen
    protocol and its entry of ``assignment``; no members before a protocol is chosen)."""
    assignment = assignment or {}
    members = [ClassicMemberValue(m.member_id, m.instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                                  m.session_timeout_ms, m.metadata(group.protocol_name), assignment.get(m.member_id, b""))
               for m in group.members.values()] if group.protocol_name is not None else []
    value = GroupMetadataValue(group.protocol_type or "", group.generation, group.protocol_name, group.leader_id,
                               group.state_since_ms if group.state_since_ms is not None else -1, members)
    return encode_key(group.group_id), encode_value(value)


def group_from_value(group_id: str, value: GroupMetadataValue) -> ClassicGroup:
    """A loaded group: Stable with its members (each supporting only the group's protocol), or Empty."""
    group = ClassicGroup(group_id, state=STABLE if value.members else EMPTY, generation=value.generation,
                         protocol_type=value.protocol_type or None, protocol_name=value.protocol,
                         state_since_ms=value.current_state_timestamp if value.current_state_timestamp >= 0 else None)
    for mv in value.members:
        group.add(ClassicMember(mv.member_id, mv.instance_id, mv.client_id, mv.client_host, mv.rebalance_timeout_ms,
                                mv.session_timeout_ms, value.protocol_type, [(value.protocol or "", mv.subscription)],
                                mv.assignment))
    group.leader_id = value.leader if value.leader in group.members else next(iter(group.members), None)
    return group
