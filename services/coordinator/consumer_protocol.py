"""The consumer embedded protocol of classic groups (protocol type ``consumer``). Pure, read only.

A classic group's coordinator never needs these bytes to run the protocol (they are opaque member
metadata and assignments); it reads them to show a group's topics and partitions (DescribeGroups,
lag) and to refuse deleting the offsets of a topic members subscribe to. Layouts, as Kafka's
``ConsumerProtocolSubscription`` / ``ConsumerProtocolAssignment`` message files define them
(non-flexible; every version starts with the fields of version 0, which is all we read):

    Subscription: Version int16, Topics [string], UserData nullable bytes,
                  v1+ OwnedPartitions [Topic string, Partitions [int32]], v2+ GenerationId int32,
                  v3+ RackId nullable string
    Assignment:   Version int16, AssignedPartitions [Topic string, Partitions [int32]], UserData nullable bytes

Arrays are an int32 count, strings an int16 length + UTF-8. Bytes that do not parse give ``None``:
the caller treats the member as unknown rather than failing a request.
"""

from __future__ import annotations

import struct

from shared.types import TopicPartition

PROTOCOL_TYPE = "consumer"


class _Cursor:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def unpack(self, fmt: str) -> int:
        s = struct.Struct(fmt)
        if self.pos + s.size > len(self.data):
            raise ValueError("truncated")
        (value,) = s.unpack_from(self.data, self.pos)
        self.pos += s.size
        return int(value)

    def string(self) -> str:
        n = self.unpack(">h")
        if n < 0 or self.pos + n > len(self.data):
            raise ValueError("bad string")
        s = self.data[self.pos:self.pos + n].decode()
        self.pos += n
        return s

    def count(self) -> int:
        n = self.unpack(">i")
        if n < 0 or n > len(self.data):  # every element takes at least one byte
            raise ValueError("bad array length")
        return n


def subscribed_topics(metadata: bytes) -> set[str] | None:
    """The topics of a member's subscription, or None if the bytes are not a consumer subscription."""
    try:
        c = _Cursor(metadata)
        if c.unpack(">h") < 0:
            return None
        return {c.string() for _ in range(c.count())}
    except (ValueError, UnicodeDecodeError):
        return None


def assigned_partitions(assignment: bytes) -> set[TopicPartition] | None:
    """The partitions of a member's assignment (empty bytes: none), or None if they do not parse."""
    if not assignment:
        return set()
    try:
        c = _Cursor(assignment)
        if c.unpack(">h") < 0:
            return None
        out: set[TopicPartition] = set()
        for _ in range(c.count()):
            topic = c.string()
            out.update(TopicPartition(topic, c.unpack(">i")) for _ in range(c.count()))
        return out
    except (ValueError, UnicodeDecodeError):
        return None
