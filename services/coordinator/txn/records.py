"""Keys and values of ``__transaction_state`` records, in Kafka's byte layout. Pure.

The only module that knows these layouts (Kafka's ``TransactionLogKey.json`` and
``TransactionLogValue.json``). Every key and value starts with an int16 version; a
tombstone (null value) deletes the transactional id (written when it expires).

    TransactionLogKey v0 (never flexible):
        version int16 = 0 | TransactionalId string (int16 length + UTF-8)

    TransactionLogValue v0 (non-flexible):
        version int16 = 0 | ProducerId int64 | ProducerEpoch int16 | TransactionTimeoutMs int32
        | TransactionStatus int8
        | TransactionPartitions nullable array: int32 count (-1 = null) of
              (Topic string, PartitionIds: int32 count + int32 each)
        | TransactionLastUpdateTimestampMs int64 | TransactionStartTimestampMs int64

    TransactionLogValue v1 (flexible): the same fields in the same order, but the array, the
        strings and the inner arrays are compact (unsigned varint length + 1, 0 = null), each
        partitions entry ends with its own (empty) tagged-field section, and the value ends
        with a tagged-field section:
            tag 0 PreviousProducerId int64 (default -1)
            tag 1 NextProducerId int64 (default -1)
            tag 2 ClientTransactionVersion int16 (default 0)
        A tagged field is written only when it differs from its default, in tag order, as
        (uvarint tag, uvarint size, bytes).

Imports nothing from services; the state machine (``state.py``) turns a value into metadata.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from services.coordinator.records import RecordReader
from shared.records.varint import encode_unsigned_varint

KEY_VERSION = 0
VALUE_VERSIONS = (0, 1)
LATEST_VALUE_VERSION = 1
NO_PRODUCER_ID = -1

TAG_PREVIOUS_PRODUCER_ID = 0
TAG_NEXT_PRODUCER_ID = 1
TAG_CLIENT_TRANSACTION_VERSION = 2

#: Topic -> sorted partition ids, topics sorted: one entry of TransactionPartitions each.
TopicPartitions = tuple[tuple[str, tuple[int, ...]], ...]


@dataclass(frozen=True)
class TxnLogValue:
    """One TransactionLogValue, field for field (``status`` is the TransactionState id)."""

    producer_id: int
    producer_epoch: int
    timeout_ms: int
    status: int
    partitions: TopicPartitions | None
    last_update_ms: int
    start_ms: int
    previous_producer_id: int = NO_PRODUCER_ID  # tagged, v1+
    next_producer_id: int = NO_PRODUCER_ID  # tagged, v1+
    client_version: int = 0  # tagged, v1+


# -- writing ------------------------------------------------------------------------------------

_HEAD = struct.Struct(">hqhib")  # version, ProducerId, ProducerEpoch, TransactionTimeoutMs, TransactionStatus
_TAIL = struct.Struct(">qq")  # TransactionLastUpdateTimestampMs, TransactionStartTimestampMs
_I16, _I32, _I64 = struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")


def _string16(s: str) -> bytes:
    b = s.encode()
    if len(b) > 0x7FFF:
        raise ValueError(f"string of {len(b)} bytes is longer than 32767")
    return _I16.pack(len(b)) + b


def _compact_string(s: str) -> bytes:
    b = s.encode()
    return encode_unsigned_varint(len(b) + 1) + b


def encode_key(transactional_id: str) -> bytes:
    return _I16.pack(KEY_VERSION) + _string16(transactional_id)


def _partitions_v0(parts: TopicPartitions | None) -> bytes:
    if parts is None:
        return _I32.pack(-1)
    out = [_I32.pack(len(parts))]
    for topic, ids in parts:
        out.append(_string16(topic) + _I32.pack(len(ids)) + b"".join(_I32.pack(p) for p in ids))
    return b"".join(out)


def _partitions_v1(parts: TopicPartitions | None) -> bytes:
    if parts is None:
        return b"\x00"
    out = [encode_unsigned_varint(len(parts) + 1)]
    for topic, ids in parts:
        out.append(_compact_string(topic) + encode_unsigned_varint(len(ids) + 1)
                   + b"".join(_I32.pack(p) for p in ids) + b"\x00")  # no tagged fields per entry
    return b"".join(out)


def _tags_v1(v: TxnLogValue) -> bytes:
    tags: list[bytes] = []
    if v.previous_producer_id != NO_PRODUCER_ID:
        tags.append(bytes([TAG_PREVIOUS_PRODUCER_ID, 8]) + _I64.pack(v.previous_producer_id))
    if v.next_producer_id != NO_PRODUCER_ID:
        tags.append(bytes([TAG_NEXT_PRODUCER_ID, 8]) + _I64.pack(v.next_producer_id))
    if v.client_version != 0:
        tags.append(bytes([TAG_CLIENT_TRANSACTION_VERSION, 2]) + _I16.pack(v.client_version))
    return encode_unsigned_varint(len(tags)) + b"".join(tags)


def encode_value(v: TxnLogValue, version: int = LATEST_VALUE_VERSION) -> bytes:
    """The value bytes; version 0 cannot carry the tagged fields and refuses values that need them."""
    head = _HEAD.pack(version, v.producer_id, v.producer_epoch, v.timeout_ms, v.status)
    tail = _TAIL.pack(v.last_update_ms, v.start_ms)
    if version == 0:
        if (v.previous_producer_id, v.next_producer_id, v.client_version) != (NO_PRODUCER_ID, NO_PRODUCER_ID, 0):
            raise ValueError("TransactionLogValue v0 has no previous/next producer id or client transaction version")
        return head + _partitions_v0(v.partitions) + tail
    if version == 1:
        return head + _partitions_v1(v.partitions) + tail + _tags_v1(v)
    raise ValueError(f"TransactionLogValue v{version} is not supported")


# -- reading ------------------------------------------------------------------------------------

def decode_key(data: bytes) -> str | None:
    """The transactional id, or None for a key version this coordinator does not know (Kafka skips
    those when loading: a leftover of an aborted upgrade)."""
    r = RecordReader(data, "TransactionLogKey")
    (version,) = r.unpack(_I16)
    if version != KEY_VERSION:
        return None
    txn_id = r.string16()
    r.end()
    return txn_id


def _read_partitions_v0(r: RecordReader) -> TopicPartitions | None:
    (n,) = r.unpack(_I32)
    if n < -1 or n > len(r.data):
        raise r.corrupt(f"bad TransactionPartitions count {n}")
    if n == -1:
        return None
    out = []
    for _ in range(n):
        topic = r.string16()
        (count,) = r.unpack(_I32)
        if count < 0 or 4 * count > len(r.data) - r.pos:
            raise r.corrupt(f"bad PartitionIds count {count}")
        out.append((topic, struct.unpack(f">{count}i", r.take(4 * count))))
    return tuple(out)


def _read_partitions_v1(r: RecordReader) -> TopicPartitions | None:
    n = r.compact_length("TransactionPartitions")
    if n == -1:
        return None
    out = []
    for _ in range(n):
        tn = r.compact_length("Topic")
        if tn < 0:
            raise r.corrupt("null Topic")
        topic = r.utf8(tn)
        count = r.compact_length("PartitionIds")
        if count < 0:
            raise r.corrupt("null PartitionIds")
        out.append((topic, struct.unpack(f">{count}i", r.take(4 * count))))
        r.skip_tags()
    return tuple(out)


def _read_tags_v1(r: RecordReader) -> dict[int, int]:
    """Known tagged fields by tag; unknown tags are skipped, as Kafka's generated readers do."""
    known = {TAG_PREVIOUS_PRODUCER_ID: _I64, TAG_NEXT_PRODUCER_ID: _I64, TAG_CLIENT_TRANSACTION_VERSION: _I16}
    out: dict[int, int] = {}
    last = -1
    for _ in range(r.uvarint()):
        tag, size = r.uvarint(), r.uvarint()
        if tag <= last:
            raise r.corrupt(f"tagged field {tag} after {last} (tags must ascend)")
        last = tag
        raw = r.take(size)
        s = known.get(tag)
        if s is not None:
            if size != s.size:
                raise r.corrupt(f"tagged field {tag} has {size} bytes, expected {s.size}")
            out[tag] = s.unpack(raw)[0]
    return out


def decode_value(data: bytes | None) -> TxnLogValue | None:
    """The value, None for a tombstone; CorruptRecordError for anything else than v0/v1 bytes."""
    if data is None:
        return None
    r = RecordReader(data, "TransactionLogValue")
    (version,) = r.unpack(_I16)
    if version not in VALUE_VERSIONS:
        raise r.corrupt(f"unknown version {version}")
    pid, epoch, timeout, status = r.unpack(struct.Struct(">qhib"))
    parts = _read_partitions_v0(r) if version == 0 else _read_partitions_v1(r)
    last_update, start = r.unpack(_TAIL)
    tags = _read_tags_v1(r) if version == 1 else {}
    r.end()
    return TxnLogValue(pid, epoch, timeout, status, parts, last_update, start,
                       tags.get(TAG_PREVIOUS_PRODUCER_ID, NO_PRODUCER_ID), tags.get(TAG_NEXT_PRODUCER_ID, NO_PRODUCER_ID),
                       tags.get(TAG_CLIENT_TRANSACTION_VERSION, 0))
