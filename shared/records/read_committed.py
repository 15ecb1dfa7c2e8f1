"""read_committed on the client side: which fetched batches a consumer may hand out.

A read_committed fetch returns the log up to the last stable offset together with the aborted
transactions that range overlaps (producer id, first offset). Kafka's consumer then walks the batches
in offset order (``CompletedFetch.nextFetchedRecord``):

- an aborted transaction becomes *active* once a batch reaches its first offset;
- a transactional batch of a producer with an active aborted transaction is skipped;
- that producer's ABORT marker ends it; control batches are never handed out.

Pure: headers and marker types in, a keep/skip decision out.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from shared.records.decoder import control_record_type, decode_records, records_section
from shared.records.header import BatchHeader
from shared.records.record import CONTROL_ABORT


class AbortedFilter:
    def __init__(self, aborted: Iterable[tuple[int, int]]) -> None:
        """``aborted``: (producer_id, first_offset) of each aborted transaction the fetch returned."""
        self._pending = [(first, pid) for pid, first in aborted]
        heapq.heapify(self._pending)
        self._active: set[int] = set()

    def keep(self, header: BatchHeader, control_type: int | None = None) -> bool:
        """Whether the batch's records go to the application. For a control batch pass the marker's
        type (``control_record_type`` of its record)."""
        if header.producer_id >= 0:
            while self._pending and self._pending[0][0] <= header.last_offset:
                self._active.add(heapq.heappop(self._pending)[1])
        if header.is_control:
            if control_type == CONTROL_ABORT:
                self._active.discard(header.producer_id)
            return False
        return not (header.is_transactional and header.producer_id in self._active)


def marker_type(data: bytes | memoryview, pos: int, header: BatchHeader) -> int | None:
    """The control type of the control batch at ``pos`` (None if it holds no record)."""
    records = decode_records(header, records_section(data, header, pos))
    return control_record_type(records[0]) if records else None
