"""The topic's ``compression.type`` applied on the broker, as Kafka's LogValidator does.

``producer`` keeps each batch as the producer compressed it; any other value is
the codec every batch is stored with: a batch written with another codec is
decoded and re-encoded (by the builder, keeping the producer fields, the
timestamps and the offsets).
"""

from __future__ import annotations

from shared.records.builder import BatchBuilder
from shared.records.compression import CompressionType
from shared.records.decoder import decode_records
from shared.records.header import ATTR_COMPRESSION_MASK, BatchHeader

#: ``compression.type`` values that name no codec: keep the producer's.
PRODUCER = "producer"


def target_codec(compression_type: str | None) -> CompressionType | None:
    """The codec a topic's ``compression.type`` asks for, or None for ``producer``."""
    name = (compression_type or PRODUCER).strip().lower()
    if name == PRODUCER:
        return None
    if name in ("uncompressed", "none"):
        return CompressionType.NONE
    return CompressionType.parse(name)


def needs_recompression(h: BatchHeader, target: CompressionType | None) -> bool:
    return target is not None and h.attributes & ATTR_COMPRESSION_MASK != target


def recompress(h: BatchHeader, section: bytes, target: CompressionType) -> bytes:
    """The batch whose header is ``h`` and (decompressed, validated) records section is ``section``,
    re-encoded with ``target``; every other header field is kept."""
    builder = BatchBuilder(
        target, producer_id=h.producer_id, producer_epoch=h.producer_epoch, base_sequence=h.base_sequence,
        transactional=h.is_transactional, partition_leader_epoch=h.partition_leader_epoch,
    )
    records = decode_records(h, section)
    builder.extend_columns([r.timestamp for r in records], [r.key for r in records], [r.value for r in records],
                           [r.headers for r in records])
    return builder.build(h.base_offset)
