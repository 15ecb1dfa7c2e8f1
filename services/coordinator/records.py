"""Keys and values of ``__consumer_offsets`` records, in Kafka's byte layout. Pure.

Every key starts with an int16 record type (Kafka's ``apiKey`` of the coordinator
record), every value with an int16 schema version; a tombstone (null value)
deletes what its key names. Layouts, as Kafka's group-coordinator message JSON
files define them:

    type 1  OffsetCommitKey v0 (non-flexible): group string, topic string, partition int32
            OffsetCommitValue v3 (non-flexible): offset int64, leaderEpoch int32,
                                                  metadata string, commitTimestamp int64
    type 2  GroupMetadataKey (non-flexible): group string -- a classic group; its value
            (GroupMetadataValue) is encoded in classic_records.py
    type 3  ConsumerGroupMetadataKey: GroupId string
            ConsumerGroupMetadataValue v0 (flexible): Epoch int32, tagged fields
    type 5  ConsumerGroupMemberMetadataKey: GroupId, MemberId
            ConsumerGroupMemberMetadataValue v0 (flexible): InstanceId nullable string,
                RackId nullable string, ClientId string, ClientHost string,
                SubscribedTopicNames []string, SubscribedTopicRegex nullable string,
                RebalanceTimeoutMs int32, ServerAssignor nullable string, tagged fields
    type 6  ConsumerGroupTargetAssignmentMetadataKey: GroupId
            ConsumerGroupTargetAssignmentMetadataValue v0 (flexible): AssignmentEpoch int32
    type 7  ConsumerGroupTargetAssignmentMemberKey: GroupId, MemberId
            ConsumerGroupTargetAssignmentMemberValue v0 (flexible):
                TopicPartitions [](TopicId uuid, Partitions []int32)
    type 8  ConsumerGroupCurrentMemberAssignmentKey: GroupId, MemberId
            ConsumerGroupCurrentMemberAssignmentValue v0 (flexible): MemberEpoch int32,
                PreviousMemberEpoch int32, State int8, AssignedPartitions [](TopicId, []int32),
                PartitionsPendingRevocation [](TopicId, []int32)

Tidelog's own record type (Kafka's types are below 100; Tidelog's start at 1000, so no Kafka
version will reuse them; a reader that does not know a type skips the record -- ``decode_key``
answers None -- as Kafka's loader skips unknown types):

    type 1000 PendingTxnOffsetKey: group string, topic string, partition int32, producerId int64
              PendingTxnOffsetValue v0 (non-flexible): producerEpoch int16, transactionalId string,
                  offset int64, leaderEpoch int32, metadata string, commitTimestamp int64
              A transaction's offset commit, not yet committed (TxnOffsetCommit). Kafka writes it as
              an OffsetCommit record in a transactional batch and completes it by the transaction's
              marker; Tidelog's coordinators are not brokers, so the transaction coordinator completes
              it by CompleteTxnOffsets: committed, an OffsetCommit record (Kafka's layout) and this
              record's tombstone are written; aborted, only the tombstone.

Keys are never flexible: strings are int16 length + UTF-8. Flexible values use
compact strings/arrays (unsigned varint of length + 1, 0 = null) and end every
struct with a tagged-field section (we write none and skip any we read).
Topics inside KIP-848 values are 16-byte topic ids, as in Kafka.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass, field
from enum import IntEnum

from shared.errors import CorruptRecordError
from shared.records.varint import encode_unsigned_varint

OFFSET_COMMIT = 1
LEGACY_OFFSET_COMMIT = 0
GROUP_METADATA_CLASSIC = 2
GROUP_METADATA = 3
MEMBER_METADATA = 5
TARGET_ASSIGNMENT_METADATA = 6
TARGET_ASSIGNMENT_MEMBER = 7
CURRENT_MEMBER_ASSIGNMENT = 8
OFFSET_COMMIT_VALUE_VERSION = 3
#: Tidelog's record types start here (see the module's docstring)
PENDING_TXN_OFFSET = 1000



class MemberState(IntEnum):
    """A KIP-848 member's reconciliation state: the int8 ``State`` of CurrentMemberAssignment (Kafka's
    ``MemberState`` values), defined here once for encoding, decoding and the transition table
    (``group.py``). UNKNOWN is never written: it is what a code this version does not know decodes
    to, and where a member goes to be fenced."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127


_MEMBER_STATES = frozenset(int(s) for s in MemberState)

TopicIdPartitions = dict[str, list[int]]  # topic id (hex) -> sorted partitions


@dataclass(frozen=True)
class RecordKey:
    type: int
    group_id: str
    member_id: str = ""  # member records
    topic: str = ""  # offset commits
    partition: int = -1
    producer_id: int = -1  # pending transactional offset commits


@dataclass(frozen=True)
class OffsetValue:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = 0


@dataclass(frozen=True)
class PendingOffsetValue:
    """A transaction's offset commit awaiting the transaction's outcome (PendingTxnOffsetValue)."""

    producer_epoch: int
    transactional_id: str
    offset: OffsetValue


@dataclass(frozen=True)
class MemberMetadataValue:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: list[str]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None


@dataclass(frozen=True)
class CurrentAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: MemberState
    assigned: TopicIdPartitions = field(default_factory=dict)
    pending_revocation: TopicIdPartitions = field(default_factory=dict)


# -- primitive writers --------------------------------------------------------------------------

def _str16(s: str) -> bytes:
    b = s.encode()
    if len(b) > 0x7FFF:
        raise ValueError("string longer than 32767 bytes")
    return struct.pack(">h", len(b)) + b


def _cstr(s: str | None) -> bytes:
    if s is None:
        return b"\x00"
    b = s.encode()
    return encode_unsigned_varint(len(b) + 1) + b


def _carray(items: list[bytes]) -> bytes:
    return encode_unsigned_varint(len(items) + 1) + b"".join(items)


NO_TAGS = b"\x00"


def _topic_partitions(tps: TopicIdPartitions) -> bytes:
    items = [uuid.UUID(hex=t).bytes + _carray([struct.pack(">i", p) for p in sorted(ps)]) + NO_TAGS
             for t, ps in sorted(tps.items())]
    return _carray(items)


# -- primitive reader ---------------------------------------------------------------------------

_STRUCTS: dict[str, struct.Struct] = {}


class RecordReader:
    """Reads one coordinator record (``__consumer_offsets``, ``__transaction_state``) in Kafka's layouts:
    fixed-width integers, int16-length and compact (varint-length) strings and arrays, flexible versions'
    tagged fields. Every malformed input is a ``CorruptRecordError`` naming the record (``what``) and the
    byte it failed at: a truncation, a varint longer than Kafka's 5 bytes, a length past the record's
    end, a string that is not UTF-8, bytes after the end."""

    def __init__(self, data: bytes, what: str = "__consumer_offsets record") -> None:
        self.data = data
        self.pos = 0
        self.what = what

    def corrupt(self, why: str) -> CorruptRecordError:
        return CorruptRecordError(f"{self.what}: {why} at byte {self.pos} of {len(self.data)}")

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise self.corrupt(f"truncated (needs {n} more bytes)")
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b

    def unpack(self, s: struct.Struct) -> tuple[int, ...]:
        return s.unpack(self.take(s.size))

    def int(self, fmt: str) -> int:
        s = _STRUCTS.get(fmt) or _STRUCTS.setdefault(fmt, struct.Struct(fmt))
        return int(self.unpack(s)[0])

    def uvarint(self) -> int:
        """An unsigned varint of at most 5 bytes (Kafka's ``readUnsignedVarint``)."""
        n = shift = 0
        while True:
            b = self.take(1)[0]
            n |= (b & 0x7F) << shift
            if not b & 0x80:
                return n
            shift += 7
            if shift > 28:
                raise self.corrupt("unsigned varint longer than 5 bytes")

    def utf8(self, n: int) -> str:
        raw = self.take(n)
        try:
            return raw.decode()
        except UnicodeDecodeError as exc:
            raise self.corrupt("string is not UTF-8") from exc

    def str16(self) -> str:
        """An int16-length string that may not be null."""
        n = self.int(">h")
        if n < 0:
            raise self.corrupt("null string where one is required")
        return self.utf8(n)

    string16 = str16

    def cstr(self) -> str | None:
        """A compact (nullable) string."""
        n = self.compact_length("string")
        return None if n < 0 else self.utf8(n)

    def compact_length(self, what: str) -> int:
        """The length of a compact string or array, -1 for null."""
        n = self.uvarint() - 1
        if n > len(self.data) - self.pos:
            raise self.corrupt(f"{what} of {n} elements is longer than the record")
        return n

    def array_len(self) -> int:
        """A compact array's length, 0 for null."""
        return max(self.compact_length("array"), 0)

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.take(self.uvarint())

    def end(self) -> None:
        if self.pos != len(self.data):
            raise self.corrupt(f"{len(self.data) - self.pos} bytes after the end")

    def topic_partitions(self) -> TopicIdPartitions:
        out: TopicIdPartitions = {}
        for _ in range(self.array_len()):
            tid = uuid.UUID(bytes=self.take(16)).hex
            out[tid] = sorted(self.int(">i") for _ in range(self.array_len()))
            self.skip_tags()
        return out


_Reader = RecordReader  # classic_records.py's name for it


# -- keys -----------------------------------------------------------------------------------------

def encode_key(k: RecordKey) -> bytes:
    head = struct.pack(">h", k.type)
    if k.type == OFFSET_COMMIT:
        return head + _str16(k.group_id) + _str16(k.topic) + struct.pack(">i", k.partition)
    if k.type == PENDING_TXN_OFFSET:
        return head + _str16(k.group_id) + _str16(k.topic) + struct.pack(">iq", k.partition, k.producer_id)
    if k.type in (GROUP_METADATA_CLASSIC, GROUP_METADATA, TARGET_ASSIGNMENT_METADATA):
        return head + _str16(k.group_id)
    if k.type in (MEMBER_METADATA, TARGET_ASSIGNMENT_MEMBER, CURRENT_MEMBER_ASSIGNMENT):
        return head + _str16(k.group_id) + _str16(k.member_id)
    raise ValueError(f"unknown record type {k.type}")


def decode_key(data: bytes) -> RecordKey | None:
    """The key, or None for a record type this coordinator does not use (share groups...)."""
    r = RecordReader(data)
    t = r.int(">h")
    if t in (LEGACY_OFFSET_COMMIT, OFFSET_COMMIT):
        return RecordKey(OFFSET_COMMIT, r.str16(), topic=r.str16(), partition=r.int(">i"))
    if t == PENDING_TXN_OFFSET:
        return RecordKey(t, r.str16(), topic=r.str16(), partition=r.int(">i"), producer_id=r.int(">q"))
    if t in (GROUP_METADATA_CLASSIC, GROUP_METADATA, TARGET_ASSIGNMENT_METADATA):
        return RecordKey(t, r.str16())
    if t in (MEMBER_METADATA, TARGET_ASSIGNMENT_MEMBER, CURRENT_MEMBER_ASSIGNMENT):
        return RecordKey(t, r.str16(), member_id=r.str16())
    return None


# -- values ---------------------------------------------------------------------------------------

def encode_offset(v: OffsetValue) -> bytes:
    return (struct.pack(">hqi", OFFSET_COMMIT_VALUE_VERSION, v.offset, v.leader_epoch) + _str16(v.metadata)
            + struct.pack(">q", v.commit_timestamp))


_I16, _I64, _V3_HEAD = struct.Struct(">h"), struct.Struct(">q"), struct.Struct(">hqi")


def decode_offset(data: bytes) -> OffsetValue:
    """OffsetCommitValue v0-v3 (the hot path of loading and of every commit: one unpack per field group)."""
    try:
        version = _I16.unpack_from(data)[0]
        if version >= 4:
            raise CorruptRecordError(f"OffsetCommitValue v{version} (flexible) is not supported")
        if version >= 3:
            _, offset, epoch = _V3_HEAD.unpack_from(data)
            pos = 14
        else:
            offset, epoch, pos = _I64.unpack_from(data, 2)[0], -1, 10
        n = _I16.unpack_from(data, pos)[0]
        if n < 0 or pos + 2 + n > len(data):
            raise CorruptRecordError("OffsetCommitValue metadata is truncated")
        metadata = data[pos + 2:pos + 2 + n].decode()
        ts = _I64.unpack_from(data, pos + 2 + n)[0]
    except struct.error as exc:
        raise CorruptRecordError(f"OffsetCommitValue is truncated: {exc}") from exc
    return OffsetValue(offset, epoch, metadata, ts)


def encode_pending_offset(v: PendingOffsetValue) -> bytes:
    o = v.offset
    return (struct.pack(">hh", 0, v.producer_epoch) + _str16(v.transactional_id)
            + struct.pack(">qi", o.offset, o.leader_epoch) + _str16(o.metadata) + struct.pack(">q", o.commit_timestamp))


def decode_pending_offset(data: bytes) -> PendingOffsetValue:
    """PendingTxnOffsetValue v0 (a later version is read as v0: fields are only ever appended)."""
    r = RecordReader(data)
    r.int(">h")
    epoch, txn_id = r.int(">h"), r.str16()
    offset, leader_epoch, metadata, ts = r.int(">q"), r.int(">i"), r.str16(), r.int(">q")
    return PendingOffsetValue(epoch, txn_id, OffsetValue(offset, leader_epoch, metadata, ts))


def encode_epoch(epoch: int) -> bytes:
    """ConsumerGroupTargetAssignmentMetadataValue: the assignment epoch."""
    return struct.pack(">hi", 0, epoch) + NO_TAGS


def decode_epoch(data: bytes) -> int:
    r = RecordReader(data)
    r.int(">h")
    return r.int(">i")


def encode_group_metadata(epoch: int, metadata_hash: int) -> bytes:
    """ConsumerGroupMetadataValue: Epoch, and MetadataHash as tagged field 0 (int64)."""
    return struct.pack(">hi", 0, epoch) + b"\x01\x00\x08" + struct.pack(">q", metadata_hash)


def decode_group_metadata(data: bytes) -> tuple[int, int]:
    """``(epoch, metadata_hash)``; other tagged fields are skipped."""
    r = RecordReader(data)
    r.int(">h")
    epoch, metadata_hash = r.int(">i"), 0
    for _ in range(r.uvarint()):
        tag, size = r.uvarint(), r.uvarint()
        raw = r.take(size)
        if tag == 0 and size == 8:
            metadata_hash = struct.unpack(">q", raw)[0]
    return epoch, metadata_hash


def encode_member(v: MemberMetadataValue) -> bytes:
    return (struct.pack(">h", 0) + _cstr(v.instance_id) + _cstr(v.rack_id) + _cstr(v.client_id)
            + _cstr(v.client_host) + _carray([_cstr(t) for t in v.subscribed_topic_names])
            + _cstr(v.subscribed_topic_regex) + struct.pack(">i", v.rebalance_timeout_ms)
            + _cstr(v.server_assignor) + NO_TAGS)


def decode_member(data: bytes) -> MemberMetadataValue:
    r = RecordReader(data)
    r.int(">h")
    instance, rack, client, host = r.cstr(), r.cstr(), r.cstr() or "", r.cstr() or ""
    topics = [r.cstr() or "" for _ in range(r.array_len())]
    regex = r.cstr()
    timeout = r.int(">i")
    assignor = r.cstr()
    r.skip_tags()
    return MemberMetadataValue(instance, rack, client, host, topics, regex, timeout, assignor)


def encode_target_member(tps: TopicIdPartitions) -> bytes:
    return struct.pack(">h", 0) + _topic_partitions(tps) + NO_TAGS


def decode_target_member(data: bytes) -> TopicIdPartitions:
    r = RecordReader(data)
    r.int(">h")
    out = r.topic_partitions()
    r.skip_tags()
    return out


def encode_current(v: CurrentAssignmentValue) -> bytes:
    return (struct.pack(">hiib", 0, v.member_epoch, v.previous_member_epoch, int(v.state))
            + _topic_partitions(v.assigned) + _topic_partitions(v.pending_revocation) + NO_TAGS)


def decode_current(data: bytes) -> CurrentAssignmentValue:
    r = RecordReader(data)
    r.int(">h")
    epoch, prev, state = r.int(">i"), r.int(">i"), r.int(">b")
    assigned = r.topic_partitions()
    pending = r.topic_partitions()
    r.skip_tags()
    member_state = MemberState(state) if state in _MEMBER_STATES else MemberState.UNKNOWN
    return CurrentAssignmentValue(epoch, prev, member_state, assigned, pending)
