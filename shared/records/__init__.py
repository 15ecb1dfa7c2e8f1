"""Kafka's RecordBatch v2, one job per module.

- ``header``: the 61-byte batch header — parse, check, walk batches, pack, patch (the only module
  that knows the layout).
- ``builder``: the only encoder (``BatchBuilder``, ``encode_batch``).
- ``decoder``: records section -> ``Record`` objects.
- ``columns`` / ``positions``: the numpy column path (Arrow/Spark reader, vectorised walk).
- ``validate``: what the broker checks in every produced batch (as Kafka's LogValidator).
- ``compression``, ``varint``, ``record``: codecs, zig-zag varints, the ``Record`` type.

The names most callers need are re-exported here.
"""

from shared.records.builder import BatchBuilder, build_control_batch, encode_batch, encode_batch_columns
from shared.records.decoder import control_record_type, decode_batch, decode_records, iter_records, records_section
from shared.records.header import BatchHeader, check_batch, iter_batches
from shared.records.record import CONTROL_ABORT, CONTROL_COMMIT, Header, Record

__all__ = [
    "CONTROL_ABORT", "CONTROL_COMMIT", "BatchBuilder", "BatchHeader", "Header", "Record", "build_control_batch",
    "check_batch", "control_record_type", "decode_batch", "decode_records", "encode_batch", "encode_batch_columns",
    "iter_batches", "iter_records", "records_section",
]
