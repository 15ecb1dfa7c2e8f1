"""Vectorised encoding of RecordBatch v2 records sections from columns (Arrow, numpy or lists).

The columnar counterpart of ``BatchBuilder.append``: the same bytes (a property test checks it against
the per-record builder and kafka-python's reader), with no Python work per record for records without
headers. Every record is ``length | attributes | timestampDelta | offsetDelta | keyLength | key |
valueLength | value | headerCount | headers``, its integers zig-zag varints:

- the varints of all records are computed at once with numpy (``varint_matrix``: one row per record,
  one column per 7-bit group) and packed into one small binary column per record ("prefix": length,
  attributes, timestamp delta, offset delta, key length; "middle": value length) by a boolean mask;
- Arrow's ``binary_join_element_wise`` then joins prefix, key, middle, value and headers of every
  record in C++, at memory speed: its data buffer IS the records section of consecutive records;
- a batch is a slice of it: ``split_batches`` cuts a partition's rows where ``Producer.send`` would
  close a batch (its size estimate against ``batch.size``), so that offset and timestamp deltas
  restart at each batch's first record.

``murmur2_partitions`` computes Kafka's default partitioner (murmur2 of the key) for a whole key
column, grouped by key length, in numpy. ``section_builder`` wraps an encoded section in a closed
``BatchBuilder``, so that the producer's batches, the header (``pack_header``: one CRC-32C per batch),
compression and sequence numbers work as for records appended one by one.

Pure: columns in, bytes out. No client, no network.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shared.records.builder import BatchBuilder, encode_headers
from shared.records.compression import CompressionType
from shared.records.header import HEADER_SIZE
from shared.records.record import Header
from shared.records.varint import encode_zigzag

_LB = pa.large_binary()


def _binary_scalar(value: bytes) -> pa.Scalar:
    """A large_binary scalar built from buffers: ``pa.scalar`` (and ``pa.array`` of non-numpy input) asks
    whether the input is a pandas object, which imports pandas (seconds) on a producer's first call."""
    offsets = pa.py_buffer(np.array([0, len(value)], dtype=np.int64))
    return pa.Array.from_buffers(_LB, 1, [None, offsets, pa.py_buffer(value)])[0]


def row_indices(rows: np.ndarray) -> pa.Array:
    """Row numbers (int64 numpy) as an Arrow array for ``take``, without a copy or a pandas check."""
    rows = np.ascontiguousarray(rows, dtype=np.int64)
    return pa.Array.from_buffers(pa.int64(), len(rows), [None, pa.py_buffer(rows)])


_EMPTY = _binary_scalar(b"")
_NO_HEADERS = _binary_scalar(b"\x00")
_SHIFTS = np.arange(10, dtype=np.uint64) * np.uint64(7)
_THRESHOLDS = [np.uint64(1) << np.uint64(7 * k) for k in range(1, 10)]
_M = np.uint32(0x5BD1E995)
_MURMUR2_SEED = 0x9747B28C
#: Beyond this many distinct key lengths, murmur2 is computed key by key (each length is one numpy pass).
_MAX_LENGTH_GROUPS = 256

Column = Any  # pa.Array | pa.ChunkedArray | np.ndarray | Sequence[bytes | str | None]


# -- columns -----------------------------------------------------------------------------------------------

def arrow_input(col: Any) -> Any:
    """``col`` as one Arrow array when it is Arrow data: a (chunked) pyarrow array, or anything speaking the
    Arrow PyCapsule interface (a Polars Series, a nanoarrow array, ...); anything else unchanged."""
    if isinstance(col, pa.Array | np.ndarray):
        return col
    if isinstance(col, pa.ChunkedArray):
        return col.combine_chunks()
    if hasattr(col, "__arrow_c_array__"):
        return pa.array(col)
    if hasattr(col, "__arrow_c_stream__"):
        return pa.chunked_array(col).combine_chunks()
    return col


def _stringish(t: pa.DataType) -> bool:
    return (pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_string(t)
            or pa.types.is_large_string(t) or pa.types.is_binary_view(t) or pa.types.is_string_view(t))


def decode_dictionary(col: pa.Array) -> pa.Array:
    """A dictionary-encoded array (a pandas category, a Polars Categorical or Enum) as plain values; text
    dictionaries as large_binary (Arrow cannot take from a string_view dictionary, Polars' kind)."""
    if _stringish(col.type.value_type):
        return pc.take(pc.cast(col.dictionary, _LB), col.indices)
    return col.dictionary_decode()


def as_binary_column(col: Column, name: str) -> pa.LargeBinaryArray:
    """``col`` as one Arrow large_binary array (nulls kept): Arrow binary/string arrays of any offset
    width (cast, the data not copied) or view layout (Polars', copied), numpy fixed-width bytes or str
    (as ``tolist()`` sees them: trailing NULs dropped) or object arrays, or a Python sequence of
    bytes / str / None."""
    col = arrow_input(col)
    if isinstance(col, pa.Array):
        if pa.types.is_dictionary(col.type):
            col = decode_dictionary(col)
        t = col.type
        if not (pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_string(t)
                or pa.types.is_large_string(t) or pa.types.is_fixed_size_binary(t) or pa.types.is_null(t)
                or pa.types.is_binary_view(t) or pa.types.is_string_view(t)):
            raise TypeError(f"{name} must be a binary or string array, got {t}")
        return col if t == _LB else pc.cast(col, _LB)
    if isinstance(col, np.ndarray):
        if col.ndim != 1:
            raise ValueError(f"{name} must be one-dimensional, got shape {col.shape}")
        if col.dtype.kind in "SU":
            return pc.cast(pa.array(col), _LB)
        if col.dtype.kind != "O":
            raise TypeError(f"{name} must be a numpy array of bytes (dtype S or object), got dtype {col.dtype}")
        col = col.tolist()
    if isinstance(col, str | bytes | bytearray | memoryview):
        raise TypeError(f"{name} must be a column (array or sequence), got a single {type(col).__name__}")
    try:
        return pa.array(col, type=_LB)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        seq = list(col)
        for v in seq:
            if v is not None and not isinstance(v, bytes | bytearray | memoryview | str):
                raise TypeError(f"{name} must hold bytes, str or None, got {type(v).__name__}") from None
        return pa.array([bytes(v) if isinstance(v, bytearray | memoryview) else v for v in seq], type=_LB)


def _offsets(arr: pa.Array) -> np.ndarray:
    """The value offsets of a binary or string array (32- or 64-bit), as int64."""
    large = pa.types.is_large_binary(arr.type) or pa.types.is_large_string(arr.type)
    n = len(arr)
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int64 if large else np.int32, count=arr.offset + n + 1)
    return offsets[arr.offset:].astype(np.int64, copy=False)


def lengths_of(arr: pa.Array) -> np.ndarray:
    """Each element's byte length, -1 for a null (int64), of a binary or string array."""
    lengths = np.diff(_offsets(arr))
    if arr.null_count:
        lengths[np.asarray(arr.is_null())] = -1
    return lengths


def _data_and_offsets(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    offsets = _offsets(arr)
    data_buf = arr.buffers()[2]
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    return data, offsets


def encode_header_column(headers: Column, n: int) -> tuple[pa.LargeBinaryArray | None, np.ndarray]:
    """Each record's encoded header count and headers (``encode_headers``), and their lengths; None (and
    lengths of 1: the count 0) when no record has headers. ``headers``: one sequence of ``(key: str,
    value: bytes | None)`` per record (or None), or an Arrow list<struct<key, value>> array (Spark's)."""
    headers = arrow_input(headers)
    if isinstance(headers, pa.Array):
        t = headers.type
        if not (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_list_view(t)
                or pa.types.is_large_list_view(t) or pa.types.is_null(t)):
            raise ValueError(f"headers must be a list<struct<key: string, value: binary>> column (or one list of "
                             f"(key, value) pairs per row), got {t}")
        if headers.null_count == len(headers) or not pc.sum(pc.fill_null(pc.list_value_length(headers), 0)).as_py():
            return None, np.ones(n, dtype=np.int64)
        pairs = None if pa.types.is_null(t) else t.value_type
        if (pairs is not None and (pa.types.is_list(pairs) or pa.types.is_large_list(pairs))
                and (pa.types.is_string(pairs.value_type) or pa.types.is_large_string(pairs.value_type))):
            # pyarrow's inference for (str, bytes) tuples, e.g. from pandas: both as strings, which need not
            # be UTF-8 (values are any bytes): read them as bytes, keys decoded below
            headers = headers.cast(pa.list_(pa.list_(pa.binary())))
            rows: Sequence[Any] = [None if h is None else [_utf8_key(x) for x in h] for h in headers.to_pylist()]
        else:
            rows = headers.to_pylist()
    else:
        rows = headers
    if len(rows) != n:
        raise ValueError(f"headers has {len(rows)} rows, values {n}")
    encoded: list[bytes] = []
    any_headers = False
    for h in rows:
        if not h:
            encoded.append(b"\x00")
            continue
        any_headers = True
        encoded.append(encode_headers([_header_pair(x) for x in h]))
    if not any_headers:
        return None, np.ones(n, dtype=np.int64)
    arr = pa.array(encoded, type=_LB)
    return arr, lengths_of(arr)


def _utf8_key(pair: Any) -> Any:
    """A ``[key, value]`` pair read as bytes, with its key decoded (anything else is left to ``_header_pair``
    to refuse)."""
    if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], bytes)):
        return pair
    try:
        return pair[0].decode(), pair[1]
    except UnicodeDecodeError:
        raise ValueError(f"header keys must be UTF-8 text, got {pair[0]!r:.60}") from None


def _header_pair(x: Any) -> tuple[str, bytes | None]:
    """One header: a ``(key, value)`` pair or ``{"key": ..., "value": ...}`` (Spark's struct), else ValueError
    (a bare string would otherwise be taken apart as a pair of its characters)."""
    if isinstance(x, dict) and x.keys() == {"key", "value"}:
        k, v = x["key"], x["value"]
    elif isinstance(x, tuple | list) and len(x) == 2:
        k, v = x
    else:
        raise ValueError(f"each header must be a (key, value) pair or {{'key': ..., 'value': ...}}, got {x!r:.60}")
    if not isinstance(k, str):
        raise ValueError(f"header keys must be str, got {type(k).__name__}")
    return k, _header_value(v)


def _header_value(v: Any) -> bytes | None:
    if v is None or isinstance(v, bytes):
        return v
    if isinstance(v, str):
        return v.encode("utf-8")
    if isinstance(v, bytearray | memoryview):
        return bytes(v)
    raise TypeError(f"header values must be bytes or None, got {type(v).__name__}")


# -- varints -----------------------------------------------------------------------------------------------

def varint_matrix(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The zig-zag varints of int64 ``values``: a uint8 matrix (row i: the bytes of value i, left-aligned,
    as many columns as the longest needs) and each varint's length."""
    v = values.astype(np.int64, copy=False)
    n = len(v)
    if n > 1 and v[0] == v[-1] and v.min() == v.max():  # one value for all (fixed-width keys and values)
        row = np.frombuffer(encode_zigzag(int(v[0])), dtype=np.uint8)
        mat = np.empty((n, len(row)), dtype=np.uint8)
        mat[:] = row
        return mat, np.full(n, len(row), dtype=np.int64)
    u = ((v << 1) ^ (v >> 63)).view(np.uint64)
    lens = np.ones(n, dtype=np.int64)
    for t in _THRESHOLDS:
        more = u >= t
        if not more.any():
            break
        lens += more
    width = int(lens.max()) if n else 1
    # Column by column (1-D passes): a 2-D broadcast shift of uint64 was ~10x slower.
    mat = np.empty((n, width), dtype=np.uint8)
    for j in range(width):
        col = (u >> _SHIFTS[j]) & np.uint64(0x7F) if j else u & np.uint64(0x7F)
        if j < width - 1:
            col |= (lens > j + 1).astype(np.uint64) << np.uint64(7)
        mat[:, j] = col
    return mat, lens


def _pack(fields: list[tuple[np.ndarray, np.ndarray]], n: int) -> pa.LargeBinaryArray:
    """Concatenate, per record, the varint fields (matrix, lengths) into one binary column."""
    mat = np.concatenate([m for m, _ in fields], axis=1)
    mask = np.concatenate([np.arange(m.shape[1]) < ln[:, None] for m, ln in fields], axis=1)
    data = mat[mask]
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(sum(ln for _, ln in fields), out=offsets[1:])
    return pa.Array.from_buffers(_LB, n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


# -- batches -----------------------------------------------------------------------------------------------

def size_estimates(key_lengths: np.ndarray, value_lengths: np.ndarray, header_lengths: np.ndarray) -> np.ndarray:
    """Each record's size estimate, exactly as ``Producer.send`` computes it (21 + headers + key + value)."""
    return 21 + header_lengths + np.maximum(key_lengths, 0) + np.maximum(value_lengths, 0)


def split_batches(estimates: np.ndarray, batch_size: int) -> np.ndarray:
    """The first row of each batch: a batch takes records while its size stays within ``batch_size``
    (at least one), the rule ``Producer.send`` applies to a partition's open batch."""
    n = len(estimates)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    cum = np.cumsum(estimates)
    room = batch_size - HEADER_SIZE
    if cum[-1] <= room:
        return np.zeros(1, dtype=np.int64)
    starts = [0]
    s = 0
    while True:
        before = int(cum[s - 1]) if s else 0
        e = int(np.searchsorted(cum, before + room, side="right"))
        e = max(e, s + 1)
        if e >= n:
            break
        starts.append(e)
        s = e
    return np.asarray(starts, dtype=np.int64)


@dataclass(frozen=True, slots=True)
class EncodedSection:
    """One batch's records section (uncompressed) and what its header needs."""

    body: bytes | memoryview  # a view into the joined column when uncompressed (no copy per batch)
    count: int
    base_timestamp: int
    max_timestamp: int


def encode_sections(
    values: pa.LargeBinaryArray,
    keys: pa.LargeBinaryArray | None,
    timestamps: np.ndarray,
    starts: np.ndarray,
    headers: pa.LargeBinaryArray | None = None,
    *,
    value_lengths: np.ndarray | None = None,
    key_lengths: np.ndarray | None = None,
    header_lengths: np.ndarray | None = None,
) -> list[EncodedSection]:
    """Encode the records (one partition's, in order) as the batches starting at rows ``starts``: the
    offset deltas count from each batch's first record, the timestamp deltas from its timestamp. The
    lengths, when the caller has them, are not computed again."""
    n = len(values)
    if n == 0:
        return []
    ts = np.asarray(timestamps, dtype=np.int64)
    if len(ts) != n or (keys is not None and len(keys) != n) or (headers is not None and len(headers) != n):
        raise ValueError("record columns differ in length")
    starts = np.asarray(starts, dtype=np.int64)
    counts = np.diff(np.append(starts, n))
    batch_of = np.repeat(np.arange(len(starts)), counts)
    first = starts[batch_of]
    offset_deltas = np.arange(n, dtype=np.int64) - first
    ts_deltas = ts - ts[first]
    vlen = lengths_of(values) if value_lengths is None else value_lengths
    if keys is None:
        klen = np.full(n, -1, dtype=np.int64)
    else:
        klen = lengths_of(keys) if key_lengths is None else key_lengths
    hlen = (np.ones(n, dtype=np.int64) if headers is None
            else lengths_of(headers) if header_lengths is None else header_lengths)
    td_m, td_l = varint_matrix(ts_deltas)
    od_m, od_l = varint_matrix(offset_deltas)
    kl_m, kl_l = varint_matrix(klen)
    vl_m, vl_l = varint_matrix(vlen)
    body_len = 1 + td_l + od_l + kl_l + np.maximum(klen, 0) + vl_l + np.maximum(vlen, 0) + hlen
    bl_m, bl_l = varint_matrix(body_len)
    ones = np.ones(n, dtype=np.int64)
    prefix = _pack([(bl_m, bl_l), (np.zeros((n, 1), np.uint8), ones), (td_m, td_l), (od_m, od_l), (kl_m, kl_l)], n)
    middle = _pack([(vl_m, vl_l)], n)
    parts: list[Any] = [prefix]
    if keys is not None:
        parts.append(keys.fill_null(b"") if keys.null_count else keys)
    parts.append(middle)
    parts.append(values.fill_null(b"") if values.null_count else values)
    parts.append(_NO_HEADERS if headers is None else headers)
    joined = pc.binary_join_element_wise(*parts, _EMPTY)
    data, offsets = _data_and_offsets(joined)
    ends = np.append(starts[1:], n)
    maxima = np.maximum.reduceat(ts, starts)
    out = []
    # Each section is a read-only view of the joined column's buffer (kept alive by the view): the batch's
    # CRC and the request's join read it there, so the records are not copied once more per batch.
    whole = memoryview(data).toreadonly()
    bounds = offsets.tolist()
    for b, (s, e) in enumerate(zip(starts.tolist(), ends.tolist(), strict=True)):
        out.append(EncodedSection(whole[bounds[s]:bounds[e]], e - s, int(ts[s]), int(maxima[b])))
    return out


def section_builder(section: EncodedSection, compression: CompressionType = CompressionType.NONE) -> BatchBuilder:
    """A closed ``BatchBuilder`` holding an encoded section: ``build_pieces`` gives its header (one
    CRC-32C) and (compressed) records, with the producer id, epoch and sequence set as for any batch."""
    b = BatchBuilder(compression)
    b.close()  # no more appends
    # The codecs want bytes; uncompressed, the view goes straight into the request.
    b.body = section.body if compression == CompressionType.NONE else bytes(section.body)
    b.count = section.count
    b.base_ts = section.base_timestamp
    b.max_ts = section.max_timestamp
    return b


def encode_batch_columnar(values: Column, keys: Column | None = None, timestamps: Sequence[int] | np.ndarray = (),
                          headers: Column | None = None, **kwargs: Any) -> bytes:
    """One complete batch from columns, as ``builder.encode_batch_columns`` encodes it (keyword
    arguments: ``base_offset`` and ``BatchBuilder``'s header fields)."""
    v = as_binary_column(values, "values")
    n = len(v)
    if not n:
        raise ValueError("a batch needs at least one record")
    k = as_binary_column(keys, "keys") if keys is not None else None
    h, _ = encode_header_column(headers, n) if headers is not None else (None, None)
    (section,) = encode_sections(v, k, np.asarray(timestamps, dtype=np.int64), np.zeros(1, np.int64), h)
    base_offset = kwargs.pop("base_offset", 0)
    b = BatchBuilder(**kwargs)
    b.close()
    b.body, b.count, b.base_ts, b.max_ts = bytes(section.body), section.count, section.base_timestamp, section.max_timestamp
    return b.build(base_offset)


# -- partitioning ------------------------------------------------------------------------------------------

def murmur2_partitions(keys: pa.LargeBinaryArray, num_partitions: int) -> np.ndarray:
    """Kafka's default partitioner for every non-null key: ``(murmur2(key) & 0x7fffffff) % n`` (int64;
    -1 for a null key). Keys of the same length are hashed together, 4 bytes per numpy step."""
    n = len(keys)
    out = np.full(n, -1, dtype=np.int64)
    if n == 0:
        return out
    lengths = lengths_of(keys)
    if num_partitions <= 1:
        out[lengths >= 0] = 0
        return out
    data, offsets = _data_and_offsets(keys)
    distinct = np.unique(lengths[lengths >= 0])
    if len(distinct) > _MAX_LENGTH_GROUPS:
        from murmurhash2 import murmurhash2

        for i, key in enumerate(keys.to_pylist()):
            if key is not None:
                out[i] = (murmurhash2(key, _MURMUR2_SEED) & 0x7FFFFFFF) % num_partitions
        return out
    with np.errstate(over="ignore"):
        for length in distinct.tolist():
            rows = np.flatnonzero(lengths == length)
            h = np.full(len(rows), (_MURMUR2_SEED ^ length) & 0xFFFFFFFF, dtype=np.uint32)
            if length:
                mat = data[offsets[rows][:, None] + np.arange(length)]
                blocks = length // 4
                if blocks:
                    words = np.ascontiguousarray(mat[:, :blocks * 4]).view("<u4")
                    for j in range(blocks):
                        k = words[:, j] * _M
                        k ^= k >> np.uint32(24)
                        k *= _M
                        h *= _M
                        h ^= k
                tail = length & 3
                base = blocks * 4
                if tail:
                    if tail >= 3:
                        h ^= mat[:, base + 2].astype(np.uint32) << np.uint32(16)
                    if tail >= 2:
                        h ^= mat[:, base + 1].astype(np.uint32) << np.uint32(8)
                    h ^= mat[:, base].astype(np.uint32)
                    h *= _M
            h ^= h >> np.uint32(13)
            h *= _M
            h ^= h >> np.uint32(15)
            out[rows] = (h & np.uint32(0x7FFFFFFF)).astype(np.int64) % num_partitions
    return out


__all__ = [
    "EncodedSection", "Header", "arrow_input", "as_binary_column", "decode_dictionary", "encode_batch_columnar", "encode_header_column",
    "encode_sections", "lengths_of", "murmur2_partitions", "section_builder", "size_estimates", "split_batches",
    "varint_matrix",
]
