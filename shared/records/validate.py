"""What the broker checks in every batch a client produces, as Kafka's LogValidator does.

Pure: bytes in, an exception or nothing out. The header rules (codec, control
bit, count and offsets, producer fields) come first; then the records section
is decompressed and every record walked: lengths and varints in bounds, offset
deltas 0..n-1 in order, the batch's maxTimestamp equal to its records' max, key
and value lengths >= -1, headers well formed (UTF-8 keys), and no byte after
the last record. Plain batches of many records (the producer's usual shape)
are walked by the vectorised ``positions`` walk in a few numpy steps; anything
else, or a batch that walk does not accept, goes through the record-by-record
walk below, which names the first bad record by its index in the batch.

Byte-level damage is ``CorruptRecordError`` (CORRUPT_MESSAGE); a well-formed
batch that breaks a rule is ``InvalidRecordError`` (INVALID_RECORD), and a
client setting LogAppendTime is ``InvalidTimestampError``, as in Kafka.
"""

from __future__ import annotations

import numpy as np

from shared.errors import CorruptRecordError, InvalidRecordError, InvalidTimestampError
from shared.records.compression import CompressionType, decompress
from shared.records.header import (
    ATTR_COMPRESSION_MASK,
    ATTR_CONTROL,
    ATTR_DELETE_HORIZON,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    HEADER_SIZE,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    BatchHeader,
)
from shared.records.positions import record_positions
from shared.records.varint import decode_zigzag

#: Attribute bits a client may set: codec, transactional (bit 3 LogAppendTime and bits 5-6 are the
#: broker's and the cleaner's; bits 7-15 are unused).
_CLIENT_ATTRIBUTES = ATTR_COMPRESSION_MASK | ATTR_TIMESTAMP_TYPE | ATTR_TRANSACTIONAL | ATTR_CONTROL | ATTR_DELETE_HORIZON


def check_produced_header(h: BatchHeader) -> None:
    """The rules on a produced batch's header (its CRC and lengths are already checked)."""
    codec = h.attributes & ATTR_COMPRESSION_MASK
    if codec > CompressionType.ZSTD:
        raise CorruptRecordError(f"unknown compression type {codec} in the batch attributes ({h.attributes:#06x})")
    if h.attributes & ~_CLIENT_ATTRIBUTES & 0xFFFF:
        raise InvalidRecordError(f"unused attribute bits set in the batch attributes ({h.attributes:#06x})")
    if h.attributes & ATTR_CONTROL:
        raise InvalidRecordError("clients are not allowed to write control records")
    if h.attributes & ATTR_DELETE_HORIZON:
        raise InvalidRecordError("clients are not allowed to set the delete horizon flag")
    if h.attributes & ATTR_TIMESTAMP_TYPE:
        raise InvalidTimestampError("a producer may not set the timestamp type to LogAppendTime")
    if h.records_count <= 0:
        raise InvalidRecordError(f"invalid record count {h.records_count}: a produced batch holds records")
    if h.records_count != h.last_offset_delta + 1:
        raise InvalidRecordError(
            f"inconsistent batch: lastOffsetDelta {h.last_offset_delta} and record count {h.records_count}")
    if h.producer_id < NO_PRODUCER_ID:
        raise InvalidRecordError(f"invalid producer id {h.producer_id}")
    if h.producer_id >= 0 and (h.base_sequence < 0 or h.producer_epoch < 0):
        raise InvalidRecordError(
            f"invalid sequence {h.base_sequence} or epoch {h.producer_epoch} with producer id {h.producer_id}")
    if h.producer_id == NO_PRODUCER_ID and (h.base_sequence != NO_SEQUENCE or h.attributes & ATTR_TRANSACTIONAL):
        raise InvalidRecordError("a sequence number or the transactional flag without a producer id")


def produced_section(buf: bytes | bytearray | memoryview, pos: int, h: BatchHeader) -> tuple[bytes | memoryview, int, int]:
    """The batch's records section as ``(data, start, stop)``: decompressed, or in place when plain."""
    if h.attributes & ATTR_COMPRESSION_MASK:
        data = decompress(h.attributes & ATTR_COMPRESSION_MASK, bytes(buf[pos + HEADER_SIZE:pos + h.size]))
        return data, 0, len(data)
    return buf, pos + HEADER_SIZE, pos + h.size


def validate_produced(buf: bytes | bytearray | memoryview, pos: int, h: BatchHeader) -> tuple[bytes | memoryview, int, int]:
    """Check a produced batch whose header passed ``check_batch``; return its records section as
    ``produced_section`` does. Raises naming the first bad record by its index."""
    check_produced_header(h)
    data, start, stop = produced_section(buf, pos, h)
    check_records(h, data, start, stop)
    return data, start, stop


def check_records(h: BatchHeader, data: bytes | memoryview, start: int, stop: int) -> None:
    """Every record of ``data[start:stop]`` against the header's count and maxTimestamp."""
    count = h.records_count
    found = record_positions(data, start, stop, count, 0, h.base_timestamp, None)
    if found is not None:
        wrong = np.flatnonzero(found.offsets != np.arange(count, dtype=np.int64))
        if len(wrong):
            i = int(wrong[0])
            raise InvalidRecordError(f"record {i}: offset delta {int(found.offsets[i])}, expected {i}")
        max_ts = int(found.timestamps.max())
        if max_ts != h.max_timestamp:
            raise InvalidRecordError(_max_ts_message(h.max_timestamp, max_ts))
        return
    max_ts = walk_records(data, start, stop, count, h.base_timestamp)
    if max_ts != h.max_timestamp:
        raise InvalidRecordError(_max_ts_message(h.max_timestamp, max_ts))


def _max_ts_message(batch_max: int, records_max: int) -> str:
    return f"the batch's maxTimestamp {batch_max} is not its records' max timestamp {records_max}"


def walk_records(data: bytes | memoryview, start: int, stop: int, count: int, base_ts: int) -> int:
    """Walk ``count`` records record by record; return their max timestamp. Raises naming the record."""
    pos = start
    max_ts = -(2**63)
    for i in range(count):
        try:
            pos, ts = _walk_record(data, pos, stop, i)
        except CorruptRecordError as exc:
            raise CorruptRecordError(f"record {i}: {exc.args[0]}") from None
        ts += base_ts
        if ts > max_ts:
            max_ts = ts
    if pos != stop:
        raise CorruptRecordError(f"{stop - pos} bytes after the last record ({count} records)")
    return max_ts


def _varint(data: bytes | memoryview, pos: int, end: int, what: str) -> tuple[int, int]:
    value, after = decode_zigzag(data, pos)
    if after > end:
        raise CorruptRecordError(f"{what} runs past the end of the record")
    return value, after


def _walk_record(data: bytes | memoryview, pos: int, stop: int, i: int) -> tuple[int, int]:
    """One record at ``pos``: return where it ends and its timestamp delta."""
    length, pos = _varint(data, pos, stop, "the record length")
    end = pos + length
    if length < 1 or end > stop:
        raise CorruptRecordError(f"length {length} does not fit in the {stop - pos} bytes left")
    pos += 1  # the record's attributes byte (unused)
    ts_delta, pos = _varint(data, pos, end, "the timestamp delta")
    delta, pos = _varint(data, pos, end, "the offset delta")
    if delta != i:
        raise InvalidRecordError(f"record {i}: offset delta {delta}, expected {i}")
    for what in ("key", "value"):
        n, pos = _varint(data, pos, end, f"the {what} length")
        if n < -1 or pos + max(n, 0) > end:
            raise CorruptRecordError(f"{what} length {n} does not fit in the record")
        pos += max(n, 0)
    n_headers, pos = _varint(data, pos, end, "the header count")
    if n_headers < 0 or n_headers > end - pos:
        raise CorruptRecordError(f"invalid header count {n_headers}")
    for _ in range(n_headers):
        klen, pos = _varint(data, pos, end, "a header key length")
        if klen < 0 or pos + klen > end:
            raise CorruptRecordError(f"header key length {klen} does not fit in the record")
        try:
            bytes(data[pos:pos + klen]).decode("utf-8")
        except UnicodeDecodeError:
            raise CorruptRecordError("a header key is not valid UTF-8") from None
        pos += klen
        vlen, pos = _varint(data, pos, end, "a header value length")
        if vlen < -1 or pos + max(vlen, 0) > end:
            raise CorruptRecordError(f"header value length {vlen} does not fit in the record")
        pos += max(vlen, 0)
    if pos != end:
        raise CorruptRecordError(f"{end - pos} bytes left inside the record after its fields")
    return end, ts_delta
