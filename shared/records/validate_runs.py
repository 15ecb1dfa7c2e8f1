"""The produce-side record check for the common shape: runs of records laid out alike, checked a run at a time.

A producer's batch is mostly records of one length whose fields lie at the same places: the same key and
value lengths, the same header keys; only the timestamp delta, the offset delta and the key, value and
header value bytes differ (a length changes only where a delta's varint grows a byte, as at offset 64).
So one record of a run is walked in Python, which yields its *layout*: the byte columns (relative to the
record's start) that must be the same in every record of the run (the length varints, the key and value
length varints, the header count, each header key's length, bytes and value length) and where its
timestamp-delta and offset-delta varints lie. The following records of that length start at a fixed
stride, so each group of fixed columns is read for all of them at once as one strided view of 8-byte
little-endian words (``np.ndarray`` over the buffer with the record size as stride: no copy, no fancy
indexing), and a few numpy operations per word check all rows: the fixed bytes equal the walked record's,
the two deltas' varints have the same sizes (the same continuation bits), and the offset deltas are
exactly i, i+1, ... (compared with a table of their encodings). A row passing all of them has the walked
record's layout, so it is as well formed as that one; the run ends at the first row that fails. The
producer's 1 KiB-record batch is two runs (offset deltas below 64 take one byte, the rest two), checked
in ~25 numpy calls instead of ~100 for the per-field walk of ``validate._vector_check``.

Pure: bytes in, the records' max timestamp delta or None out. None means "not this shape, or something is
wrong": the caller then uses the general vectorised check or the record-by-record walk, which names the
fault. It never accepts a section the record-by-record walk (``validate.walk_records``) refuses.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from shared.errors import CorruptRecordError
from shared.records.varint import decode_zigzag

#: Runs shorter than this are short; a batch with more than ``MAX_SHORT_RUNS`` of them is not of the run
#: shape (records of varying lengths): it is left to the other checks.
MIN_RUN = 8
MAX_SHORT_RUNS = 4
#: Records whose fixed columns exceed this many bytes (long header keys) are left to the other checks.
_MAX_FIXED = 256
#: Longest timestamp-delta varint decoded here (56 bits fit an int64); longer ones go to the walk.
_MAX_TS_BYTES = 8
#: Offset deltas (and every other 32-bit varint) take at most 5 bytes, as Kafka reads them.
_MAX_OFFSET_BYTES = 5
#: Records shorter than a window (8 bytes) are left to the other checks.
_WINDOW = 8
#: ``_UNZIGZAG[b]`` is the value of the one-byte zig-zag varint ``b`` (for b < 128).
_UNZIGZAG = np.array([(b >> 1) ^ -(b & 1) for b in range(128)] + [0] * 128, dtype=np.int8)
#: ``_UNZIGZAG2[w]`` is the value of the two-byte zig-zag varint read little-endian as ``w`` (first byte
#: with its continuation bit, second byte below 0x80: w < 0x8000).
_W = np.arange(0x8000, dtype=np.int32)
_RAW2 = (_W & 0x7F) | ((_W >> 8) << 7)
_UNZIGZAG2 = ((_RAW2 >> 1) ^ -(_RAW2 & 1)).astype(np.int16)
del _W, _RAW2
#: The little-endian dtype that reads a varint of 1..8 bytes whole (masked to its size when wider).
_DTYPES = {1: "u1", 2: "<u2", 3: "<u4", 4: "<u4", 5: "<u8", 6: "<u8", 7: "<u8", 8: "<u8"}


def _offset_varints(first: int, n: int, size: int) -> np.ndarray:
    """The ``size``-byte varints of offset deltas ``first .. first+n-1``, read little-endian as integers."""
    value = 2 * np.arange(first, first + n, dtype=np.uint64)  # zig-zag of a non-negative delta
    out = np.zeros(n, dtype=np.uint64)
    for j in range(size):
        byte = (value >> np.uint64(7 * j)) & np.uint64(0x7F)
        if j < size - 1:
            byte |= np.uint64(0x80)
        out |= byte << np.uint64(8 * j)
    return out


#: Offset delta varints of one and two bytes, by delta (deltas below 8192, the most a batch usually has).
_OFFSETS = {1: _offset_varints(0, 64, 1).astype(np.uint8), 2: _offset_varints(0, 8192, 2).astype(np.uint16)}


class Layout:
    """Where one record's fields lie, relative to its first byte (the length varint).

    ``windows`` lists the 8-byte words (their column and a mask) covering every byte that must be the same
    in each record of a run: the fixed bytes whole, and of the two deltas' varints the continuation bits."""

    __slots__ = ("size", "windows", "ts_col", "ts_size", "off_col", "off_size", "ts_delta")

    def __init__(self, size: int, fixed: tuple[int, ...], ts: tuple[int, int], off: tuple[int, int],
                 ts_delta: int) -> None:
        self.size = size
        self.ts_col, self.ts_size = ts
        self.off_col, self.off_size = off
        self.ts_delta = ts_delta
        self.windows = _windows(size, fixed, ts, off)


@lru_cache(maxsize=256)
def _windows(size: int, fixed: tuple[int, ...], ts: tuple[int, int], off: tuple[int, int]
             ) -> list[tuple[int, np.uint64]]:
    """The 8-byte windows of ``Layout.windows`` (a producer's batches share a few layouts: cached)."""
    masks = dict.fromkeys(fixed, 0xFF)
    for c in (*range(ts[0], ts[0] + ts[1]), *range(off[0], off[0] + off[1])):
        masks[c] = 0x80
    windows: list[list[int]] = []
    for c in sorted(masks):
        if not windows or c >= windows[-1][0] + _WINDOW:
            windows.append([min(c, size - _WINDOW), 0])
        windows[-1][1] |= masks[c] << 8 * (c - windows[-1][0])
    return [(w, np.uint64(mask)) for w, mask in windows]


def record_layout(data: bytes | memoryview, pos: int, stop: int, index: int) -> Layout | None:
    """Walk the record at ``pos`` (index ``index`` in its batch); its layout if it is well formed, else None."""
    try:
        return _layout(data, pos, stop, index)
    except (IndexError, CorruptRecordError, UnicodeDecodeError):
        return None


def _varint(data: bytes | memoryview, p: int) -> tuple[int, int]:
    """A zig-zag varint of a 32-bit field at ``p`` and where it ends (one-byte ones without the general
    loop). Longer than 5 bytes it is not what Kafka reads: left to the walk, which refuses it."""
    b = data[p]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), p + 1
    value, end = decode_zigzag(data, p)
    if end - p > _MAX_OFFSET_BYTES:
        raise CorruptRecordError("a varint longer than 5 bytes for a 32-bit field")
    return value, end


def _layout(data: bytes | memoryview, pos: int, stop: int, index: int) -> Layout | None:
    dz = _varint
    length, p = dz(data, pos)
    end = p + length
    if length < 1 or end > stop or length + p - pos < _WINDOW:
        return None
    fixed = list(range(p - pos))
    ts_delta, q = decode_zigzag(data, p + 1)  # after the unused attributes byte: a varlong
    ts = (p + 1 - pos, q - p - 1)
    offset_delta, r = dz(data, q)
    off = (q - pos, r - q)
    if offset_delta != index or ts[1] > _MAX_TS_BYTES or off[1] > _MAX_OFFSET_BYTES:
        return None
    p = r
    for _ in range(2):  # key, then value: length varint (fixed) and bytes (free)
        n, q = dz(data, p)
        fixed.extend(range(p - pos, q - pos))
        if n < -1 or q + max(n, 0) > end:
            return None
        p = q + max(n, 0)
    count, q = dz(data, p)
    fixed.extend(range(p - pos, q - pos))
    if count < 0 or count > end - q:
        return None
    p = q
    for _ in range(count):  # header key length and key (fixed: its UTF-8 check holds for every row), value
        klen, q = dz(data, p)
        if klen < 0 or q + klen > end:
            return None
        str(data[q:q + klen], "utf-8")
        fixed.extend(range(p - pos, q + klen - pos))
        vlen, r = dz(data, q + klen)
        fixed.extend(range(q + klen - pos, r - pos))
        if vlen < -1 or r + max(vlen, 0) > end:
            return None
        p = r + max(vlen, 0)
    if p != end or len(fixed) > _MAX_FIXED:
        return None
    return Layout(end - pos, tuple(fixed), ts, off, ts_delta)


def _column(arr: np.ndarray, pos: int, stride: int, rows: int, col: int, size: int) -> np.ndarray:
    """Integers read little-endian at column ``col`` of ``rows`` records of ``stride`` bytes from ``pos``
    (a strided view, no copy): the first ``size`` bytes (of the dtype's width) are the varint."""
    return np.ndarray((rows,), _DTYPES[size], arr, pos + col, (stride,))


def _varint_values(raw: np.ndarray, size: int) -> np.ndarray:
    """The zig-zag decoded values of ``size``-byte varints read as little-endian integers ``raw``."""
    raw = raw.astype(np.int64)
    value = raw & 0x7F
    for j in range(1, size):
        value |= ((raw >> (8 * j)) & 0x7F) << (7 * j)
    return (value >> 1) ^ -(value & 1)


def run_length(arr: np.ndarray, pos: int, rows_max: int, lay: Layout, index: int) -> tuple[int, int]:
    """How many records from ``pos`` (the first one walked into ``lay``) share its layout, at most
    ``rows_max``, with offset deltas ``index, index+1, ...``; and the max timestamp delta among them."""
    size = lay.size
    off_size = lay.off_size
    rows_max = min(rows_max, (1 << (7 * off_size - 1)) - index)  # the last delta this varint size can hold
    offsets = _column(arr, pos, size, rows_max, lay.off_col, off_size)
    table = _OFFSETS.get(off_size)
    if table is not None:
        ok = offsets == table[index:index + rows_max]
    else:
        ok = (offsets.astype(np.uint64) & np.uint64((1 << 8 * off_size) - 1)) == _offset_varints(
            index, rows_max, off_size)
    for col, mask in lay.windows:
        word = np.ndarray((rows_max,), "<u8", arr, pos + col, (size,)) & mask
        ok &= word == word[0]
    m = int(ok.argmin())
    if ok[m]:  # all passed
        m = rows_max
    ts = _column(arr, pos, size, m, lay.ts_col, lay.ts_size)
    if lay.ts_size == 1:
        return m, int(_UNZIGZAG.take(ts).max())
    if lay.ts_size == 2:
        return m, int(_UNZIGZAG2.take(ts).max())
    return m, int(_varint_values(ts, lay.ts_size).max())


def check_runs(data: bytes | memoryview, start: int, stop: int, count: int) -> int | None:
    """The max timestamp delta of the ``count`` records filling ``data[start:stop]`` when they come in runs
    of records laid out alike (at most ``MAX_SHORT_RUNS`` runs shorter than ``MIN_RUN``) and are all well
    formed; None otherwise (the caller checks them another way)."""
    arr = np.frombuffer(data, np.uint8)
    pos = start
    i = 0
    max_td: int | None = None
    short = 0
    while i < count:
        lay = record_layout(data, pos, stop, i)
        if lay is None:
            return None
        size = lay.size
        rows_max = min(count - i, (stop - pos) // size)
        if rows_max > 1 and data[pos + size] == data[pos]:  # the next record may have the same length
            m, td = run_length(arr, pos, rows_max, lay, i)
        else:
            m, td = 1, lay.ts_delta
        if m == 0:  # cannot be: the run's first row is the walked record; refuse rather than loop
            return None
        if m < MIN_RUN:
            short += 1
            if short > MAX_SHORT_RUNS:
                return None
        max_td = td if max_td is None or td > max_td else max_td
        pos += m * size
        i += m
    return max_td if pos == stop else None
