"""The cleaner's only contact with the record-batch codec (``shared.records``).

Batches are written through the project's one encoder, ``shared.records.builder.BatchBuilder``:

* ``encode_kept``: a batch rebuilt around the records compaction kept (given as columns), with
  the original base offset, lastOffsetDelta (offset deltas keep their gaps), producer id,
  epoch and base sequence, partition leader epoch, transactional flag, timestamp type and
  compression codec and control flag (a transaction marker keeps it); with a delete horizon,
  attribute bit 6 is set and ``baseTimestamp``
  holds the horizon (record timestamp deltas are then relative to it), as Kafka's v2 format
  does; a LogAppendTime batch keeps its maxTimestamp;
* ``encode_retained``: the same from ``Record`` objects (tests, tools);
* ``encode_empty``: the header-only batch Kafka keeps for a producer's last batch when
  compaction removed all its records (base/last offset, sequence and max timestamp kept).

``read_batches`` / ``read_headers`` decode a segment the slow way, for tests and tools; the
cleaning core reads segments through ``scan``. Pure: bytes in, bytes out.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from shared.records.builder import BatchBuilder
from shared.records.decoder import decode_batch
from shared.records.header import BatchHeader, iter_batches
from shared.records.record import Header, Record

__all__ = ["BatchHeader", "Record", "encode_empty", "encode_kept", "encode_retained", "read_batches", "read_headers",
           "read_headers_unchecked"]


def read_headers(data: bytes | memoryview) -> Iterator[tuple[int, BatchHeader]]:
    """``(position, header)`` of every whole batch, CRCs checked."""
    return iter_batches(data, validate=True)


def read_headers_unchecked(data: bytes | memoryview) -> Iterator[tuple[int, BatchHeader]]:
    """``(position, header)`` of every whole batch without checking CRCs: for sizing only (what is then
    read from the batches goes through a checked scan)."""
    return iter_batches(data, validate=False)


def read_batches(data: bytes | memoryview) -> Iterator[tuple[int, BatchHeader, list[Record]]]:
    """Every whole batch with its decoded records; a damaged batch raises ``CorruptRecordError``."""
    for pos, _ in iter_batches(data, validate=False):
        header, records = decode_batch(data, pos, validate=True)
        yield pos, header, records


def _builder(h: BatchHeader, delete_horizon_ms: int | None, compressed: bool) -> BatchBuilder:
    return BatchBuilder(
        h.compression if compressed else 0, producer_id=h.producer_id, producer_epoch=h.producer_epoch,
        base_sequence=h.base_sequence, transactional=h.is_transactional, control=h.is_control,
        timestamp_type=h.timestamp_type,
        partition_leader_epoch=h.partition_leader_epoch, delete_horizon_ms=delete_horizon_ms)


def encode_kept(h: BatchHeader, offsets: Sequence[int], timestamps: Sequence[int], keys: Sequence[bytes | None],
                values: Sequence[bytes | None], headers: Sequence[Sequence[Header] | None] | None,
                delete_horizon_ms: int | None) -> bytes:
    """Rebuild batch ``h`` with only the given records (non-empty, in offset order)."""
    builder = _builder(h, delete_horizon_ms, True)
    lat = h.log_append_time
    if lat is not None:  # every record has the batch's time: its delta from the base timestamp
        timestamps = [builder.base_ts if delete_horizon_ms is not None else lat] * len(offsets)
    base = h.base_offset
    builder.extend_columns(timestamps, keys, values, headers, offset_deltas=[o - base for o in offsets])
    return builder.build(base, last_offset_delta=h.last_offset_delta, max_timestamp=lat)


def encode_retained(h: BatchHeader, records: Sequence[Record], delete_horizon_ms: int | None) -> bytes:
    """Rebuild batch ``h`` with only ``records`` (non-empty, in offset order)."""
    return encode_kept(h, [r.offset for r in records], [r.timestamp for r in records], [r.key for r in records],
                       [r.value for r in records], [r.headers for r in records], delete_horizon_ms)


def encode_empty(h: BatchHeader) -> bytes:
    """The header-only batch that keeps a producer's last batch after all its records went."""
    return _builder(h, None, False).build(h.base_offset, last_offset_delta=h.last_offset_delta,
                                          max_timestamp=h.max_timestamp)
