"""The columnar path: a batch's records as numpy columns of positions (no object per record).

What the Arrow/Spark reader needs. Same validation as ``decoder.decode_records``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from shared.errors import CorruptRecordError
from shared.records.decoder import decode_headers
from shared.records.header import ATTR_TIMESTAMP_TYPE, HEADER_SIZE, BatchHeader
from shared.records.positions import (
    RecordPositions,
    fields_at,
    plain_fields,
    positions_of,
    record_positions,
    walk_lengths,
)
from shared.records.record import Header
from shared.records.varint import decode_zigzag


class Columns:
    """A batch's records as columns of positions: what the columnar (Arrow) path needs.

    ``positions`` holds numpy arrays of offsets, timestamps and key/value byte spans
    into ``data`` (see ``positions.RecordPositions``); ``headers`` is decoded only when
    asked for.
    """

    __slots__ = ("data", "positions", "headers")

    def __init__(self, data: bytes, positions: RecordPositions, headers: list[list[Header]] | None) -> None:
        self.data = data
        self.positions = positions
        self.headers = headers

    def __len__(self) -> int:
        return len(self.positions)


def decode_columns(header: BatchHeader, data: bytes, *, with_headers: bool = False,
                   start: int = 0, end: int | None = None, empty_headers_as_none: bool = False) -> Columns:
    """Decode a records section into positions instead of objects (no per-record bytes copies).

    ``data[start:end]`` is the records section; for an uncompressed batch the caller can pass
    the whole fetched buffer with the section's bounds, so spans point into that buffer.
    Same validation as ``decode_records``: every record must end where its length says.
    ``empty_headers_as_none``: when no record has headers, ``headers`` is None even if asked for
    (saves a list per record; the Arrow path asks so).
    """
    stop = len(data) if end is None else end
    found = record_positions(data, start, stop, header.records_count, header.base_offset, header.base_timestamp,
                             header.max_timestamp if header.attributes & ATTR_TIMESTAMP_TYPE else None)
    if found is not None:
        empty = with_headers and not empty_headers_as_none
        return Columns(data, found, [[] for _ in range(len(found))] if empty else None)
    try:
        offsets, stamps, kspans, vspans, hdrs = _decode_columns(header, data, with_headers, start, stop)
    except IndexError as exc:
        raise CorruptRecordError(
            f"records of batch at offset {header.base_offset} run past the end of the batch"
        ) from exc
    if empty_headers_as_none and hdrs is not None and not any(hdrs):
        hdrs = None
    return Columns(data, _as_positions(offsets, stamps, kspans, vspans), hdrs)


def _as_positions(offsets: list[int], stamps: list[int], kspans: list[tuple[int, int] | None],
                  vspans: list[tuple[int, int] | None]) -> RecordPositions:
    def spans(sp: list[tuple[int, int] | None]) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        null = np.array([x is None for x in sp], bool)
        pairs = np.array([(0, 0) if x is None else x for x in sp], np.int64).reshape(-1, 2)
        return pairs[:, 0], pairs[:, 1], null if null.any() else None

    ks, ke, kn = spans(kspans)
    vs, ve, vn = spans(vspans)
    return RecordPositions(np.array(offsets, np.int64), np.array(stamps, np.int64), ks, ke, kn, vs, ve, vn)


def _decode_columns(
    header: BatchHeader, data: bytes, with_headers: bool, start: int, stop: int
) -> tuple[list[int], list[int], list[tuple[int, int] | None], list[tuple[int, int] | None], list[list[Header]] | None]:
    offsets: list[int] = []
    stamps: list[int] = []
    kspans: list[tuple[int, int] | None] = []
    vspans: list[tuple[int, int] | None] = []
    hdrs: list[list[Header]] | None = [] if with_headers else None
    base_offset = header.base_offset
    base_ts = header.base_timestamp
    log_append_ts = header.max_timestamp if header.attributes & ATTR_TIMESTAMP_TYPE else None
    dz = decode_zigzag
    pos = start
    kappend, vappend = kspans.append, vspans.append
    for _ in range(header.records_count):
        b = data[pos]
        if b < 0x80 and not b & 1:
            length = b >> 1
            pos += 1
        else:
            b2 = data[pos + 1]
            if b2 < 0x80 and not b & 1:
                length = ((b & 0x7F) | (b2 << 7)) >> 1
                pos += 2
            else:
                length, pos = dz(data, pos)
                if length < 0:
                    raise CorruptRecordError(f"negative record length in the batch at offset {base_offset}")
        rec_end = pos + length
        b = data[pos + 1]
        if b < 0x80:
            td = (b >> 1) ^ -(b & 1)
            pos += 2
        else:
            td, pos = dz(data, pos + 1)
        b = data[pos]
        if b < 0x80 and not b & 1:
            od = b >> 1
            pos += 1
        else:
            b2 = data[pos + 1]
            if b2 < 0x80 and not b & 1:
                od = ((b & 0x7F) | (b2 << 7)) >> 1
                pos += 2
            else:
                od, pos = dz(data, pos)
                if od < 0:
                    raise CorruptRecordError(f"negative offset delta in the batch at offset {base_offset}")
        b = data[pos]
        if b < 0x80:
            pos += 1
            if b & 1:
                if b != 1:
                    raise CorruptRecordError(f"negative key length at offset {base_offset + od}")
                kappend(None)
            else:
                kappend((pos, pos + (b >> 1)))
                pos += b >> 1
        else:
            klen, pos = dz(data, pos)
            if klen < 0:
                raise CorruptRecordError(f"negative key length at offset {base_offset + od}")
            kappend((pos, pos + klen))
            pos += klen
        b = data[pos]
        if b < 0x80:
            pos += 1
            if b & 1:
                if b != 1:
                    raise CorruptRecordError(f"negative value length at offset {base_offset + od}")
                vappend(None)
            else:
                vappend((pos, pos + (b >> 1)))
                pos += b >> 1
        else:
            b2 = data[pos + 1]
            if b2 < 0x80 and not b & 1:
                vlen = ((b & 0x7F) | (b2 << 7)) >> 1
                pos += 2
            else:
                vlen, pos = dz(data, pos)
                if vlen < 0:
                    if vlen != -1:
                        raise CorruptRecordError(f"negative value length at offset {base_offset + od}")
                    vappend(None)
                    vlen = -1
            if vlen >= 0:
                vappend((pos, pos + vlen))
                pos += vlen
        if data[pos] == 0:
            pos += 1
            if hdrs is not None:
                hdrs.append([])
        else:
            hcount, pos = dz(data, pos)
            if hcount < 0:
                raise CorruptRecordError(f"negative header count at offset {base_offset + od}")
            hs, pos = decode_headers(data, pos, hcount)
            if hdrs is not None:
                hdrs.append(hs)
        if pos != rec_end:
            raise CorruptRecordError(f"record at offset {base_offset + od} does not end where its length says")
        offsets.append(base_offset + od)
        stamps.append(base_ts + td if log_append_ts is None else log_append_ts)
    if pos != stop:
        raise CorruptRecordError(f"batch at offset {base_offset} has {stop - pos} bytes after its last record")
    return offsets, stamps, kspans, vspans, hdrs


def decode_columns_many(data: bytes, batches: Sequence[tuple[int, BatchHeader]]) -> tuple[Columns, np.ndarray] | None:
    """The records of several uncompressed batches of one buffer as one ``Columns``, and each record's
    timestamp type; None when one of them is not plain (headers, long varints, a damaged batch):
    then decode them one by one with ``decode_columns``, which says what is wrong.

    The fields are read in C where the extension is built (``plain_fields``); otherwise, or when a batch
    is not plain there, each batch's record lengths are walked as ``decode_columns`` does, but every other
    field is found for all the batches' records at once, so numpy's fixed cost per call is paid once per
    fetch rather than once per batch. Same checks: every record ends where its length says, and each
    batch's records end where the batch does.
    """
    counts = np.empty(len(batches), np.int64)
    base_offsets = np.empty(len(batches), np.int64)
    base_stamps = np.empty(len(batches), np.int64)
    append_time = np.zeros(len(batches), bool)
    sections = []
    for i, (pos, h) in enumerate(batches):
        start, stop = pos + HEADER_SIZE, pos + h.size
        if h.records_count < 1 or stop - start < h.records_count * 7:
            return None
        sections.append((start, stop, h.records_count))
        counts[i] = h.records_count
        base_offsets[i] = h.base_offset
        if h.attributes & ATTR_TIMESTAMP_TYPE:
            append_time[i] = True
            base_stamps[i] = h.max_timestamp
        else:
            base_stamps[i] = h.base_timestamp
    if not sections:
        return None
    found = _compiled_positions(data, sections)
    if found is None:
        found = _walked_positions(data, sections)
        if found is None:
            return None
    found.offsets += np.repeat(base_offsets, counts)
    stamps = found.timestamps + np.repeat(base_stamps, counts)
    if append_time.any():  # LogAppendTime: every record has the batch's max timestamp
        stamps = np.where(np.repeat(append_time, counts), np.repeat(base_stamps, counts), stamps)
    found.timestamps = stamps
    return Columns(data, found, None), np.repeat(append_time.astype(np.int32), counts)


def _compiled_positions(data: bytes, sections: Sequence[tuple[int, int, int]]) -> RecordPositions | None:
    """Every section's fields read in C (``plain_fields``), offsets and timestamps as deltas; None if one
    section is not plain (or the extension is not built)."""
    rows = []
    for start, stop, count in sections:
        fields = plain_fields(data, start, stop, count)
        if fields is None:
            return None
        rows.append(fields)
    return positions_of(rows[0] if len(rows) == 1 else np.concatenate(rows, axis=1), 0, 0, None)


def _walked_positions(data: bytes, sections: Sequence[tuple[int, int, int]]) -> RecordPositions | None:
    """The same with numpy: each section's record lengths walked, then every field read at once."""
    arr = np.frombuffer(data, np.uint8)
    starts, ends = [], []
    for start, stop, count in sections:
        walked = walk_lengths(data, arr, start, stop, count)
        if walked is None:
            return None
        starts.append(walked[0])
        ends.append(walked[1])
    one = len(starts) == 1
    return fields_at(arr, starts[0] if one else np.concatenate(starts), ends[0] if one else np.concatenate(ends),
                     0, 0, None)
