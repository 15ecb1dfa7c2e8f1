"""What the broker checks in every batch a client produces, as Kafka's LogValidator does.

Pure: bytes in, an exception or nothing out. The header rules (codec, control
bit, count and offsets, producer fields) come first; then the records section
is decompressed and every record walked: lengths and varints in bounds, offset
deltas 0..n-1 in order, the batch's maxTimestamp equal to its records' max, key
and value lengths >= -1, headers well formed (UTF-8 keys), and no byte after
the last record. Batches of many records that come in runs laid out alike
(the producer's usual shape) are checked a run at a time (``validate_runs``);
other plain batches by the vectorised ``positions`` walk in a few numpy steps
per field; anything else, or a batch those checks do not accept, goes through
the record-by-record walk below, which names the first bad record by its index.

Byte-level damage is ``CorruptRecordError`` (CORRUPT_MESSAGE); a well-formed
batch that breaks a rule is ``InvalidRecordError`` (INVALID_RECORD), and a
client setting LogAppendTime is ``InvalidTimestampError``, as in Kafka.
"""

from __future__ import annotations

import numpy as np

from shared.errors import CorruptRecordError, InvalidRecordError, InvalidTimestampError
from shared.records.compression import CompressionType, decompress, produced_limit
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
from shared.records.positions import MIN_VECTOR_RECORDS, read_varints, walk_lengths
from shared.records.validate_runs import check_runs
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
        raw = bytes(buf[pos + HEADER_SIZE:pos + h.size])
        data = decompress(h.attributes & ATTR_COMPRESSION_MASK, raw, produced_limit(len(raw)))
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
    max_delta = None
    if count >= MIN_VECTOR_RECORDS:  # runs of records laid out alike (few numpy steps per run)
        max_delta = check_runs(data, start, stop, count)
    if max_delta is None and isinstance(data, memoryview):  # the walks below index bytes faster
        data, start, stop = bytes(data[start:stop]), 0, stop - start
    if max_delta is None and count >= MIN_VECTOR_RECORDS:  # any plain records, vectorised
        max_delta = _vector_check(data, start, stop, count)
    if max_delta is None:  # not the common shape, or something is wrong: this walk names it
        max_ts = walk_records(data, start, stop, count, h.base_timestamp)
    else:
        max_ts = h.base_timestamp + max_delta
    if max_ts != h.max_timestamp:
        raise InvalidRecordError(f"the batch's maxTimestamp {h.max_timestamp} is not its records' max "
                                 f"timestamp {max_ts}")


def _vector_check(data: bytes | memoryview, start: int, stop: int, count: int) -> int | None:
    """The records' max timestamp delta when ``count`` plain records (no headers, varints of at most three
    bytes) fill ``data[start:stop]`` exactly with offset deltas 0..count-1; None otherwise.

    The record boundaries come from the run-following walk of ``positions``; then each field's varint is
    read for all records at once. Every record must end exactly at its boundary after a zero header
    count, so no field can reach outside its record."""
    arr = np.frombuffer(data, np.uint8)
    walked = walk_lengths(data, arr, start, stop, count)
    if walked is None:
        return None
    body, end = walked
    last = len(arr) - 1
    p = body + 1  # the attributes byte is unused
    fields = []
    for _ in range(4):  # timestamp delta, offset delta, key length, value length (the key between)
        got = read_varints(arr, np.minimum(p, last), last)
        if got is None:
            return None
        value, size = got
        p = p + size
        if len(fields) == 2:  # the key length: skip the key
            if (value < -1).any():
                return None
            p = p + np.maximum(value, 0)
        fields.append(value)
    ts_delta, offset_delta, _, value_len = fields
    if (value_len < -1).any():
        return None
    p = p + np.maximum(value_len, 0)
    if arr[np.minimum(p, last)].any():  # headers: the same count in every record, or the walk below
        p = _vector_headers(arr, p, last)
        if p is None:
            return None
    else:
        p = p + 1
    if not (p == end).all():
        return None
    if not (offset_delta == np.arange(count, dtype=np.int64)).all():
        return None  # the record-by-record walk names the first wrong one
    return int(ts_delta.max())


#: Records with more headers each than this are walked record by record.
_MAX_VECTOR_HEADERS = 16


def _vector_headers(arr: np.ndarray, p: np.ndarray, last: int) -> np.ndarray | None:
    """Skip the headers at ``p`` when every record has the same count (at most ``_MAX_VECTOR_HEADERS``) and
    every key is ASCII (so UTF-8); return where they end, or None (the record-by-record walk decides)."""
    got = read_varints(arr, np.minimum(p, last), last)
    if got is None:
        return None
    counts, size = got
    n = int(counts[0])
    if not 0 < n <= _MAX_VECTOR_HEADERS or not (counts == n).all():
        return None
    p = p + size
    for _ in range(n):
        got = read_varints(arr, np.minimum(p, last), last)
        if got is None:
            return None
        key_len, size = got
        if (key_len < 0).any():
            return None
        p = p + size
        total = int(key_len.sum())
        if total:  # every key byte below 0x80
            first = np.cumsum(key_len) - key_len
            idx = np.repeat(p - first, key_len) + np.arange(total, dtype=np.int64)
            if (arr[np.minimum(idx, last)] >= 0x80).any():
                return None
        p = p + key_len
        got = read_varints(arr, np.minimum(p, last), last)
        if got is None:
            return None
        value_len, size = got
        if (value_len < -1).any():
            return None
        p = p + size + np.maximum(value_len, 0)
    return p


def walk_records(data: bytes | memoryview, start: int, stop: int, count: int, base_ts: int) -> int:
    """Walk ``count`` records record by record; return their max timestamp. Raises naming the record.

    One-byte varints (and two-byte lengths) are decoded inline, as the decoder does; a field
    that reads past its record is caught by the end-of-record check before anything else is read."""
    pos = start
    max_td: int | None = None
    i = 0
    try:
        for i in range(count):
            pos, td = _walk_record(data, pos, stop, i)
            if max_td is None or td > max_td:
                max_td = td
    except IndexError:
        raise CorruptRecordError(f"record {i}: runs past the end of the batch") from None
    except CorruptRecordError as exc:
        raise CorruptRecordError(f"record {i}: {exc.args[0]}") from None
    if pos != stop:
        raise CorruptRecordError(f"{stop - pos} bytes after the last record ({count} records)")
    return base_ts + (max_td or 0)


def _walk_record(data: bytes | memoryview, pos: int, stop: int, i: int) -> tuple[int, int]:
    """One record at ``pos``: return where it ends and its timestamp delta."""
    dz = decode_zigzag
    b = data[pos]
    if b < 0x80:
        length = (b >> 1) ^ -(b & 1)
        pos += 1
    elif data[pos + 1] < 0x80:  # two bytes: records of 64 B to 8 KiB
        v = (b & 0x7F) | (data[pos + 1] << 7)
        length = (v >> 1) ^ -(v & 1)
        pos += 2
    else:
        length, pos = dz(data, pos)
    end = pos + length
    if length < 1 or end > stop:
        raise CorruptRecordError(f"length {length} does not fit in the {stop - pos} bytes left")
    b = data[pos + 1]  # after the unused attributes byte
    if b < 0x80:
        td = (b >> 1) ^ -(b & 1)
        pos += 2
    else:
        td, pos = dz(data, pos + 1)
    b = data[pos]
    if b < 0x80:
        delta = (b >> 1) ^ -(b & 1)
        pos += 1
    else:
        delta, pos = dz(data, pos)
    if delta != i:
        raise InvalidRecordError(f"record {i}: offset delta {delta}, expected {i}")
    for what in ("key", "value"):
        b = data[pos]
        if b < 0x80:
            n = (b >> 1) ^ -(b & 1)
            pos += 1
        elif data[pos + 1] < 0x80:
            v = (b & 0x7F) | (data[pos + 1] << 7)
            n = (v >> 1) ^ -(v & 1)
            pos += 2
        else:
            n, pos = dz(data, pos)
        if n < -1 or (n > 0 and pos + n > end):
            raise CorruptRecordError(f"{what} length {n} does not fit in the record")
        if n > 0:
            pos += n
    if pos >= end:
        raise CorruptRecordError("the fields run past the end of the record")
    if data[pos] == 0:
        pos += 1
    else:
        pos = _walk_headers(data, pos, end)
    if pos != end:
        raise CorruptRecordError(f"its fields end {end - pos:+d} bytes from where its length says")
    return end, td


def _walk_headers(data: bytes | memoryview, pos: int, end: int) -> int:
    """A record's header count and headers at ``pos``: keys are UTF-8, lengths within the record."""
    dz = decode_zigzag
    count, pos = dz(data, pos)
    if count < 0 or count > end - pos:
        raise CorruptRecordError(f"invalid header count {count}")
    for _ in range(count):
        b = data[pos]
        if b < 0x80:
            klen = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            klen, pos = dz(data, pos)
        if klen < 0 or pos + klen > end:
            raise CorruptRecordError(f"header key length {klen} does not fit in the record")
        try:
            str(data[pos:pos + klen], "utf-8")
        except UnicodeDecodeError:
            raise CorruptRecordError("a header key is not valid UTF-8") from None
        pos += klen
        b = data[pos]
        if b < 0x80:
            vlen = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            vlen, pos = dz(data, pos)
        if vlen < -1 or pos + vlen > end:
            raise CorruptRecordError(f"header value length {vlen} does not fit in the record")
        if vlen > 0:
            pos += vlen
    return pos
