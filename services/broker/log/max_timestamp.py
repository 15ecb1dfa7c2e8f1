"""ListOffsets with timestamp -3 (``MAX_TIMESTAMP``, KIP-734): the record with the largest timestamp.

Read-only over a ``PartitionLog``: the segment with the largest max timestamp
(the first such, as Kafka's ``maxBy``), its first batch reaching that
timestamp (time index), then the first record in it carrying the timestamp.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shared.records import iter_records

if TYPE_CHECKING:
    from services.broker.log.partition_log import PartitionLog

MAX_TIMESTAMP = -3


def offset_of_max_timestamp(log: PartitionLog) -> tuple[int, int] | None:
    """``(offset, timestamp)`` of the first record holding the log's largest timestamp, or None."""
    best = None
    for seg in log.segments:
        if seg.max_timestamp >= 0 and (best is None or seg.max_timestamp > best.max_timestamp):
            best = seg
    if best is None:
        return None
    bp = best.find_timestamp(best.max_timestamp)
    if bp is None:
        return None
    for record in iter_records(best.read_at(bp.position, bp.header.size)):
        if record.timestamp == best.max_timestamp and record.offset >= log.log_start_offset:
            return record.offset, record.timestamp
    return None
