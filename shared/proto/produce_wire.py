"""``ProduceRequest`` in protobuf wire format, written and read by hand so record batches are copied once.

Building the request with the generated classes copies every batch into the
message and again when serialising it (protobuf takes only ``bytes``). For a
producer moving ~1 MiB batches those copies, made on a thread other than the
one that wrote the batch, cost more than the rest of the send path. Here a
request is the join of its field headers and each batch's pieces (batch header
and records section), in one copy; gRPC sends the bytes as they are. The layout
matches ``tidelog.proto`` exactly, field for field and in field order as the
generated serialiser writes it (a unit test checks byte equality), and the broker
parses it with the generated class as before.
"""

from __future__ import annotations

from collections.abc import Sequence

from shared.proto.wire import WireError, fields, int_fields, named_list, signed, text, text_field, varint

__all__ = ["WireError", "varint", "encode_produce_request", "parse_produce_request"]

# Field tags (field number << 3 | wire type): 0 varint, 2 length-delimited.
_TOPICS, _TOPIC_PARTITIONS, _RECORDS = b"\x1a", b"\x12", b"\x12"


PartitionPayload = tuple[int, Sequence[bytes]]  # partition, the pieces of its record batches


def encode_produce_request(
    *,
    acks: int,
    timeout_ms: int,
    client_id: str,
    correlation_id: int,
    topics: Sequence[tuple[str, Sequence[PartitionPayload]]],
) -> bytes:
    """The serialised ``ProduceRequest`` (proto3: zero and empty fields are left out)."""
    out: list[bytes] = [int_fields(((0x08, acks), (0x10, timeout_ms)))]
    for name, partitions in topics:
        topic: list[bytes] = [text_field(0x0A, name)]
        for partition, pieces in partitions:
            size = sum(len(p) for p in pieces)
            head = int_fields(((0x08, partition),)) + (_RECORDS + varint(size) if size else b"")
            topic += (_TOPIC_PARTITIONS, varint(len(head) + size), head)
            if size:
                topic += pieces
        out += (_TOPICS, varint(sum(len(p) for p in topic)))
        out += topic
    out += (text_field(0x22, client_id), int_fields(((0x30, correlation_id),)))
    return b"".join(out)


class ProducePartitionView:
    """A partition of a received produce request; ``records`` is a view into the request's bytes."""

    __slots__ = ("partition", "records")

    def __init__(self, buf: memoryview, pos: int, end: int) -> None:
        self.partition = 0
        self.records = buf[0:0]
        for field, value in fields(buf, pos, end):
            if field == 1 and isinstance(value, int):
                self.partition = signed(value)
            elif field == 2 and isinstance(value, tuple):
                self.records = buf[value[0]:value[1]]


class ProduceTopicView:
    __slots__ = ("name", "partitions")

    def __init__(self, buf: memoryview, pos: int, end: int) -> None:
        self.name, self.partitions = named_list(buf, pos, end, lambda a, b: ProducePartitionView(buf, a, b))


class ProduceRequestView:
    """A ``ProduceRequest`` read in place: the same attributes as the generated message, and the
    record batches left in the received bytes (the broker validates and writes them from there)."""

    __slots__ = ("acks", "timeout_ms", "topics", "client_id", "transactional_id", "correlation_id",
                 "transaction_version")

    def __init__(self, data: bytes) -> None:
        buf = memoryview(data)
        self.acks = self.timeout_ms = self.correlation_id = self.transaction_version = 0
        self.client_id = self.transactional_id = ""
        self.topics: list[ProduceTopicView] = []
        for field, value in fields(buf, 0, len(buf)):
            if isinstance(value, tuple):
                if field == 3:
                    self.topics.append(ProduceTopicView(buf, *value))
                elif field == 4:
                    self.client_id = text(buf, value)
                elif field == 5:
                    self.transactional_id = text(buf, value)
            elif field == 1:
                self.acks = signed(value)
            elif field == 2:
                self.timeout_ms = signed(value)
            elif field == 6:
                self.correlation_id = signed(value)
            elif field == 7:
                self.transaction_version = signed(value)


def parse_produce_request(data: bytes) -> ProduceRequestView:
    """gRPC request deserializer for the broker's Produce and ProduceStream: no copy of the batches
    (the generated parser copied each into the message, and reading ``records`` copied it again)."""
    return ProduceRequestView(data)
