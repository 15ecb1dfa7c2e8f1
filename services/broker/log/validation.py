"""The checks a payload passes before a partition log writes any of it.

A replicated payload (from the leader) is checked batch by batch at the header
level: whole batches, magic, lengths, CRC, size. A produced one (from a client)
is checked as Kafka's LogValidator does: every record of every batch
(``shared.records.validate``), then recompressed when the topic's
``compression.type`` names another codec (``shared.records.recompress``). A topic
whose ``cleanup.policy`` includes ``compact`` refuses records without a key, as
Kafka's LogValidator does (INVALID_RECORD).
"""

from __future__ import annotations

from shared.config import LogConfig
from shared.errors import CorruptRecordError, InvalidRecordError, RecordTooLargeError
from shared.records.columns import decode_columns
from shared.records.header import HEADER_SIZE, BatchHeader, check_batch
from shared.records.recompress import needs_recompression, recompress, target_codec
from shared.records.validate import validate_produced


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
    records: bytes | bytearray | memoryview, config: LogConfig
) -> tuple[memoryview, list[tuple[int, BatchHeader]]]:
    """Check a produce payload as Kafka's LogValidator does, before anything is written: the batch
    headers and CRCs, then every record of every batch (``shared.records.validate``). Batches whose codec
    differs from the topic's ``compression.type`` are recompressed. Returns the payload to append (the
    same bytes unless something was recompressed) and its batches; raises for the whole payload."""
    view = memoryview(records)
    batches = validate_batches(view, config.max_message_bytes)
    target = target_codec(config.extra.get("compression.type"))
    compacted = "compact" in config.cleanup_policy.split(",")
    parts: list[bytes | memoryview] = []
    changed = False
    for pos, h in batches:
        section, start, stop = validate_produced(view, pos, h)
        if compacted:
            check_keyed(h, section, start, stop)
        if needs_recompression(h, target):
            assert target is not None
            parts.append(recompress(h, bytes(section[start:stop]), target))
            changed = True
        else:
            parts.append(view[pos:pos + h.size])
    if not changed:
        return view, batches
    out = memoryview(b"".join(parts))
    return out, validate_batches(out, config.max_message_bytes)


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
