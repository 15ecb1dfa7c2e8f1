"""The checks a payload passes before a partition log writes any of it.

A replicated payload (from the leader) is checked batch by batch at the header
level: whole batches, magic, lengths, CRC, size. A produced one (from a client)
is checked as Kafka's LogValidator does: every record of every batch
(``shared.records.validate``), then recompressed when the topic's
``compression.type`` names another codec (``shared.records.recompress``).
"""

from __future__ import annotations

from shared.config import LogConfig
from shared.errors import CorruptRecordError, RecordTooLargeError
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
    parts: list[bytes | memoryview] = []
    changed = False
    for pos, h in batches:
        section, start, stop = validate_produced(view, pos, h)
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
