"""The checks a payload passes before a partition log writes any of it.

A replicated payload (from the leader) is checked batch by batch at the header
level: whole batches, magic, lengths, CRC, size. A produced one (from a client)
is checked as Kafka does (``shared.records.validate``, whose docstring lists
where Tidelog deliberately differs): the framing and CRC of every batch, then
every record of every batch; a batch whose maxTimestamp is not its records' max
is rewritten, as Kafka's LogValidator does; batches are recompressed when the
topic's ``compression.type`` names another codec (``shared.records.recompress``).
The topic's own rules: a topic whose ``cleanup.policy`` includes ``compact``
refuses records without a key (INVALID_RECORD); a CreateTime topic refuses
timestamps outside ``message.timestamp.before.max.ms`` / ``after.max.ms`` when
the caller gives the time (INVALID_TIMESTAMP); a batch larger than
``segment.bytes`` is RECORD_LIST_TOO_LARGE, as in Kafka (whose payload is one batch).
"""

from __future__ import annotations

from shared.config import LONG_MAX, LogConfig
from shared.errors import CorruptRecordError, ErrorCode, InvalidRecordError, RecordTooLargeError
from shared.records.columns import decode_columns
from shared.records.header import HEADER_SIZE, BatchHeader, check_batch
from shared.records.recompress import needs_recompression, recompress, target_codec
from shared.records.validate import (
    check_timestamp_bounds,
    produced_batches,
    validate_produced,
    with_max_timestamp,
)


def validate_batches(records: bytes | bytearray | memoryview, max_message_bytes: int) -> list[tuple[int, BatchHeader]]:
    """Check every batch of a produce/replication payload before anything is written.

    The payload must be one or more whole, valid v2 batches and nothing else.
    Raises ``CorruptRecordError`` or ``RecordTooLargeError`` for the whole payload.
    """
    n = len(records)
    if n == 0:
        raise CorruptRecordError("empty record set")
    out: list[tuple[int, BatchHeader]] = []
    pos = 0
    while pos < n:
        if n - pos < HEADER_SIZE:
            raise CorruptRecordError(f"{n - pos} trailing bytes are not a whole batch")
        header = check_batch(records, pos)
        if header.size > max_message_bytes:
            raise RecordTooLargeError(
                f"batch of {header.size} bytes exceeds max.message.bytes={max_message_bytes}"
            )
        out.append((pos, header))
        pos += header.size
    return out


def validate_produce(
    records: bytes | bytearray | memoryview, config: LogConfig, now_ms: int | None = None
) -> tuple[memoryview, list[tuple[int, BatchHeader]]]:
    """Check a produce payload as Kafka does, before anything is written: the framing and CRC of every
    batch, then every record of every batch (``shared.records.validate``), then the topic's rules. With
    ``now_ms`` (the broker's clock), record timestamps are held to the topic's
    ``message.timestamp.before.max.ms`` / ``after.max.ms``. Returns the payload to append (the same bytes
    unless a batch was rewritten or recompressed) and its batches; raises for the whole payload."""
    view = memoryview(records)
    batches = produced_batches(view, config.max_message_bytes)
    target = target_codec(config.extra.get("compression.type"))
    compacted = "compact" in config.cleanup_policy.split(",")
    bounds = None if now_ms is None or config.log_append_time else _timestamp_bounds(config, now_ms)
    parts: list[bytes | memoryview] = []
    changed = False
    for pos, h in batches:
        section = validate_produced(view, pos, h)
        if compacted:
            check_keyed(h, section.data, section.start, section.stop)
        if bounds is not None:
            check_timestamp_bounds(h, section, *bounds)
        if needs_recompression(h, target):
            assert target is not None  # needs_recompression; the builder writes the records' max timestamp
            parts.append(recompress(h, bytes(section.data[section.start:section.stop]), target))
            changed = True
        elif section.max_timestamp != h.max_timestamp:  # Kafka sets it rather than refuse the batch
            parts.append(with_max_timestamp(view, pos, h, section.max_timestamp))
            changed = True
        else:
            parts.append(view[pos:pos + h.size])
    if changed:
        view = memoryview(b"".join(parts))
        batches = validate_batches(view, config.max_message_bytes)
    # Kafka refuses a produce payload larger than segment.bytes; its payload is one batch per partition
    # (Produce v3+), while a gRPC payload may carry several: the rule holds per batch.
    for _, h in batches:
        if h.size > config.segment_bytes:
            raise RecordTooLargeError(f"a batch of {h.size} bytes exceeds segment.bytes={config.segment_bytes}",
                                      code=ErrorCode.RECORD_LIST_TOO_LARGE)
    return view, batches


def _timestamp_bounds(config: LogConfig, now_ms: int) -> tuple[int, int, int] | None:
    """``(now, message.timestamp.before.max.ms, message.timestamp.after.max.ms)`` when the topic bounds
    either (Kafka's default, Long.MAX_VALUE, is no bound); None otherwise."""
    before = int(config.extra.get("message.timestamp.before.max.ms", LONG_MAX))
    after = int(config.extra.get("message.timestamp.after.max.ms", LONG_MAX))
    return None if before >= LONG_MAX and after >= LONG_MAX else (now_ms, before, after)


def check_keyed(h: BatchHeader, section: bytes | memoryview, start: int, stop: int) -> None:
    """Refuse a batch with a keyless record for a compacted topic (Kafka: "Compacted topic cannot accept
    message without key"): compaction keeps the latest record per key, and a keyless one has none."""
    data = section if isinstance(section, bytes) else bytes(section[start:stop])
    if data is not section:
        start, stop = 0, len(data)
    found = decode_columns(h, data, start=start, end=stop).positions
    if found.key_null is not None:
        index = int(found.key_null.argmax())
        raise InvalidRecordError(
            f"Compacted topic cannot accept message without key (record {index} of the batch)")
