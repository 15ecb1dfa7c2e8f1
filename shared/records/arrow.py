"""Records as Arrow columns, cut from fetched record batches without a Python object per record.

The columns and their types are those of Spark's Kafka source: ``key, value, topic, partition,
offset, timestamp, timestampType`` and, when asked for, ``headers``. Keys and values are gathered
from the fetched (or decompressed) buffers by Arrow's C++ code from the byte spans that
``columns.decode_columns`` finds; every other column is a numpy array handed to Arrow as is.

Pure: buffers and positions in, Arrow arrays out. Used by the consumer's ``poll_arrow`` and the
Spark source; must not import ``services`` or ``pipelines``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from shared.records.columns import Columns
from shared.records.compiled import speedups
from shared.records.positions import RecordPositions

HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")

#: Decoded records, ready for Arrow: ``(buffer their spans point into, columns, timestamp type)``; the
#: timestamp type is one int for all the records, or an array of one per record.
Piece = tuple[bytes, Columns, int | np.ndarray]


def arrow_schema(include_headers: bool) -> pa.Schema:
    """The Spark Kafka source's schema (``headers`` last, as Spark puts it)."""
    fields = [
        ("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()), ("partition", pa.int32()),
        ("offset", pa.int64()), ("timestamp", TIMESTAMP_TYPE), ("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(("headers", HEADER_TYPE))
    return pa.schema(fields)


_INLINE = 12  # Arrow's binary view keeps values up to 12 bytes inside the view itself


def _views(buf: bytes, start: np.ndarray, end: np.ndarray, buffer_index: int) -> np.ndarray:
    """Arrow binary views (16 bytes each) of ``buf[start[i]:end[i]]``: length, then the value inline if
    it is short, else its first 4 bytes, the buffer's index and the value's offset in it."""
    n = len(start)
    arr = np.frombuffer(buf, np.uint8)
    lengths = (end - start).astype(np.int32)
    views = np.zeros((n, 16), np.uint8)
    words = views.view(np.int32)  # n x 4
    words[:, 0] = lengths
    long_ = lengths > _INLINE
    if long_.any():
        ls = start[long_]
        views[long_, 4:8] = arr[ls[:, None] + np.arange(4)]
        words[long_, 2] = buffer_index
        words[long_, 3] = ls
    short = ~long_ & (lengths > 0)
    if short.any():
        ss = start[short]
        k = np.arange(_INLINE)
        inline = arr[np.minimum(ss[:, None] + k, len(arr) - 1)]
        views[short, 4:] = np.where(k < lengths[short][:, None], inline, 0)
    return views


def binary_column(buf: bytes, start: np.ndarray, end: np.ndarray, null: np.ndarray | None) -> pa.Array:
    """An Arrow binary array of ``buf[start[i]:end[i]]`` (null where ``null`` is True).

    Built as a binary *view* array over ``buf``, made with numpy for all values at once, then
    cast to plain binary, so the values are gathered by Arrow's C++ code in one copy rather
    than by a Python call per value.
    """
    return binary_column_of([buf], [(0, start, end)], null)


def binary_column_of(bufs: Sequence[bytes], spans: Sequence[tuple[int, np.ndarray, np.ndarray]],
                     null: np.ndarray | None) -> pa.Array:
    """One binary array from spans in several buffers: ``spans`` is ``(buffer index, starts, ends)`` per run
    of values, in order; ``null`` covers all of them.

    Values usually lie at a fixed stride with a fixed length for long runs (records of one size):
    each such run is then copied by numpy as one strided block. Otherwise (lengths that vary
    from record to record) the values are gathered through Arrow binary views.
    """
    validity = None if null is None else pa.py_buffer(np.packbits(~null, bitorder="little"))
    null_count = 0 if null is None else int(null.sum())
    n = sum(len(s) for _, s, _ in spans)
    copied = _gather(bufs, spans, n) if _compiled_gather is not None else _copy_runs(bufs, spans, n)
    if copied is not None:
        offsets, data = copied
        return pa.Array.from_buffers(pa.binary(), n, [validity, pa.py_buffer(offsets), pa.py_buffer(data)],
                                     null_count=null_count)
    parts = [_views(bufs[i], s, e, i) for i, s, e in spans]
    views = parts[0] if len(parts) == 1 else np.concatenate(parts)
    view = pa.Array.from_buffers(pa.binary_view(), n, [validity, pa.py_buffer(views), *map(pa.py_buffer, bufs)],
                                 null_count=null_count)
    return view.cast(pa.binary())


#: The compiled value copy (``_speedups.c``: ``gather``), None where the extension is not built (the tests
#: set it to None to run the numpy copies)
_compiled_gather = getattr(speedups, "gather", None)


def _gather(bufs: Sequence[bytes], spans: Sequence[tuple[int, np.ndarray, np.ndarray]],
            n: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Arrow binary offsets and data for the spans, each value copied by ``memcpy`` in C."""
    assert _compiled_gather is not None
    offsets = np.zeros(n + 1, np.int64)
    lengths = [e - s for _, s, e in spans]
    np.cumsum(lengths[0] if len(lengths) == 1 else np.concatenate(lengths), out=offsets[1:])
    total = int(offsets[-1])
    if total >= 1 << 31:
        return None
    data = np.empty(total, np.uint8)
    at = 0
    for i, s, e in spans:
        at = _compiled_gather(bufs[i], np.ascontiguousarray(s, np.int64), np.ascontiguousarray(e, np.int64), data, at)
    return offsets.astype(np.int32), data


#: Copy runs by strides when there are at most one run per this many values.
_VALUES_PER_RUN = 8


def _copy_runs(bufs: Sequence[bytes], spans: Sequence[tuple[int, np.ndarray, np.ndarray]],
               n: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Arrow binary offsets and data for the spans, copied run by run (values of one length at one
    stride), or None when the values vary too much for that to pay."""
    plans = []
    runs = 0
    for i, start, end in spans:
        lengths = end - start
        m = len(start)
        if m > 2:
            stride = np.diff(start)
            brk = (lengths[1:] != lengths[:-1])
            brk[1:] |= stride[1:] != stride[:-1]
            cuts = np.flatnonzero(brk) + 1
        else:
            cuts = np.arange(1, m)
        runs += len(cuts) + 1
        if runs * _VALUES_PER_RUN > n:
            return None
        plans.append((i, start, lengths, [0, *cuts.tolist(), m]))
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(np.concatenate([p[2] for p in plans]) if len(plans) > 1 else plans[0][2], out=offsets[1:])
    total = int(offsets[-1])
    if total >= 1 << 31:
        return None
    data = np.empty(total, np.uint8)
    at = 0
    for i, start, lengths, bounds in plans:
        if not len(start):
            continue
        arr = np.frombuffer(bufs[i], np.uint8)
        firsts = np.array(bounds[:-1], np.int64)
        nexts = np.minimum(firsts + 1, len(start) - 1)
        for k, s0, size, stride in zip(np.diff(bounds).tolist(), start[firsts].tolist(), lengths[firsts].tolist(),
                                       (start[nexts] - start[firsts]).tolist(), strict=True):
            if size:
                src = np.lib.stride_tricks.as_strided(arr[s0:], shape=(k, size), strides=(stride if k > 1 else size, 1),
                                                      writeable=False)
                data[at:at + k * size].reshape(k, size)[...] = src
                at += k * size
    return offsets.astype(np.int32), data


def take_piece(piece: Piece, keep: np.ndarray) -> Piece:
    """``take`` on a piece (its per-record timestamp types too)."""
    buf, c, t = piece
    return buf, take(c, keep), t if isinstance(t, int) else t[keep]


def take(c: Columns, keep: np.ndarray) -> Columns:
    """The records of ``c`` where ``keep`` (a boolean mask or an index array) selects them."""
    p = c.positions
    kept = RecordPositions(*(None if a is None else a[keep] for a in (
        p.offsets, p.timestamps, p.key_start, p.key_end, p.key_null, p.value_start, p.value_end, p.value_null)))
    headers = c.headers
    if headers is not None:
        idx = np.flatnonzero(keep) if keep.dtype == bool else keep
        headers = [headers[i] for i in idx.tolist()]
    return Columns(c.data, kept, headers)


def _headers_column(pieces: Sequence[Piece], n: int) -> pa.Array:
    """``headers`` as list<struct<key, value>>; records without headers (most) cost no Python step."""
    if all(c.headers is None or not any(c.headers) for _, c, _ in pieces):
        return _no_headers(n)
    per_record = [h for _, c, _ in pieces for h in (c.headers if c.headers is not None else [()] * len(c))]
    counts = np.fromiter(map(len, per_record), np.int32, len(per_record))
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(counts, out=offsets[1:])
    flat = [kv for hs in per_record for kv in hs]
    values = pa.StructArray.from_arrays([pa.array([k for k, _ in flat], pa.string()),
                                         pa.array([v for _, v in flat], pa.binary())], names=["key", "value"])
    return pa.ListArray.from_arrays(numeric(offsets), values, type=HEADER_TYPE)


def _no_headers(n: int) -> pa.Array:
    """``n`` empty header lists (one zeroed offsets buffer, no values)."""
    return pa.Array.from_buffers(HEADER_TYPE, n, [None, pa.py_buffer(np.zeros(n + 1, np.int32))],
                                 children=[pa.nulls(0, HEADER_TYPE.value_type)])


_NUMERIC = {np.dtype(np.int32): pa.int32(), np.dtype(np.int64): pa.int64()}


def numeric(a: np.ndarray) -> pa.Array:
    """An int32/int64 numpy array as an Arrow array over the same memory. Unlike ``pa.array`` this never
    imports pandas (pyarrow's ``pa.array`` and ``pa.scalar`` do, the first time: about half a second)."""
    a = np.ascontiguousarray(a)
    return pa.Array.from_buffers(_NUMERIC[a.dtype], len(a), [None, pa.py_buffer(a)])


def repeated_string(text: str, n: int) -> pa.Array:
    """``text`` ``n`` times as an Arrow string array."""
    raw = text.encode()
    offsets = np.arange(n + 1, dtype=np.int32) * np.int32(len(raw))
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(raw * n)])


def _cat(arrays: list[np.ndarray]) -> np.ndarray:
    return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)


def _nulls(ps: list[RecordPositions], name: str) -> np.ndarray | None:
    got = [getattr(p, name) for p in ps]
    if all(a is None for a in got):
        return None
    return np.concatenate([np.zeros(len(p), bool) if a is None else a for p, a in zip(ps, got, strict=True)])


def record_batch(pieces: Sequence[Piece], topic: str, partition: int, schema: pa.Schema) -> pa.RecordBatch:
    """One Arrow record batch of the records of ``pieces`` (one topic-partition, in offset order).

    ``schema`` is ``arrow_schema(...)``: with a ``headers`` field the pieces must have been decoded
    with headers. Pieces may point into different buffers (decompressed batches): the key and value
    views then name several buffers, still gathered in one copy per column.
    """
    bufs: list[bytes] = []
    where: dict[int, int] = {}
    kspans, vspans = [], []
    ps = [c.positions for _, c, _ in pieces]
    for (buf, _, _), p in zip(pieces, ps, strict=True):
        i = where.setdefault(id(buf), len(bufs))
        if i == len(bufs):
            bufs.append(buf)
        kspans.append((i, p.key_start, p.key_end))
        vspans.append((i, p.value_start, p.value_end))
    offsets = _cat([p.offsets for p in ps])
    n = len(offsets)
    stamps = _cat([p.timestamps for p in ps]) * 1000
    ts_types = _cat([np.full(len(p), t, np.int32) if isinstance(t, int) else t.astype(np.int32, copy=False)
                     for (_, _, t), p in zip(pieces, ps, strict=True)])
    arrays = [
        binary_column_of(bufs, kspans, _nulls(ps, "key_null")),
        binary_column_of(bufs, vspans, _nulls(ps, "value_null")),
        repeated_string(topic, n),
        numeric(np.full(n, partition, np.int32)),
        numeric(offsets.astype(np.int64, copy=False)),
        pa.Array.from_buffers(TIMESTAMP_TYPE, n, [None, pa.py_buffer(stamps)]),
        numeric(ts_types),
    ]
    if schema.get_field_index("headers") >= 0:
        arrays.append(_headers_column(pieces, n))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
