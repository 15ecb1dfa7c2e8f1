"""The cleaner's only contact with the record-batch codec (``shared.records``).

Everything the cleaning core needs from the batch format goes through this module, so a
change of the codec's module layout is a change of imports here only:

* ``read_batches``: ``(position, header, records)`` for every batch of a segment's bytes;
* ``encode_retained``: a batch rebuilt around the records compaction kept, with the
  original base offset, lastOffsetDelta (offset deltas keep their gaps), producer id,
  epoch and base sequence, partition leader epoch, timestamp type and compression codec;
  with a delete horizon, attribute bit 6 is set and ``baseTimestamp`` holds the horizon
  (record timestamp deltas are then relative to it), as Kafka's v2 format does;
* ``encode_empty``: the header-only batch Kafka keeps for a producer's last batch when
  compaction removed all its records (base/last offset, sequence and max timestamp kept).

Pure: bytes in, bytes out.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence

from shared.records.builder import encode_headers
from shared.records.compression import CompressionType, compress
from shared.records.decoder import decode_batch
from shared.records.header import (
    ATTR_COMPRESSION_MASK,
    ATTR_DELETE_HORIZON,
    ATTR_TIMESTAMP_TYPE,
    CRC_START,
    HEADER_SIZE,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    MAGIC,
    BatchHeader,
    crc32c,
    iter_batches,
)
from shared.records.record import Record
from shared.records.varint import MINUS_ONE, zz

__all__ = ["BatchHeader", "Record", "encode_empty", "encode_retained", "read_batches", "read_headers"]

_CRC = struct.Struct(">I")


def read_headers(data: bytes | memoryview) -> Iterator[tuple[int, BatchHeader]]:
    """``(position, header)`` of every whole batch, CRCs checked."""
    return iter_batches(data, validate=True)


def read_batches(data: bytes | memoryview) -> Iterator[tuple[int, BatchHeader, list[Record]]]:
    """Every whole batch with its decoded records; a damaged batch raises ``CorruptRecordError``."""
    for pos, _ in iter_batches(data, validate=False):
        header, records = decode_batch(data, pos, validate=True)
        yield pos, header, records


def _encode_records(records: Sequence[Record], base_offset: int, base_ts: int) -> bytes:
    out: list[bytes] = []
    append = out.append
    for r in records:
        td = zz(r.timestamp - base_ts)
        od = zz(r.offset - base_offset)
        key, value = r.key, r.value
        kb = MINUS_ONE if key is None else zz(len(key))
        vb = MINUS_ONE if value is None else zz(len(value))
        hb = encode_headers(r.headers) if r.headers else b"\x00"
        body = b"".join((b"\x00", td, od, kb, key or b"", vb, value or b"", hb))
        append(zz(len(body)))
        append(body)
    return b"".join(out)


def _pack(h: BatchHeader, attributes: int, base_ts: int, max_ts: int, count: int, body: bytes) -> bytes:
    head = bytearray(HEADER_STRUCT.pack(
        h.base_offset, HEADER_SIZE - LOG_OVERHEAD + len(body), h.partition_leader_epoch, MAGIC, 0, attributes,
        h.last_offset_delta, base_ts, max_ts, h.producer_id, h.producer_epoch, h.base_sequence, count,
    ))
    _CRC.pack_into(head, 17, crc32c(body, crc32c(memoryview(head)[CRC_START:])))
    return bytes(head) + body


def encode_retained(h: BatchHeader, records: Sequence[Record], delete_horizon_ms: int | None) -> bytes:
    """Rebuild batch ``h`` with only ``records`` (non-empty, in offset order)."""
    attributes = h.attributes & ~ATTR_DELETE_HORIZON
    if delete_horizon_ms is not None:
        attributes |= ATTR_DELETE_HORIZON
        base_ts = delete_horizon_ms
    else:
        base_ts = records[0].timestamp
    if h.attributes & ATTR_TIMESTAMP_TYPE:
        max_ts = h.max_timestamp  # LogAppendTime: every record has the batch's time
        body = _encode_records([Record(r.offset, base_ts, r.key, r.value, r.headers) for r in records],
                               h.base_offset, base_ts)
    else:
        max_ts = max(r.timestamp for r in records)
        body = _encode_records(records, h.base_offset, base_ts)
    codec = h.compression
    if codec != CompressionType.NONE:
        body = compress(codec, body)
    return _pack(h, attributes, base_ts, max_ts, len(records), body)


def encode_empty(h: BatchHeader) -> bytes:
    """The header-only batch that keeps a producer's last batch after all its records went."""
    attributes = h.attributes & ~(ATTR_DELETE_HORIZON | ATTR_COMPRESSION_MASK)  # nothing to compress
    return _pack(h, attributes, h.max_timestamp, h.max_timestamp, 0, b"")
