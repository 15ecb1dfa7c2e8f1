"""The pure cleaning core: offset map, retention of records, batches, tombstones, merging."""

from __future__ import annotations

import pytest

from shared.compaction.cleaning import CleanJob, OffsetMapTooSmallError, SegmentData, clean, group_segments
from shared.compaction.offset_map import OffsetMap
from shared.records.builder import encode_batch
from shared.records.compression import CompressionType
from shared.records.decoder import decode_batch
from shared.records.header import iter_batches

T0 = 1_700_000_000_000
DAY = 86_400_000


def seg(base: int, rows: list[tuple[bytes | None, bytes | None]], per_batch: int = 1, **fields) -> SegmentData:
    """A segment of batches of ``per_batch`` records from ``base`` (record i has timestamp T0 + offset)."""
    data = b""
    for i in range(0, len(rows), per_batch):
        chunk = rows[i : i + per_batch]
        off = base + i
        data += encode_batch([(T0 + off + j, k, v, [("h", b"x%d" % (off + j))]) for j, (k, v) in enumerate(chunk)],
                             base_offset=off, **fields)
    return SegmentData(base, data)


def records(data: bytes) -> list[tuple[int, int, bytes | None, bytes | None, list]]:
    out = []
    for pos, _ in iter_batches(data):
        _, recs = decode_batch(data, pos)
        out.extend((r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in recs)
    return out


def headers(data: bytes):
    return [h for _, h in iter_batches(data)]


def job(segments: list[SegmentData], end: int, **kw) -> CleanJob:
    return CleanJob(tuple(segments), kw.pop("first_dirty", 0), end, kw.pop("now_ms", T0 + DAY), **kw)


def test_offset_map_bounded_memory_and_bytes_per_key() -> None:
    m = OffsetMap(24 * 1000)
    assert m.memory_bytes <= 24 * 1000
    assert m.bytes_per_key_when_full <= 32  # goal; Kafka's is 24 / 0.9 = 26.7 as well
    for i in range(m.max_entries):
        assert m.put(b"k%d" % i, i)
    assert m.full and not m.put(b"new", 1) and m.put(b"k3", 99)
    assert m.get(b"k3") == 99 and m.get(b"absent") == -1 and m.latest_offset == m.max_entries - 1


def test_keeps_the_latest_record_per_key_at_its_offset_with_headers_and_batch_fields() -> None:
    rows = [(b"a", b"1"), (b"b", b"1"), (b"a", b"2"), (b"c", b"1"), (b"b", b"2"), (b"a", b"3")]
    s0 = seg(0, rows[:3], per_batch=3, compression=CompressionType.LZ4, producer_id=9, producer_epoch=2,
             base_sequence=0)
    s1 = seg(3, rows[3:], per_batch=3, compression=CompressionType.LZ4, producer_id=9, producer_epoch=2,
             base_sequence=3)
    res = clean(job([s0, s1], end=6))
    assert res.map_end == 6 and len(res.segments) == 1
    out = res.segments[0]
    assert out.base_offset == 0 and out.replaces == (0, 3)
    assert [(o, k, v) for o, _, k, v, _ in records(out.data)] == [(3, b"c", b"1"), (4, b"b", b"2"), (5, b"a", b"3")]
    assert all(t == T0 + o and h == [("h", b"x%d" % o)] for o, t, _, _, h in records(out.data))
    (h1,) = headers(out.data)  # batch 0 lost all records (not its producer's last batch): gone
    assert (h1.base_offset, h1.last_offset, h1.records_count) == (3, 5, 3)
    assert (h1.producer_id, h1.producer_epoch, h1.base_sequence, h1.compression) == (9, 2, 3, CompressionType.LZ4)
    assert out.data == s1.data  # nothing removed from it: copied byte for byte


def test_rebuilt_batch_keeps_base_and_last_offset_with_gaps() -> None:
    s0 = seg(0, [(b"a", b"1"), (b"b", b"1"), (b"a", b"2"), (b"b", b"2")], per_batch=2, producer_id=4,
             producer_epoch=0, base_sequence=0)
    s1 = seg(4, [(b"x", b"1"), (b"a", b"3")], per_batch=2)
    res = clean(job([s0, s1], end=6))
    hs = headers(res.segments[0].data)
    assert [(h.base_offset, h.last_offset, h.records_count, h.base_sequence) for h in hs] == [
        (2, 3, 1, 0), (4, 5, 2, -1)]  # the batch keeps its own base sequence
    assert [o for o, *_ in records(res.segments[0].data)] == [3, 4, 5]


def test_last_batch_of_a_producer_is_kept_empty() -> None:
    s0 = seg(0, [(b"a", b"1"), (b"b", b"1")], per_batch=2, producer_id=7, producer_epoch=1, base_sequence=10)
    s1 = seg(2, [(b"a", b"2"), (b"b", b"2")], per_batch=2)
    res = clean(job([s0, s1], end=4, producer_last_offsets=frozenset({1})))
    first = headers(res.segments[0].data)[0]
    assert (first.base_offset, first.last_offset, first.records_count) == (0, 1, 0)
    assert (first.producer_id, first.producer_epoch, first.base_sequence, first.last_sequence) == (7, 1, 10, 11)
    assert first.max_timestamp == T0 + 1
    decode_batch(res.segments[0].data)  # a valid batch with no records


def test_tombstones_get_a_delete_horizon_and_go_after_it() -> None:
    s0 = seg(0, [(b"a", b"1"), (b"b", b"1"), (b"a", None)], per_batch=3)
    now = T0 + 10
    first = clean(job([s0], end=3, now_ms=now, delete_retention_ms=DAY))
    data = first.segments[0].data
    (h,) = headers(data)
    assert h.has_delete_horizon and h.base_timestamp == now + DAY
    assert [(o, t, k, v) for o, t, k, v, _ in records(data)] == [(1, T0 + 1, b"b", b"1"), (2, T0 + 2, b"a", None)]
    cleaned = SegmentData(0, data)
    again = clean(job([cleaned], end=3, first_dirty=3, now_ms=now + DAY - 1))
    assert [k for _, _, k, _, _ in records(again.segments[0].data)] == [b"b", b"a"]
    gone = clean(job([cleaned], end=3, first_dirty=3, now_ms=now + DAY))
    assert [k for _, _, k, _, _ in records(gone.segments[0].data)] == [b"b"]


def test_keyless_records_are_dropped_below_the_map_end() -> None:
    res = clean(job([seg(0, [(None, b"x"), (b"a", b"1")])], end=2))
    assert [o for o, *_ in records(res.segments[0].data)] == [1]


def test_a_full_map_cleans_the_part_that_fit_and_the_next_job_continues() -> None:
    rows = [(b"k%d" % (i % 40), b"v%d" % i) for i in range(120)]
    segs = [seg(b, rows[b : b + 30], per_batch=5) for b in range(0, 120, 30)]
    small = OffsetMap(24 * 30).max_entries  # a map for about 25 keys
    res = clean(job(segs, end=120, dedupe_buffer_bytes=24 * 30))
    assert 0 < res.map_end < 120 and res.stats.map_entries <= small
    kept = records(b"".join(s.data for s in res.segments))
    rewritten = {b for s in res.segments for b in s.replaces}
    untouched = [s for s in segs if s.base_offset not in rewritten]
    all_now = kept + [r for s in untouched for r in records(s.data)]
    assert [r[0] for r in all_now if r[0] >= res.map_end] == list(range(res.map_end, 120))
    latest = {k: v for k, v in rows}
    assert {k: v for _, _, k, v, _ in sorted(all_now)} == latest


def test_map_too_small_for_one_batch_is_an_error() -> None:
    with pytest.raises(OffsetMapTooSmallError):
        clean(job([seg(0, [(b"k%d" % i, b"v") for i in range(10)], per_batch=10)], end=10,
                  dedupe_buffer_bytes=24 * 4))


def test_small_segments_merge_up_to_segment_bytes() -> None:
    segs = [seg(b, [(b"k%d" % b, b"v" * 50)]) for b in range(6)]
    size = segs[0].size
    groups = group_segments(segs, [1, 2, 3, 4, 5, 6], segment_bytes=size * 2 + 1)
    assert groups == [[0, 1], [2, 3], [4, 5]]
    res = clean(job(segs, end=6, segment_bytes=size * 3))
    assert [s.replaces for s in res.segments] == [(0, 1, 2), (3, 4, 5)]
