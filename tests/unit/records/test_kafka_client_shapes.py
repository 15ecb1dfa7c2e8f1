"""The batch shapes real Kafka clients write are accepted by the broker's produce check, and the shapes Kafka
refuses are refused with Kafka's error code (issue 21, item 6: "accept what Kafka accepts").

kafka-python's batches come from its own encoder (``DefaultRecordBatchBuilder``), for every codec, with and
without idempotence. kafkajs and librdkafka cannot write bytes here without a broker, so their shapes are
built to the layout their encoders use (described at each builder below); the Java client's shape is
Tidelog's own encoder's (producerId/epoch/sequence -1, snappy in xerial framing, KIP-57 LZ4 frames).
Every accepted batch is appended as sent (never rewritten) and reads back through kafka-python's decoder,
an independent codec, and through Tidelog's.
"""

from __future__ import annotations

import gzip
from collections.abc import Callable

import cramjam
import lz4.frame
import pytest
import zstandard
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from services.broker.log.validation import validate_produce
from shared.config import LogConfig
from shared.errors import ErrorCode, TidelogError
from shared.records.builder import encode_batch
from shared.records.compression import CompressionType
from shared.records.decoder import decode_batch
from shared.records.header import ATTR_CONTROL, ATTR_TIMESTAMP_TYPE, ATTR_TRANSACTIONAL, BatchHeader, pack_header
from shared.records.varint import zz

TS = 1_700_000_000_000
CODECS = list(CompressionType)
Row = tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]


def rows(n: int, *, out_of_order: bool = False, value_size: int = 20) -> list[Row]:
    """Compressible records (so that every client really compresses them) with null keys, null values,
    headers and null header values; timestamps out of order when an application supplies its own."""
    out: list[Row] = []
    for i in range(n):
        ts = TS + (i * 37) % 500 if out_of_order else TS + i
        key = None if i % 7 == 3 else b"key-%04d" % i
        value = None if i % 11 == 5 else b"value-%d " % i * value_size
        headers: list[tuple[str, bytes | None]] = [("trace-id", b"%032d" % i), ("empty", None)] if i % 3 == 0 else []
        out.append((ts, key, value, headers))
    return out


def accepted(batch: bytes, config: LogConfig | None = None, now_ms: int | None = None) -> bytes:
    """What the broker appends for ``batch``: it must be the batch as sent."""
    view, batches = validate_produce(batch, config or LogConfig(), now_ms)
    assert len(batches) == 1 and bytes(view) == batch, "an accepted client batch is appended as sent"
    return bytes(view)


def read_back(stored: bytes) -> list[tuple]:
    """The records as kafka-python's own decoder reads them, checked against Tidelog's decoder."""
    kp = [(r.offset, r.timestamp, r.key, r.value, [tuple(h) for h in r.headers])
          for r in MemoryRecords(stored).next_batch()]
    ours = [(r.offset, r.timestamp, r.key, r.value, [tuple(h) for h in r.headers]) for r in decode_batch(stored)[1]]
    assert kp == ours
    return kp


def expected(sent: list[Row]) -> list[tuple]:
    return [(i, ts, k, v, hs) for i, (ts, k, v, hs) in enumerate(sent)]


def codec_of(batch: bytes) -> int:
    return BatchHeader.parse(batch).codec


# -- kafka-python: its own encoder ------------------------------------------------------------------------

#: (producerId, producerEpoch, baseSequence, transactional) as kafka-python 3.0 sets them.
KAFKA_PYTHON_PRODUCERS = {
    "plain": (-1, -1, -1, False),                # enable_idempotence=False
    "idempotent": (4711, 0, 0, False),           # its default since 3.0
    "idempotent-wrapping": (4711, 3, 2**31 - 10, False),  # the sequence wraps past INT32_MAX inside the batch
    "transactional": (4711, 1, 100, True),
}


def kafka_python_batch(sent: list[Row], codec: CompressionType, producer: tuple[int, int, int, bool]) -> bytes:
    pid, epoch, seq, transactional = producer
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=int(codec), is_transactional=transactional,
                                        producer_id=pid, producer_epoch=epoch, base_sequence=seq, batch_size=1 << 22)
    for i, (ts, key, value, headers) in enumerate(sent):
        assert builder.append(i, timestamp=ts, key=key, value=value, headers=headers) is not None
    return bytes(builder.build())


@pytest.mark.parametrize("n", [1, 50, 300])
@pytest.mark.parametrize("producer", list(KAFKA_PYTHON_PRODUCERS), ids=str)
@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_kafka_python_batches_are_accepted(codec: CompressionType, producer: str, n: int) -> None:
    sent = rows(n, out_of_order=n == 50)
    batch = kafka_python_batch(sent, codec, KAFKA_PYTHON_PRODUCERS[producer])
    assert codec_of(batch) == codec  # kafka-python sends a batch uncompressed when that is smaller
    assert read_back(accepted(batch)) == expected(sent)


# -- kafkajs: its encoder's layout ------------------------------------------------------------------------

def record_v2(offset_delta: int, ts_delta: int, key: bytes | None, value: bytes | None,
              headers: list[tuple[str | None, bytes | None]]) -> bytes:
    """One record as every client encodes it (attributes 0)."""
    def blob(b: bytes | None) -> bytes:
        return zz(-1) if b is None else zz(len(b)) + b
    body = b"".join([b"\x00", zz(ts_delta), zz(offset_delta), blob(key), blob(value), zz(len(headers)),
                     *(blob(None if k is None else k.encode()) + blob(v) for k, v in headers)])
    return zz(len(body)) + body


#: Codecs as kafkajs writes them: gzip through node's zlib; snappy, lz4 and zstd through add-on codec
#: packages, whose framing varies: here raw snappy blocks (no xerial framing), a valid LZ4 frame with other
#: options than Kafka's own (linked 4 MiB blocks, a content checksum), a zstd frame with its content size.
KAFKAJS_CODECS: dict[CompressionType, Callable[[bytes], bytes]] = {
    CompressionType.NONE: lambda b: b,
    CompressionType.GZIP: gzip.compress,
    CompressionType.SNAPPY: lambda b: bytes(cramjam.snappy.compress_raw(b)),
    CompressionType.LZ4: lambda b: lz4.frame.compress(b, block_size=lz4.frame.BLOCKSIZE_MAX4MB, block_linked=True,
                                                      content_checksum=True, store_size=False),
    CompressionType.ZSTD: lambda b: zstandard.ZstdCompressor(write_content_size=True).compress(b),
}


def kafkajs_batch(sent: list[Row], codec: CompressionType, *, producer_id: int = -1, producer_epoch: int = 0,
                  base_sequence: int = 0, transactional: bool = False) -> bytes:
    """kafkajs 2.x (produce v3+ request, RecordBatch v0 encoder): firstTimestamp is the smallest timestamp and
    every delta counts from it, maxTimestamp the largest, partitionLeaderEpoch 0; without idempotence it
    leaves its defaults producerId -1, producerEpoch 0, firstSequence 0."""
    first = min(ts for ts, *_ in sent)
    body = KAFKAJS_CODECS[codec](b"".join(record_v2(i, ts - first, k, v, list(hs))
                                          for i, (ts, k, v, hs) in enumerate(sent)))
    return pack_header(body, base_offset=0, records_count=len(sent), last_offset_delta=len(sent) - 1,
                       base_timestamp=first, max_timestamp=max(ts for ts, *_ in sent),
                       attributes=codec | (ATTR_TRANSACTIONAL if transactional else 0), producer_id=producer_id,
                       producer_epoch=producer_epoch, base_sequence=base_sequence, partition_leader_epoch=0) + body


def test_kafkajs_without_idempotence_is_accepted() -> None:
    """The bug of issue 21: producerId -1 with baseSequence 0 was refused ("a sequence number ... without a
    producer id"); Kafka reads the sequence only when the batch has a producer id."""
    sent = rows(5)
    batch = kafkajs_batch(sent, CompressionType.NONE)
    h = BatchHeader.parse(batch)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (-1, 0, 0)
    assert read_back(accepted(batch)) == expected(sent)


@pytest.mark.parametrize("n", [1, 50, 300])
@pytest.mark.parametrize("fields", [
    {"producer_epoch": 0}, {"producer_epoch": -1},                               # no idempotence
    {"producer_id": 99, "producer_epoch": 2, "base_sequence": 40},               # idempotent
    {"producer_id": 99, "producer_epoch": 2, "base_sequence": 0, "transactional": True},
], ids=["plain-epoch0", "plain-epoch-1", "idempotent", "transactional"])
@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_kafkajs_batches_are_accepted(codec: CompressionType, fields: dict, n: int) -> None:
    sent = rows(n, out_of_order=n == 50)
    assert read_back(accepted(kafkajs_batch(sent, codec, **fields))) == expected(sent)


# -- librdkafka (confluent-kafka, kcat): its encoder's layout ---------------------------------------------

#: Codecs as librdkafka writes them: gzip through zlib with the gzip wrapper, snappy as raw blocks, LZ4 as
#: the KIP-57 frame (correct header checksum, independent 64 KiB blocks, no content size or checksum),
#: zstd as one frame.
LIBRDKAFKA_CODECS: dict[CompressionType, Callable[[bytes], bytes]] = {
    CompressionType.NONE: lambda b: b,
    CompressionType.GZIP: gzip.compress,
    CompressionType.SNAPPY: lambda b: bytes(cramjam.snappy.compress_raw(b)),
    CompressionType.LZ4: lambda b: lz4.frame.compress(b, block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=False,
                                                      content_checksum=False, store_size=False),
    CompressionType.ZSTD: lambda b: zstandard.ZstdCompressor().compress(b),
}


def librdkafka_batch(sent: list[Row], codec: CompressionType, *, idempotent: bool, base_sequence: int = 0) -> bytes:
    """librdkafka's MessageSet v2 writer: BaseTimestamp the first message's (later deltas may be negative:
    applications set their own timestamps), MaxTimestamp the largest; without idempotence ProducerId -1,
    ProducerEpoch -1, BaseSequence -1; idempotent, the id and epoch from InitProducerId and sequences >= 0."""
    base = sent[0][0]
    body = LIBRDKAFKA_CODECS[codec](b"".join(record_v2(i, ts - base, k, v, list(hs))
                                             for i, (ts, k, v, hs) in enumerate(sent)))
    pid, epoch, seq = (1234, 0, base_sequence) if idempotent else (-1, -1, -1)
    return pack_header(body, base_offset=0, records_count=len(sent), last_offset_delta=len(sent) - 1,
                       base_timestamp=base, max_timestamp=max(ts for ts, *_ in sent), attributes=codec,
                       producer_id=pid, producer_epoch=epoch, base_sequence=seq, partition_leader_epoch=-1) + body


@pytest.mark.parametrize("n,value_size", [(1, 20), (50, 20), (300, 200)])  # 300 x ~1.6 KiB: several LZ4 blocks
@pytest.mark.parametrize("idempotent", [False, True], ids=["plain", "idempotent"])
@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_librdkafka_batches_are_accepted(codec: CompressionType, idempotent: bool, n: int, value_size: int) -> None:
    sent = rows(n, out_of_order=n == 50, value_size=value_size)
    assert read_back(accepted(librdkafka_batch(sent, codec, idempotent=idempotent, base_sequence=n))) == expected(sent)


def test_a_pre_kip57_lz4_frame_is_refused() -> None:
    """Kafka before 0.10 checksummed the LZ4 frame descriptor wrongly; for magic 2 Kafka's decoder checks it
    (and answers UNKNOWN_SERVER_ERROR, a documented deviation: INVALID_RECORD here)."""
    sent = rows(5)
    frame = bytearray(LIBRDKAFKA_CODECS[CompressionType.LZ4](b"".join(
        record_v2(i, ts - TS, k, v, list(hs)) for i, (ts, k, v, hs) in enumerate(sent))))
    frame[6] ^= 0xFF  # the header checksum after magic, FLG and BD
    batch = pack_header(bytes(frame), base_offset=0, records_count=5, last_offset_delta=4, base_timestamp=TS,
                        max_timestamp=TS + 4, attributes=CompressionType.LZ4, producer_id=-1, producer_epoch=-1,
                        base_sequence=-1, partition_leader_epoch=-1) + bytes(frame)
    assert refused(batch) == ErrorCode.INVALID_RECORD


# -- the Java client: Tidelog's own encoder writes its shape ---------------------------------------------

@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_java_client_batches_are_accepted(codec: CompressionType) -> None:
    sent = rows(200)
    batch = encode_batch(sent, compression=codec)  # producerId/epoch/sequence -1, partitionLeaderEpoch -1
    assert read_back(accepted(batch)) == expected(sent)


# -- what Kafka refuses, refused with Kafka's code --------------------------------------------------------

def refused(batch: bytes, config: LogConfig | None = None, now_ms: int | None = None) -> ErrorCode:
    with pytest.raises(TidelogError) as info:
        validate_produce(batch, config or LogConfig(), now_ms)
    assert str(info.value)
    return info.value.code


def patched(batch: bytes, **fields: int) -> bytes:
    """``batch`` with header fields replaced and its CRC recomputed (a client that writes them so)."""
    h = BatchHeader.parse(batch)
    keep = {name: getattr(h, name) for name in ("base_offset", "records_count", "last_offset_delta",
                                                "base_timestamp", "max_timestamp", "attributes", "producer_id",
                                                "producer_epoch", "base_sequence", "partition_leader_epoch")}
    return pack_header(batch[61:], **{**keep, **fields}) + batch[61:]


def magic(batch: bytes, value: int) -> bytes:
    out = bytearray(batch)
    out[16] = value
    return bytes(out)


def flipped(batch: bytes) -> bytes:
    out = bytearray(batch)
    out[-1] ^= 1
    return bytes(out)


N = 5
REFUSED: dict[str, tuple[Callable[[bytes], bytes], ErrorCode]] = {
    "control batch from a client": (lambda b: patched(b, attributes=BatchHeader.parse(b).attributes | ATTR_CONTROL
                                                      | ATTR_TRANSACTIONAL, producer_id=7, producer_epoch=0,
                                                      base_sequence=0), ErrorCode.INVALID_RECORD),
    "record count 0": (lambda b: patched(b, records_count=0), ErrorCode.INVALID_RECORD),
    "lastOffsetDelta not count - 1": (lambda b: patched(b, last_offset_delta=N + 3), ErrorCode.INVALID_RECORD),
    "producer id without a sequence": (lambda b: patched(b, producer_id=7, producer_epoch=0, base_sequence=-1),
                                       ErrorCode.INVALID_RECORD),
    "baseOffset not 0": (lambda b: patched(b, base_offset=42), ErrorCode.INVALID_RECORD),
    "more records declared than sent": (lambda b: patched(b, records_count=N + 1, last_offset_delta=N),
                                        ErrorCode.INVALID_RECORD),
    "fewer records declared than sent": (lambda b: patched(b, records_count=N - 1, last_offset_delta=N - 2),
                                         ErrorCode.INVALID_RECORD),
    "LogAppendTime set by the client": (lambda b: patched(b, attributes=BatchHeader.parse(b).attributes
                                                          | ATTR_TIMESTAMP_TYPE), ErrorCode.INVALID_TIMESTAMP),
    "magic 1 (produce v3+)": (lambda b: magic(b, 1), ErrorCode.INVALID_RECORD),
    "CRC mismatch": (flipped, ErrorCode.CORRUPT_MESSAGE),
}


@pytest.mark.parametrize("case", list(REFUSED))
@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.GZIP], ids=lambda c: c.name.lower())
def test_what_kafka_refuses_is_refused_with_kafkas_code(codec: CompressionType, case: str) -> None:
    good = kafka_python_batch(rows(N), codec, KAFKA_PYTHON_PRODUCERS["plain"])
    accepted(good)
    mutate, code = REFUSED[case]
    assert refused(mutate(good)) == code


def test_what_the_topic_refuses_is_refused_with_kafkas_code() -> None:
    sent = rows(N)  # record 3 has no key
    batch = kafka_python_batch(sent, CompressionType.NONE, KAFKA_PYTHON_PRODUCERS["plain"])
    assert refused(batch, LogConfig(max_message_bytes=len(batch) - 1)) == ErrorCode.MESSAGE_TOO_LARGE
    assert refused(batch, LogConfig(segment_bytes=len(batch) - 1)) == ErrorCode.RECORD_LIST_TOO_LARGE
    assert refused(batch, LogConfig(cleanup_policy="compact")) == ErrorCode.INVALID_RECORD  # no key
    bounded = LogConfig(extra={"message.timestamp.after.max.ms": 3_600_000})
    assert refused(batch, bounded, now_ms=TS - 3_600_001) == ErrorCode.INVALID_TIMESTAMP  # 1 h + 1 ms ahead
    accepted(batch, bounded, now_ms=TS)


def test_a_null_header_key_is_refused_with_kafkas_code() -> None:
    """No client API can write one (Java's RecordHeader refuses a null key); Kafka's broker refuses the
    negative header key length with INVALID_RECORD."""
    body = record_v2(0, 0, b"k", b"v", [(None, b"x")])
    batch = pack_header(body, base_offset=0, records_count=1, last_offset_delta=0, base_timestamp=TS,
                        max_timestamp=TS, attributes=0, producer_id=-1, producer_epoch=-1, base_sequence=-1,
                        partition_leader_epoch=-1) + body
    assert refused(batch) == ErrorCode.INVALID_RECORD


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_an_unknown_codec_is_refused(codec: int) -> None:
    """Kafka answers UNKNOWN_SERVER_ERROR (an uncaught IllegalArgumentException); Tidelog INVALID_RECORD, a
    documented deviation: both refuse, neither code is retriable."""
    good = kafka_python_batch(rows(N), CompressionType.NONE, KAFKA_PYTHON_PRODUCERS["plain"])
    assert refused(patched(good, attributes=codec)) == ErrorCode.INVALID_RECORD
