"""A segment's records as numpy columns, decoded once and with every key hashed once.

What both the cleaning core and the broker's check walk. ``scan_segment`` checks each
batch's CRC and finds every record's offset, timestamp and key/value byte spans:

* in a segment with no compressed batch, where the records lie: each batch's records are
  walked in place (``shared.records.positions.walk_lengths``, each walk ending exactly at its
  batch's end) and every field is then decoded for the whole segment at once, so ``buf`` is
  the segment itself and nothing is copied;
* otherwise the batches' (decompressed) records sections are joined into one buffer and
  walked in one vectorised walk (``shared.records.positions``) when their records are plain
  (no headers, lengths below 1 MiB), checked to end exactly at each batch's boundary and to
  stay within each batch's lastOffsetDelta;
* failing both, batch by batch (``shared.records.columns``), which also decodes headers and
  names a damaged record.

Keys are hashed to 128 bits for the offset map (``hash_spans``), all of a segment's keys in
a few numpy steps instead of one MD5 call per key. No object is made per record: the
cleaner cuts bytes only for the records it rebuilds.

Pure: bytes in, arrays out.
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass

import numpy as np

from shared.errors import CorruptRecordError
from shared.records.columns import decode_columns
from shared.records.compression import decompress
from shared.records.header import ATTR_COMPRESSION_MASK, HEADER_SIZE, BatchHeader, iter_batches
from shared.records.positions import RecordPositions, fields_at, record_positions, walk_lengths
from shared.records.record import NO_HEADERS, Header

_U64 = np.uint64
# Multipliers of the key hash (odd 64-bit constants, as in xxHash/Murmur3) and its seeds.
_P1, _P2 = _U64(0x9E3779B97F4A7C15), _U64(0xC2B2AE3D27D4EB4F)
_F1, _F2 = _U64(0xFF51AFD7ED558CCD), _U64(0xC4CEB9FE1A85EC53)
_S1, _S2 = _U64(0x243F6A8885A308D3), _U64(0x13198A2E03707344)
_GATHER_BYTES = 1 << 24  # at most this many key bytes gathered into one matrix


def _fmix(h: np.ndarray) -> np.ndarray:
    """Murmur3's 64-bit finaliser (a bijection that spreads every input bit)."""
    h = h ^ (h >> _U64(33))
    h = h * _F1
    h = h ^ (h >> _U64(33))
    h = h * _F2
    return h ^ (h >> _U64(33))


def _seeds(seed: int) -> tuple[np.uint64, np.uint64]:
    s = seed & 0xFFFFFFFFFFFFFFFF
    mixed = (s * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    return _U64(int(_S1) ^ s), _U64(int(_S2) ^ mixed ^ (mixed >> 29))


def hash_spans(arr: np.ndarray, start: np.ndarray, length: np.ndarray, seed: int = 0
               ) -> tuple[np.ndarray, np.ndarray]:
    """The 128-bit hash ``(lo, hi)`` of each byte string ``arr[start:start+length]``.

    Each key is read as little-endian 64-bit words (the last one zero-padded) and folded into
    two independent multiply-xorshift chains started from ``seed`` and its length, then both
    are finalised and mixed together. Defined per key and seed, whatever the other keys: the
    same key always gets the same hash, in any batch, segment or process. Not cryptographic:
    colliding keys can be searched for when the seed is known, so the broker draws a secret
    seed per job (two keys with one hash count as one key, as with Kafka's MD5).
    """
    n = len(start)
    length = length.astype(np.int64)
    lens = length.astype(_U64)
    s1, s2 = _seeds(seed)
    lo = np.full(n, s1, _U64) ^ (lens * _P1)
    hi = np.full(n, s2, _U64) ^ (lens * _P2)
    words = (length + 7) // 8
    most = int(words.max()) if n else 0
    if most:
        rows = max(1, _GATHER_BYTES // (8 * most))
        cols = np.arange(8 * most, dtype=np.int64)
        last = len(arr) - 1
        for a in range(0, n, rows):
            b = min(n, a + rows)
            idx = start[a:b, None] + cols
            mat = np.where(cols < length[a:b, None], arr[np.minimum(idx, last)], 0).astype(np.uint8)
            w64 = np.ascontiguousarray(mat).view("<u8")
            clo, chi, cw = lo[a:b], hi[a:b], words[a:b]
            for j in range(most):
                w = w64[:, j]
                nlo = (clo ^ w) * _P1
                nlo ^= nlo >> _U64(29)
                nhi = (chi ^ w) * _P2
                nhi ^= nhi >> _U64(32)
                active = cw > j
                if active.all():
                    clo, chi = nlo, nhi
                else:
                    clo, chi = np.where(active, nlo, clo), np.where(active, nhi, chi)
            lo[a:b], hi[a:b] = clo, chi
    lo = _fmix(lo ^ (hi * _P1))
    hi = _fmix(hi ^ lo)
    return lo, hi


def hash_key(key: bytes, seed: int = 0) -> tuple[int, int]:
    """``hash_spans`` of one key."""
    lo, hi = hash_spans(np.frombuffer(key, np.uint8), np.zeros(1, np.int64), np.array([len(key)], np.int64), seed)
    return int(lo[0]), int(hi[0])


@dataclass(slots=True)
class SegmentScan:
    """A segment's batches (``headers``, ``positions`` in the segment) and records as columns.

    Record ``i`` of batch ``b`` is row ``first[b] + i``; its key and value are byte spans of
    ``buf`` (the segment itself, or its joined records sections). ``record_headers`` is None when no record has headers.
    """

    data: bytes | memoryview
    headers: list[BatchHeader]
    positions: list[int]
    first: np.ndarray  # len(headers) + 1 row indexes
    buf: bytes
    offsets: np.ndarray
    timestamps: np.ndarray
    key_start: np.ndarray
    key_end: np.ndarray
    key_null: np.ndarray
    value_start: np.ndarray
    value_end: np.ndarray
    value_null: np.ndarray
    record_headers: list[list[Header]] | None
    hash_lo: np.ndarray
    hash_hi: np.ndarray

    def __len__(self) -> int:
        return len(self.offsets)

    def raw(self, b: int) -> memoryview:
        """Batch ``b`` as it is in the segment."""
        pos = self.positions[b]
        return memoryview(self.data)[pos:pos + self.headers[b].size]

    def batch_rows(self) -> np.ndarray:
        """The batch index of every record."""
        return np.repeat(np.arange(len(self.headers)), np.diff(self.first))

    def record(self, i: int) -> tuple[int, int, bytes | None, bytes | None, list[Header]]:
        """Record row ``i`` as ``(offset, timestamp, key, value, headers)``."""
        buf = self.buf
        key = None if self.key_null[i] else buf[int(self.key_start[i]):int(self.key_end[i])]
        value = None if self.value_null[i] else buf[int(self.value_start[i]):int(self.value_end[i])]
        hdrs = list(self.record_headers[i]) if self.record_headers is not None else []
        return int(self.offsets[i]), int(self.timestamps[i]), key, value, hdrs

    def columns(self, rows: np.ndarray) -> tuple[list[int], list[bytes | None], list[bytes | None],
                                                 list[list[Header]] | None]:
        """Timestamps, keys, values and headers of the records at ``rows`` (bytes cut only for these)."""
        buf = self.buf
        ks, ke, vs, ve = (a[rows].tolist() for a in (self.key_start, self.key_end, self.value_start, self.value_end))
        keys: list[bytes | None] = [buf[s:e] for s, e in zip(ks, ke, strict=True)]
        values: list[bytes | None] = [buf[s:e] for s, e in zip(vs, ve, strict=True)]
        if self.key_null[rows].any():
            keys = [None if null else k for k, null in zip(keys, self.key_null[rows].tolist(), strict=True)]
        if self.value_null[rows].any():
            values = [None if null else v for v, null in zip(values, self.value_null[rows].tolist(), strict=True)]
        hdrs = [self.record_headers[i] for i in rows.tolist()] if self.record_headers is not None else None
        return self.timestamps[rows].tolist(), keys, values, hdrs


def _sections(data: bytes | memoryview, batches: list[tuple[int, BatchHeader]]) -> list[bytes | memoryview]:
    view = memoryview(data)
    out: list[bytes | memoryview] = []
    for pos, h in batches:
        raw = view[pos + HEADER_SIZE:pos + h.size]
        codec = h.attributes & ATTR_COMPRESSION_MASK
        out.append(decompress(codec, bytes(raw)) if codec and h.records_count else raw)
    return out


def _columns(found: RecordPositions, headers: list[BatchHeader], counts: np.ndarray) -> tuple[np.ndarray, ...] | None:
    """Offsets and timestamps from the records' deltas and their batches' bases (None if a delta is past
    its batch's lastOffsetDelta), with the span and null columns."""
    total = len(found)
    base = np.array([h.base_offset for h in headers], np.int64)
    last_delta = np.array([h.last_offset_delta for h in headers], np.int64)
    deltas = found.offsets  # base offset 0: the deltas themselves
    if (deltas > np.repeat(last_delta, counts)).any():
        return None
    offsets = deltas + np.repeat(base, counts)
    stamps = found.timestamps + np.repeat(np.array([h.base_timestamp for h in headers], np.int64), counts)
    lat = np.array([h.log_append_time is not None for h in headers])
    if lat.any():
        rows = np.repeat(lat, counts)
        stamps[rows] = np.repeat(np.array([h.max_timestamp for h in headers], np.int64), counts)[rows]
    key_null = found.key_null if found.key_null is not None else np.zeros(total, bool)
    value_null = found.value_null if found.value_null is not None else np.zeros(total, bool)
    return (offsets, stamps, found.key_start, found.key_end, key_null, found.value_start, found.value_end,
            value_null)


def _whole_segment(buf: bytes, headers: list[BatchHeader], counts: np.ndarray, ends: np.ndarray,
                   sizes: np.ndarray) -> tuple[np.ndarray, ...] | None:
    """Every record's columns in one vectorised walk over the joined records sections, or None (not
    plain, or not aligned with batches: each batch's last record must end where its section ends, and an
    empty batch has no bytes)."""
    if ((counts == 0) & (sizes > 0)).any():
        return None
    found = record_positions(buf, 0, len(buf), int(counts.sum()), 0, 0, None)
    if found is None:
        return None
    first = np.concatenate(([0], np.cumsum(counts)))
    nonempty = counts > 0
    if not (found.value_end[first[1:][nonempty] - 1] + 1 == ends[nonempty]).all():
        return None
    return _columns(found, headers, counts)


def _in_place(data: bytes, batches: list[tuple[int, BatchHeader]], counts: np.ndarray
              ) -> tuple[np.ndarray, ...] | None:
    """Every record's columns found in the segment itself, for a segment without compressed batches:
    each batch's records walked where they lie (``walk_lengths`` ends each walk exactly at its batch's
    end), then every field decoded at once, with no copy of the records. None when not plain."""
    arr = np.frombuffer(data, np.uint8)
    starts: list[np.ndarray] = []
    ends: list[np.ndarray] = []
    for (pos, h), n in zip(batches, counts.tolist(), strict=True):
        if not n:
            if h.size != HEADER_SIZE:
                return None
            continue
        walked = walk_lengths(data, arr, pos + HEADER_SIZE, pos + h.size, n)
        if walked is None:
            return None
        starts.append(walked[0])
        ends.append(walked[1])
    if not starts:
        return None
    found = fields_at(arr, np.concatenate(starts), np.concatenate(ends), 0, 0, None)
    return None if found is None else _columns(found, [h for _, h in batches], counts)


def _batch_by_batch(buf: bytes, headers: list[BatchHeader], starts: np.ndarray, ends: np.ndarray
                    ) -> tuple[tuple[np.ndarray, ...], list[list[Header]] | None]:
    cols: list[list[np.ndarray]] = [[] for _ in range(8)]
    hdrs: list[list[Header]] = []
    for h, s, e in zip(headers, starts.tolist(), ends.tolist(), strict=True):
        c = decode_columns(h, buf, with_headers=True, start=s, end=e)
        p = c.positions
        n = len(p)
        if n and (p.offsets.max() > h.last_offset):
            raise CorruptRecordError(f"a record of the batch at offset {h.base_offset} is past its lastOffsetDelta")
        for out, col in zip(cols, (p.offsets, p.timestamps, p.key_start, p.key_end,
                                   p.key_null if p.key_null is not None else np.zeros(n, bool),
                                   p.value_start, p.value_end,
                                   p.value_null if p.value_null is not None else np.zeros(n, bool)), strict=True):
            out.append(col)
        hdrs.extend(c.headers if c.headers is not None else [list(NO_HEADERS)] * n)
    joined = tuple(np.concatenate(c) if c else np.zeros(0, np.int64) for c in cols)
    return joined, (hdrs if any(hdrs) else None)


# Buffers walked where they lie: a worker's receive buffer (memoryview slices), a segment file mapped by
# the broker's check (mmap), or bytes. Their slices are immutable, or views that nothing writes meanwhile.
_IN_PLACE = (bytes, memoryview, mmap.mmap)


def scan_segment(data: bytes | memoryview | mmap.mmap, *, whole: bool = False, seed: int = 0) -> SegmentScan:
    """Scan every whole batch of ``data`` (CRCs checked), keys hashed with ``seed``. With ``whole``, bytes
    after the last whole batch are an error (a cleaned segment must be nothing but batches). Raises
    ``CorruptRecordError``."""
    batches = list(iter_batches(data, validate=True))
    used = batches[-1][0] + batches[-1][1].size if batches else 0
    if whole and used != len(data):
        raise CorruptRecordError(f"{len(data) - used} bytes after the last whole batch")
    headers = [h for _, h in batches]
    counts = np.array([h.records_count for h in headers], np.int64)
    if (counts < 0).any():
        raise CorruptRecordError("a batch with a negative record count")
    cols = None
    if isinstance(data, _IN_PLACE) and not any(h.attributes & ATTR_COMPRESSION_MASK for h in headers):
        buf = data
        cols = _in_place(data, batches, counts)
    record_headers = None
    if cols is None:
        sections = _sections(data, batches)
        buf = b"".join(sections)
        sizes = np.array([len(s) for s in sections], np.int64)
        ends = np.cumsum(sizes)
        starts = ends - sizes
        cols = _whole_segment(buf, headers, counts, ends, sizes) if len(buf) else None
        if cols is None:
            cols, record_headers = _batch_by_batch(buf, headers, starts, ends)
    offsets, stamps, ks, ke, kn, vs, ve, vn = cols
    arr = np.frombuffer(buf, np.uint8)
    lo, hi = hash_spans(arr, ks, np.where(kn, 0, ke - ks), seed)
    return SegmentScan(data, headers, [p for p, _ in batches], np.concatenate(([0], np.cumsum(counts))), buf,
                       offsets.astype(np.int64), stamps.astype(np.int64), ks, ke, kn.astype(bool), vs, ve,
                       vn.astype(bool), record_headers, lo, hi)
