"""What the broker checks in every batch a client produces, as Kafka does ("accept what Kafka accepts").

Pure: bytes in, an exception or the records section out. Three layers, in Kafka's order:

1. ``produced_batches``, the payload's framing (Kafka: ``ProduceRequest.validateRecords`` and
   ``UnifiedLog.analyzeAndValidateRecords``): whole batches, magic 2, baseOffset 0, ``max.message.bytes``
   (MESSAGE_TOO_LARGE), CRC-32C (CORRUPT_MESSAGE).
2. ``check_produced_header``, ``LogValidator.validateBatch``: record count > 0 and lastOffsetDelta + 1,
   no control batch, a sequence with every producer id; codec 0-4.
3. ``check_records``: the records section is decompressed and every record walked: lengths and varints
   in bounds, offset deltas 0..n-1, key and value lengths >= -1, headers well formed (keys non-null
   UTF-8), the declared count and no byte after the last record. Records without headers are walked
   first in compiled code (``_speedups.check_plain``, which accepts a subset of what the walk below
   accepts); batches of many records that come in runs laid out alike (the producer's usual shape) are
   checked a run at a time (``validate_runs``); other plain batches by the vectorised ``positions``
   walk; anything else, or a batch those checks do not accept, by the record-by-record walk below,
   which names the first bad record by its index.

Damage the CRC or the framing shows is ``CorruptRecordError`` (CORRUPT_MESSAGE, retriable: a resend may
arrive whole); a batch whose CRC holds but which breaks a rule is ``InvalidRecordError`` (INVALID_RECORD:
resending it cannot help), and LogAppendTime set by a client or a timestamp out of the topic's bounds is
``InvalidTimestampError`` (INVALID_TIMESTAMP), as in Kafka. A batch whose maxTimestamp is not its
records' max is accepted and rewritten, as Kafka's LogValidator does (``with_max_timestamp``).
Accepted as Kafka accepts them: producerId -1 (or any negative id) with any epoch and sequence (kafkajs
writes epoch 0 and baseSequence 0 without idempotence), attribute bits 7-15, and the shapes of the Java
client, librdkafka, kafkajs and kafka-python for every codec (tests/unit/records/test_kafka_client_shapes.py).

Where Tidelog deliberately differs from Kafka (Kafka read in apache/kafka: ``LogValidator``,
``UnifiedLog.analyzeAndValidateRecords``, ``ProduceRequest.validateRecords``, ``DefaultRecord``):

| rule                              | Kafka                                         | Tidelog           | why |
|-----------------------------------|-----------------------------------------------|-------------------|-----|
| magic 0 or 1                      | converted (produce v0-2); INVALID_RECORD (v3+) | INVALID_RECORD    | 1   |
| truncated batch, bytes after the  | tail dropped silently; nothing whole:         | CORRUPT_MESSAGE   | 2   |
|   last batch, empty payload       |   INVALID_RECORD                              |                   |     |
| several batches for a partition   | INVALID_RECORD (produce v3+)                  | accepted (gRPC)   | 3   |
| codec 5-7                         | UNKNOWN_SERVER_ERROR (uncaught exception)     | INVALID_RECORD    | 4   |
| records that do not decompress    | UNKNOWN_SERVER_ERROR (KafkaException)         | INVALID_RECORD    | 4   |
| decompressed > max(64 MiB, 32x)   | accepted (decompressed as a stream)           | INVALID_RECORD    | 5   |
| offset deltas not 0..n-1          | plain: stored as is; compressed: re-encoded   | INVALID_RECORD    | 6   |
| delete-horizon bit (6)            | accepted                                      | INVALID_RECORD    | 7   |
| LogAppendTime bit, CreateTime     | accepted, re-marked CreateTime (maxTimestamp  | INVALID_TIMESTAMP | 8   |
|   topic                           |   -1: INVALID_TIMESTAMP)                      |                   |     |
| transactional bit, no producer id | stored (TRANSACTIONAL_ID_AUTHORIZATION_FAILED | INVALID_RECORD    | 9   |
|                                   |   if the request has no transactional id)     |                   |     |
| producer id >= 0, epoch < 0       | accepted (no epoch: any sequence)             | INVALID_RECORD    | 10  |
| key/value/header value length <-1 | read as null                                  | INVALID_RECORD    | 11  |
| header key not UTF-8              | accepted (Java decodes it with U+FFFD)        | INVALID_RECORD    | 11  |

1. Only v2 is stored, and every client of produce v3+ (idempotence, headers) writes v2.
2. A payload that does not end at a batch boundary was damaged on the way: never store a prefix of it.
3. The gRPC Produce appends several batches all or none (existing callers send them); the Kafka listener
   must keep Kafka's one-batch rule for produce v3+.
4. The batch is at fault and resending it cannot help: both codes are non-retriable, this one names it.
5. A records section is decompressed whole in memory: a bound against decompression bombs.
6. Batches are never re-encoded (a record's offset is baseOffset + delta), so wrong deltas would give
   wrong or duplicate offsets; no v2 client writes them (Kafka's rewrite serves v0/v1 wrappers).
7. The cleaner's flag: the base timestamp would be read as a delete horizon and tombstones dropped early.
8. A quirk of Kafka's if/else that no client relies on (none sets the bit); accepting means a rewrite.
9. Such a batch can never be committed or aborted; no client writes it.
10. Producer fencing compares epochs; InitProducerId gives every client an epoch >= 0 (kafka-python
    asserts it before writing).
11. Tidelog's decoders refuse them, and header keys are strings in the gRPC API: a batch some reader
    cannot decode is never stored.

Not checked here (notes): zstd needs produce v7+ (UNSUPPORTED_COMPRESSION_TYPE before) and the
one-batch rule are produce-version rules for the Kafka listener; ``message.timestamp.before.max.ms`` /
``after.max.ms`` (KIP-937, INVALID_TIMESTAMP, Kafka's default Long.MAX: no bound) are checked by
``check_timestamp_bounds`` when the caller passes the bounds and the time; a keyless record on a
compacted topic (INVALID_RECORD) and a batch above ``segment.bytes`` (RECORD_LIST_TOO_LARGE) by
``services.broker.log.validation``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from shared.errors import CorruptRecordError, InvalidRecordError, InvalidTimestampError, RecordTooLargeError
from shared.records.columns import decode_columns
from shared.records.compiled import speedups
from shared.records.compression import CompressionType, decompress, produced_limit
from shared.records.header import (
    ATTR_COMPRESSION_MASK,
    ATTR_CONTROL,
    ATTR_DELETE_HORIZON,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    CRC_START,
    HEADER_SIZE,
    MAGIC,
    MIN_BATCH_LENGTH,
    NO_TIMESTAMP,
    BatchHeader,
    crc32c,
    pack_header,
)
from shared.records.positions import MIN_VECTOR_RECORDS, read_varints, walk_lengths
from shared.records.validate_runs import check_runs
from shared.records.varint import decode_zigzag

#: Kafka's "no bound" for ``message.timestamp.before.max.ms`` / ``after.max.ms`` (Long.MAX_VALUE).
UNBOUNDED = 2**63 - 1
_INT64_MIN = -(2**63)
#: Kafka reads a 32-bit varint (lengths, offset delta, header count) from at most 5 bytes.
_MAX_VARINT32_BYTES = 5


class ProducedSection(NamedTuple):
    """A validated batch's records section ``data[start:stop]`` (decompressed, or in place when plain)
    and its records' max timestamp (what Kafka writes into the batch as its maxTimestamp)."""

    data: bytes | memoryview
    start: int
    stop: int
    max_timestamp: int


def produced_batches(buf: bytes | bytearray | memoryview, max_message_bytes: int) -> list[tuple[int, BatchHeader]]:
    """``(position, header)`` of every batch of a produce payload, its framing checked in Kafka's order: a
    bad length, magic or CRC is CORRUPT_MESSAGE, a v0/v1 batch or a baseOffset other than 0 INVALID_RECORD,
    a batch above ``max_message_bytes`` MESSAGE_TOO_LARGE. Raises for the whole payload."""
    n = len(buf)
    if n == 0:
        raise CorruptRecordError("empty record set")
    view = memoryview(buf)
    out: list[tuple[int, BatchHeader]] = []
    pos = 0
    while pos < n:
        if n - pos < HEADER_SIZE:
            raise CorruptRecordError(f"{n - pos} trailing bytes are not a whole batch")
        h = BatchHeader.parse(buf, pos)
        if h.batch_length < MIN_BATCH_LENGTH:
            raise CorruptRecordError(f"batchLength {h.batch_length} at position {pos} is smaller than a batch header")
        end = pos + h.size
        if end > n:
            raise CorruptRecordError(f"truncated batch: batchLength says {h.size} bytes, {n - pos} available")
        if h.magic != MAGIC:
            if h.magic in (0, 1):
                raise InvalidRecordError(f"a batch of magic {h.magic}: Tidelog accepts record batches of magic 2 only")
            raise CorruptRecordError(f"invalid magic {h.magic} at position {pos}")
        if h.base_offset != 0:
            raise InvalidRecordError(f"the baseOffset of a produced batch should be 0, but it is {h.base_offset}")
        if h.size > max_message_bytes:
            raise RecordTooLargeError(f"batch of {h.size} bytes exceeds max.message.bytes={max_message_bytes}")
        actual = crc32c(view[pos + CRC_START:end])
        if actual != h.crc:
            raise CorruptRecordError(f"CRC mismatch at position {pos}: stored {h.crc:#010x}, computed {actual:#010x}")
        out.append((pos, h))
        pos = end
    return out


def check_produced_header(h: BatchHeader) -> None:
    """Kafka's rules on a client's batch header (``LogValidator.validateBatch``), and the attribute bits
    only the broker and the cleaner set. Its framing and CRC are already checked (``produced_batches``)."""
    if h.records_count <= 0:
        raise InvalidRecordError(f"invalid record count {h.records_count}: a produced batch holds records")
    if h.records_count != h.last_offset_delta + 1:
        raise InvalidRecordError(
            f"inconsistent batch: lastOffsetDelta {h.last_offset_delta} and record count {h.records_count}")
    attributes = h.attributes
    if attributes & ATTR_CONTROL:
        raise InvalidRecordError("clients are not allowed to write control records")
    codec = attributes & ATTR_COMPRESSION_MASK
    if codec > CompressionType.ZSTD:
        raise InvalidRecordError(f"unknown compression type {codec} in the batch attributes ({attributes:#06x})")
    if attributes & ATTR_DELETE_HORIZON:
        raise InvalidRecordError("clients are not allowed to set the delete horizon flag")
    if attributes & ATTR_TIMESTAMP_TYPE:
        raise InvalidTimestampError("a producer may not set the timestamp type to LogAppendTime")
    if h.producer_id >= 0:  # Kafka's hasProducerId(): a negative id is "none", its epoch and sequence unread
        if h.base_sequence < 0:
            raise InvalidRecordError(
                f"invalid sequence number {h.base_sequence} in a batch with producer id {h.producer_id}")
        if h.producer_epoch < 0:
            raise InvalidRecordError(
                f"invalid producer epoch {h.producer_epoch} in a batch with producer id {h.producer_id}")
    elif attributes & ATTR_TRANSACTIONAL:
        raise InvalidRecordError("a transactional batch without a producer id")


def produced_section(buf: bytes | bytearray | memoryview, pos: int, h: BatchHeader) -> tuple[bytes | memoryview, int, int]:
    """The batch's records section as ``(data, start, stop)``: decompressed, or in place when plain. Records
    that do not decompress (or decompress to too much) are INVALID_RECORD: the CRC says they are as sent."""
    codec = h.attributes & ATTR_COMPRESSION_MASK
    if codec:
        raw = bytes(buf[pos + HEADER_SIZE:pos + h.size])
        try:
            data = decompress(codec, raw, produced_limit(len(raw)))
        except CorruptRecordError as exc:
            raise InvalidRecordError(exc.args[0]) from exc
        return data, 0, len(data)
    return buf, pos + HEADER_SIZE, pos + h.size


def validate_produced(buf: bytes | bytearray | memoryview, pos: int, h: BatchHeader) -> ProducedSection:
    """Check a produced batch whose framing passed ``produced_batches``; return its records section and
    their max timestamp. Raises naming the first bad record by its index."""
    check_produced_header(h)
    data, start, stop = produced_section(buf, pos, h)
    return ProducedSection(data, start, stop, check_records(h, data, start, stop))


def with_max_timestamp(buf: bytes | bytearray | memoryview, pos: int, h: BatchHeader, max_timestamp: int) -> bytes:
    """The batch at ``pos`` with ``max_timestamp`` as its maxTimestamp and a new CRC (Kafka's LogValidator
    sets a client batch's maxTimestamp to its records' max rather than refuse it)."""
    body = bytes(buf[pos + HEADER_SIZE:pos + h.size])
    return pack_header(
        body, base_offset=h.base_offset, records_count=h.records_count, last_offset_delta=h.last_offset_delta,
        base_timestamp=h.base_timestamp, max_timestamp=max_timestamp, attributes=h.attributes,
        producer_id=h.producer_id, producer_epoch=h.producer_epoch, base_sequence=h.base_sequence,
        partition_leader_epoch=h.partition_leader_epoch) + body


def check_timestamp_bounds(h: BatchHeader, section: ProducedSection, now: int, before_max_ms: int,
                           after_max_ms: int) -> None:
    """KIP-937 on a CreateTime topic: every record timestamp other than -1 within
    ``[now - before_max_ms, now + after_max_ms]`` (``message.timestamp.before.max.ms`` / ``after.max.ms``;
    ``UNBOUNDED`` is Kafka's default, no bound), else INVALID_TIMESTAMP naming the first such record."""
    low, high = now - before_max_ms, now + after_max_ms
    if before_max_ms >= UNBOUNDED or low <= _INT64_MIN:
        if after_max_ms >= UNBOUNDED or section.max_timestamp <= high:
            return  # only an upper bound, and the records' max is within it
    data, start, stop = section.data, section.start, section.stop
    if not isinstance(data, bytes):
        data, start, stop = bytes(data[start:stop]), 0, stop - start
    ts = decode_columns(h, data, start=start, end=stop).positions.timestamps
    bad = (ts != NO_TIMESTAMP) & ((ts < max(low, _INT64_MIN)) | (ts > min(high, UNBOUNDED)))
    if bad.any():
        i = int(bad.argmax())
        raise InvalidTimestampError(
            f"record {i}: timestamp {int(ts[i])} is out of range: it should be within [{low}, {high}] "
            f"(message.timestamp.before.max.ms={before_max_ms}, message.timestamp.after.max.ms={after_max_ms})")


def check_records(h: BatchHeader, data: bytes | memoryview, start: int, stop: int) -> int:
    """Every record of ``data[start:stop]`` against the header's count; return their max timestamp."""
    count = h.records_count
    max_delta = None
    if _check_plain is not None:  # plain records (no headers) in one compiled walk: a subset of what the walk accepts
        max_delta = _check_plain(data, start, stop, count)
        if max_delta is not None:
            return h.base_timestamp + max_delta
    if count >= MIN_VECTOR_RECORDS:  # runs of records laid out alike (few numpy steps per run)
        max_delta = check_runs(data, start, stop, count)
    if max_delta is None and isinstance(data, memoryview):  # the walks below index bytes faster
        data, start, stop = bytes(data[start:stop]), 0, stop - start
    if max_delta is None and count >= MIN_VECTOR_RECORDS:  # any plain records, vectorised
        max_delta = _vector_check(data, start, stop, count)
    if max_delta is None:  # not the common shape, or something is wrong: this walk names it
        return walk_records(data, start, stop, count, h.base_timestamp)
    return h.base_timestamp + max_delta


#: ``_speedups.check_plain`` where built (None: the checks below do it all)
_check_plain = getattr(speedups, "check_plain", None)


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
    longest = max(int(body[0]) - start, int((body[1:] - end[:-1]).max()) if count > 1 else 0)
    if longest > _MAX_VARINT32_BYTES:
        return None  # an over-long length varint: the record-by-record walk refuses it
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
    """Walk ``count`` records record by record; return their max timestamp. Raises INVALID_RECORD naming the
    record, as Kafka's record iterator does for any fault of structure under a good CRC.

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
        raise InvalidRecordError(f"record {i}: runs past the end of the batch ({count} records declared)") from None
    except (InvalidRecordError, CorruptRecordError) as exc:
        raise InvalidRecordError(f"record {i}: {exc.args[0]}") from None
    if pos != stop:
        raise InvalidRecordError(f"{stop - pos} bytes after the last record ({count} records declared)")
    return base_ts + (max_td or 0)


def _varint32(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    """A zig-zag varint of a 32-bit field at ``pos`` (at most 5 bytes, as Kafka reads it) and where it ends."""
    value, end = decode_zigzag(data, pos)
    if end - pos > _MAX_VARINT32_BYTES:
        raise InvalidRecordError(f"a varint of {end - pos} bytes for a 32-bit field")
    return value, end


def _walk_record(data: bytes | memoryview, pos: int, stop: int, i: int) -> tuple[int, int]:
    """One record at ``pos``: return where it ends and its timestamp delta."""
    v32 = _varint32
    b = data[pos]
    if b < 0x80:
        length = (b >> 1) ^ -(b & 1)
        pos += 1
    elif data[pos + 1] < 0x80:  # two bytes: records of 64 B to 8 KiB
        v = (b & 0x7F) | (data[pos + 1] << 7)
        length = (v >> 1) ^ -(v & 1)
        pos += 2
    else:
        length, pos = v32(data, pos)
    end = pos + length
    if length < 1 or end > stop:
        raise InvalidRecordError(f"length {length} does not fit in the {stop - pos} bytes left")
    b = data[pos + 1]  # after the unused attributes byte
    if b < 0x80:
        td = (b >> 1) ^ -(b & 1)
        pos += 2
    else:
        td, pos = decode_zigzag(data, pos + 1)  # a varlong: up to 10 bytes
    b = data[pos]
    if b < 0x80:
        delta = (b >> 1) ^ -(b & 1)
        pos += 1
    else:
        delta, pos = v32(data, pos)
    if delta != i:
        raise InvalidRecordError(f"offset delta {delta}, expected {i}")
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
            n, pos = v32(data, pos)
        if n < -1 or (n > 0 and pos + n > end):
            raise InvalidRecordError(f"{what} length {n} does not fit in the record")
        if n > 0:
            pos += n
    if pos >= end:
        raise InvalidRecordError("the fields run past the end of the record")
    if data[pos] == 0:
        pos += 1
    else:
        pos = _walk_headers(data, pos, end)
    if pos != end:
        raise InvalidRecordError(f"its fields end {end - pos:+d} bytes from where its length says")
    return end, td


def _walk_headers(data: bytes | memoryview, pos: int, end: int) -> int:
    """A record's header count and headers at ``pos``: keys non-null UTF-8, lengths within the record."""
    v32 = _varint32
    count, pos = v32(data, pos)
    if count < 0 or count > end - pos:
        raise InvalidRecordError(f"invalid header count {count}")
    for _ in range(count):
        b = data[pos]
        if b < 0x80:
            klen = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            klen, pos = v32(data, pos)
        if klen < 0:
            raise InvalidRecordError(f"header key length {klen}: a header key may not be null")
        if pos + klen > end:
            raise InvalidRecordError(f"header key length {klen} does not fit in the record")
        try:
            str(data[pos:pos + klen], "utf-8")
        except UnicodeDecodeError:
            raise InvalidRecordError("a header key is not valid UTF-8") from None
        pos += klen
        b = data[pos]
        if b < 0x80:
            vlen = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            vlen, pos = v32(data, pos)
        if vlen < -1 or pos + vlen > end:
            raise InvalidRecordError(f"header value length {vlen} does not fit in the record")
        if vlen > 0:
            pos += vlen
    return pos
