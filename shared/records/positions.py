"""Where each record's fields lie in a records section, found with few Python steps per record.

Decoding a record means reading five varints and cutting two byte strings. Done
record by record in Python that is ~40 bytecodes each. Here only the record
lengths are walked in Python (each record's start depends on the one before);
every other field is decoded for all records of the batch at once with numpy:
attributes are skipped, then the timestamp delta, offset delta, key length and
value length varints are read at vectors of positions, each position advancing
by the varint's size. A batch qualifies when it has at least
``MIN_VECTOR_RECORDS`` records, its varints are at most three bytes (lengths
below 1 MiB) and no record has headers; otherwise, and whenever the result does
not line up exactly with the record lengths (a damaged batch), the caller uses
the record-by-record decoder, which also reports what is wrong.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from itertools import chain

import numpy as np  # OPENBLAS_NUM_THREADS is set in shared/__init__.py, before any numpy import

from shared.errors import CorruptRecordError
from shared.records.compiled import speedups
from shared.records.varint import decode_zigzag

#: The compiled field reader (``_speedups.c``: ``plain_fields``), None where the extension is not built
#: (the tests set it to None to run the numpy walk)
compiled_fields = getattr(speedups, "plain_fields", None)

#: Below this many records per batch the fixed cost of the numpy calls outweighs the gain.
MIN_VECTOR_RECORDS = 16


@dataclass(slots=True)
class RecordPositions:
    """Per-record offsets, timestamps and ``[start, end)`` byte spans of keys and values.

    A null key or value has an empty span and ``True`` in ``key_null`` / ``value_null``
    (which are ``None`` when the batch has no nulls).
    """

    offsets: np.ndarray
    timestamps: np.ndarray
    key_start: np.ndarray
    key_end: np.ndarray
    key_null: np.ndarray | None
    value_start: np.ndarray
    value_end: np.ndarray
    value_null: np.ndarray | None

    def __len__(self) -> int:
        return len(self.offsets)


def read_varints(arr: np.ndarray, p: np.ndarray, last: int) -> tuple[np.ndarray, np.ndarray | int] | None:
    """Zigzag varints of up to three bytes at positions ``p``: ``(values, sizes)``, or None if longer."""
    b0 = arr[p].astype(np.int64)
    c0 = b0 >= 0x80
    if not c0.any():
        return (b0 >> 1) ^ -(b0 & 1), 1
    b1 = arr[np.minimum(p + 1, last)].astype(np.int64)
    c1 = c0 & (b1 >= 0x80)
    raw = (b0 & 0x7F) | np.where(c0, (b1 & 0x7F) << 7, 0)
    if c1.any():
        b2 = arr[np.minimum(p + 2, last)].astype(np.int64)
        if (c1 & (b2 >= 0x80)).any():
            return None
        raw |= np.where(c1, b2 << 14, 0)
    return (raw >> 1) ^ -(raw & 1), 1 + c0 + c1


#: A run of records of one length is followed with numpy once it is at least this long.
_MIN_RUN = 8
#: At most this many records are checked per run step: a walk over many batches' records (the
#: cleaner walks a whole segment) would otherwise compare the whole rest of the data at every run.
_MAX_RUN_CHECK = 2048


def walk_lengths(data: bytes | memoryview, arr: np.ndarray, start: int, stop: int,
          count: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Where each record's body starts and ends: ``count`` records from ``start`` must end at ``stop``.

    Each record starts where the one before ends, so the walk is sequential. But records often
    share one length for long runs (fixed-size payloads: a length changes only when a varint of
    the offset or timestamp delta grows a byte). So after reading a record's length varint, the
    next records are assumed to have the same one: their starts follow at a fixed stride, and
    numpy checks all of those length varints at once, byte for byte. The run ends at the first
    record whose varint differs, which is then read as usual. Exact by construction: a record at
    a checked position starts where the previous one (of the run's length) ends. Short runs
    (varying lengths) are walked record by record, as before.
    """
    starts: list[np.ndarray] = []
    ends: list[np.ndarray] = []
    pos = start
    i = 0
    dz = decode_zigzag
    scalar_until = 0  # walk this many records one by one before trying a run again
    run_cap = _MAX_RUN_CHECK
    s_list: list[int] = []
    e_list: list[int] = []
    s_add, e_add = s_list.append, e_list.append
    try:
        while i < count:
            b = data[pos]
            if b < 0x80:
                if b & 1:  # negative
                    return None
                length, size = b >> 1, 1
            elif data[pos + 1] < 0x80:
                if b & 1:
                    return None
                length, size = ((b & 0x7F) | (data[pos + 1] << 7)) >> 1, 2
            else:
                length, after = dz(data, pos)
                size = after - pos
            if length <= 0:
                return None
            nxt = pos + size + length
            # The next record may have the same length (its first byte matches): try a run.
            if nxt < stop and data[nxt] == b and i >= scalar_until and count - i >= _MIN_RUN:
                stride = size + length
                k = min(count - i, (stop - pos) // stride, run_cap)
                if k >= _MIN_RUN:
                    cand = pos + stride * np.arange(k, dtype=np.int64)
                    same = arr[cand] == arr[pos]
                    for j in range(1, size):
                        same &= arr[cand + j] == arr[pos + j]
                    m = int(k if same.all() else np.argmin(same))  # records in the run (the first always matches)
                    run_cap = min(max(2 * m, 1024), _MAX_RUN_CHECK)  # about the last run's length
                    if m >= _MIN_RUN:
                        if s_list:
                            starts.append(np.array(s_list, np.int64))
                            ends.append(np.array(e_list, np.int64))
                            s_list.clear()
                            e_list.clear()
                        body = cand[:m] + size
                        starts.append(body)
                        ends.append(body + length)
                        pos += m * stride
                        i += m
                        continue
                scalar_until = i + 4 * _MIN_RUN
            s_add(pos + size)
            e_add(nxt)
            pos = nxt
            i += 1
    except (IndexError, CorruptRecordError):  # the record-by-record decoder names the fault
        return None
    if pos != stop:
        return None
    if s_list:
        starts.append(np.array(s_list, np.int64))
        ends.append(np.array(e_list, np.int64))
    if len(starts) == 1:
        return starts[0], ends[0]
    return np.concatenate(starts), np.concatenate(ends)


def record_positions(
    data: bytes | memoryview, start: int, stop: int, count: int, base_offset: int, base_timestamp: int,
    log_append_time: int | None,
) -> RecordPositions | None:
    """Positions of the ``count`` records in ``data[start:stop]``, or None (use the record-by-record decoder)."""
    if count < MIN_VECTOR_RECORDS or stop - start < count * 7:
        return None
    fields = plain_fields(data, start, stop, count)
    if fields is not None:
        return positions_of(fields, base_offset, base_timestamp, log_append_time)
    arr = np.frombuffer(data, np.uint8)
    walked = walk_lengths(data, arr, start, stop, count)
    if walked is None:
        return None
    return fields_at(arr, walked[0], walked[1], base_offset, base_timestamp, log_append_time)


def plain_fields(data: bytes | memoryview, start: int, stop: int, count: int) -> np.ndarray | None:
    """The fields of ``count`` records without headers in ``data[start:stop]``, read in C: six rows of
    ``count`` int64 (timestamp delta, offset delta, key start, key length, value start, value length, -1
    for null); None where the extension is missing or a record is not plain (the numpy walk decides)."""
    if compiled_fields is None:
        return None
    out = np.empty((6, count), np.int64)
    return out if compiled_fields(data, start, stop, count, out) else None


def positions_of(fields: np.ndarray, base_offset: int | np.ndarray, base_timestamp: int | np.ndarray,
                 log_append_time: int | None) -> RecordPositions:
    """``RecordPositions`` from ``plain_fields`` rows (bases: one per record, or one for all)."""
    ts_delta, off_delta, key_start, key_len, value_start, value_len = fields
    key_null = key_len < 0
    value_null = value_len < 0
    timestamps = (np.full(len(ts_delta), log_append_time, np.int64) if log_append_time is not None
                  else ts_delta + base_timestamp)
    return RecordPositions(
        offsets=off_delta + base_offset, timestamps=timestamps,
        key_start=key_start, key_end=key_start + np.maximum(key_len, 0), key_null=key_null if key_null.any() else None,
        value_start=value_start, value_end=value_start + np.maximum(value_len, 0),
        value_null=value_null if value_null.any() else None,
    )


def fields_at(arr: np.ndarray, s: np.ndarray, e: np.ndarray, base_offset: int, base_timestamp: int,
              log_append_time: int | None) -> RecordPositions | None:
    """Every record's fields, given where each record's body starts (``s``) and ends (``e``) in ``arr``
    (from ``walk_lengths``, one or several records sections of one buffer); None when a record is not plain
    (headers, varints over three bytes) or does not end exactly where its length says."""
    count = len(s)
    if not count or (e <= s).any() or e[-1] > len(arr):
        return None
    last = len(arr) - 1
    p = s + 1  # the attributes byte is unused
    fields = []
    for _ in range(3):  # timestamp delta, offset delta, key length
        got = read_varints(arr, np.minimum(p, last), last)
        if got is None:
            return None
        fields.append(got[0])
        p = p + got[1]
    ts_delta, off_delta, key_len = fields
    key_start = p
    key_end = key_start + np.maximum(key_len, 0)
    got = read_varints(arr, np.minimum(key_end, last), last)
    if got is None:
        return None
    value_len, size = got
    value_start = key_end + size
    value_end = value_start + np.maximum(value_len, 0)
    # No headers (a zero count, one byte) and the record ends exactly where its length says.
    if not (value_end + 1 == e).all() or arr[value_end].any() or (key_len < -1).any() or (value_len < -1).any():
        return None
    if (off_delta < 0).any():  # corrupt: the record-by-record decoder says so
        return None
    key_null = key_len < 0
    value_null = value_len < 0
    timestamps = (np.full(count, log_append_time, np.int64) if log_append_time is not None
                  else ts_delta + base_timestamp)
    return RecordPositions(
        offsets=off_delta + base_offset, timestamps=timestamps,
        key_start=key_start, key_end=key_end, key_null=key_null if key_null.any() else None,
        value_start=value_start, value_end=value_end, value_null=value_null if value_null.any() else None,
    )


#: Above one run per this many records, cutting with slices is cheaper than with struct.
_RECORDS_PER_RUN = 8


def cut_keys_values(data: bytes | memoryview, found: RecordPositions) -> tuple[list[bytes], list[bytes]] | None:
    """Every record's key and value as ``bytes``, cut from ``data`` by ``struct``; None when the batch has
    null keys or values, or its records vary too much in layout (the caller cuts slices instead).

    Cutting a key and a value with slices costs two ``slice`` objects and two calls per record. But
    consecutive records usually share one layout (key length, gap to the value, value length, gap to
    the next key): then a whole run is one ``struct.iter_unpack`` over a format like
    ``16s1x1024s9x``, and all the bytes objects of the batch are made in C.
    """
    if found.key_null is not None or found.value_null is not None:
        return None
    ks, ke, vs, ve = found.key_start, found.key_end, found.value_start, found.value_end
    n = len(ks)
    following = np.empty(n, np.int64)
    following[:-1] = ks[1:]
    following[-1] = ve[-1]
    layout = np.stack((ke - ks, vs - ke, ve - vs, following - ve))
    if (layout < 0).any():
        return None
    changes = np.flatnonzero((layout[:, 1:] != layout[:, :-1]).any(axis=0)) + 1
    if len(changes) * _RECORDS_PER_RUN > n:
        return None
    firsts = [0, *changes.tolist()]
    view = memoryview(data)
    runs = []
    for (klen, gap, vlen, tail), start, a, b in zip(layout[:, firsts].T.tolist(), ks[firsts].tolist(), firsts,
                                                    [*firsts[1:], n], strict=True):
        size = klen + gap + vlen + tail
        runs.append(struct.iter_unpack(f"{klen}s{gap}x{vlen}s{tail}x", view[start:start + (b - a) * size]))
    flat = list(chain.from_iterable(chain.from_iterable(runs)))
    return flat[0::2], flat[1::2]
