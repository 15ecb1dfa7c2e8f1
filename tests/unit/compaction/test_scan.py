"""The fast cleaning core against simple models: the segment scan (both walks), the key hash, the
numpy offset map, and whole cleanings of random headerless and headered workloads."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.compaction.cleaning import CleanJob, SegmentData, clean
from shared.compaction.codec import encode_kept
from shared.compaction.offset_map import OffsetMap
from shared.compaction.scan import _batch_by_batch, hash_key, hash_spans, scan_segment
from shared.compaction.verify import verify_result
from shared.errors import CorruptRecordError
from shared.records.builder import BatchBuilder, encode_batch
from shared.records.compression import CompressionType
from shared.records.decoder import iter_records
from shared.records.header import BatchHeader

T0 = 1_700_000_000_000
DAY = 86_400_000
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def build_segment(rows: list[tuple[bytes | None, bytes | None]], per_batch: int, codec: CompressionType,
                  with_headers: bool, base: int = 0) -> SegmentData:
    data = b""
    for i in range(0, len(rows), per_batch):
        off = base + i
        chunk = [(T0 + off + j, k, v, [("h", b"%d" % (off + j))] if with_headers else None)
                 for j, (k, v) in enumerate(rows[i:i + per_batch])]
        data += encode_batch(chunk, base_offset=off, compression=codec)
    return SegmentData(base, data)


def test_hash_is_the_same_for_a_key_whatever_its_neighbours() -> None:
    keys = [b"", b"a", b"k" * 7, b"k" * 8, b"k" * 9, b"%016d" % 5, bytes(range(200))]
    buf = b"".join(keys)
    arr = np.frombuffer(buf, np.uint8)
    lens = np.array([len(k) for k in keys], np.int64)
    starts = np.concatenate(([0], np.cumsum(lens)[:-1]))
    lo, hi = hash_spans(arr, starts, lens)
    assert [(int(a), int(b)) for a, b in zip(lo, hi, strict=True)] == [hash_key(k) for k in keys]
    assert len({hash_key(k) for k in keys}) == len(keys)
    assert hash_key(b"k" * 8) != hash_key(b"k" * 8 + b"\0")  # the length is hashed, not only the words


@pytest.mark.parametrize("per_batch,with_headers,codec", [(40, False, CompressionType.NONE),
                                                          (40, False, CompressionType.LZ4),
                                                          (3, False, CompressionType.NONE),
                                                          (20, True, CompressionType.NONE)])
def test_scan_matches_the_record_decoder(per_batch: int, with_headers: bool, codec: CompressionType) -> None:
    rows = [(None if i % 11 == 0 else b"key-%d" % (i % 13), None if i % 7 == 0 else b"v" * (i % 300))
            for i in range(200)]
    seg = build_segment(rows, per_batch, codec, with_headers, base=1000)
    sc = scan_segment(seg.data)
    got = [sc.record(i) for i in range(len(sc))]
    want = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in iter_records(seg.data)]
    assert got == want
    if codec == CompressionType.NONE:  # the in-place walk and the batch-by-batch one (joined sections) agree
        sizes = np.array([h.size - 61 for h in sc.headers], np.int64)
        joined = b"".join(seg.data[p + 61:p + h.size] for p, h in zip(sc.positions, sc.headers, strict=True))
        slow, _ = _batch_by_batch(joined, sc.headers, np.cumsum(sizes) - sizes, np.cumsum(sizes))
        offsets, stamps, ks, ke, kn, vs, ve, vn = slow
        assert (offsets == sc.offsets).all() and (stamps == sc.timestamps).all()
        assert (kn == sc.key_null).all() and (vn == sc.value_null).all()
        for a, b, c, d in ((ks, ke, sc.key_start, sc.key_end), (vs, ve, sc.value_start, sc.value_end)):
            assert [joined[x:y] for x, y in zip(a, b, strict=True)] == [sc.buf[x:y] for x, y in zip(c, d, strict=True)]


def test_scan_of_a_cleaned_segment_refuses_trailing_bytes_and_accepts_a_final_gap() -> None:
    seg = build_segment([(b"k%d" % i, b"v") for i in range(40)], 20, CompressionType.NONE, False)
    with pytest.raises(CorruptRecordError, match="after the last whole batch"):
        scan_segment(seg.data + b"\0" * 8, whole=True)  # fewer bytes than a batch length field
    # lastOffsetDelta below the records' deltas: a record would sit past its batch
    b = BatchBuilder()
    for i in range(20):
        b.append(b"v", b"k%d" % i, T0)
    bad = b.build(0, last_offset_delta=25)
    assert len(scan_segment(bad)) == 20  # a gap after the last record is fine (a compacted batch)


@SETTINGS
@given(st.lists(st.tuples(st.integers(0, 400), st.integers(0, 2**62)), min_size=1, max_size=300),
       st.integers(30, 2000))
def test_offset_map_put_many_get_many_agree_with_a_dict(pairs: list[tuple[int, int]], slots: int) -> None:
    m = OffsetMap(24 * slots)
    model: dict[int, int] = {}
    pairs = pairs[: m.max_entries]
    for chunk in (pairs[: len(pairs) // 2], pairs[len(pairs) // 2:]):
        keys = [b"%d" % k for k, _ in chunk]
        offs = np.array([o for _, o in chunk], np.int64) // 2
        lo = np.array([hash_key(k)[0] for k in keys], np.uint64)
        hi = np.array([hash_key(k)[1] for k in keys], np.uint64)
        m.put_many(lo, hi, offs)
        newest: dict[int, int] = {}
        for (k, _), o in zip(chunk, offs.tolist(), strict=True):  # within one call the highest offset wins
            newest[k] = max(o, newest.get(k, -1))
        model.update(newest)
    assert m.size == len(model)
    probe = list(model) + [10_000, 10_001]
    lo = np.array([hash_key(b"%d" % k)[0] for k in probe], np.uint64)
    hi = np.array([hash_key(b"%d" % k)[1] for k in probe], np.uint64)
    assert m.get_many(lo, hi).tolist() == [model[k] for k in model] + [-1, -1]


@SETTINGS
@given(st.lists(st.tuples(st.integers(0, 30), st.booleans()), min_size=1, max_size=400),
       st.integers(1, 60), st.booleans(), st.sampled_from([CompressionType.NONE, CompressionType.LZ4]))
def test_cleaning_keeps_exactly_the_latest_record_of_each_key(ops: list[tuple[int, bool]], per_batch: int,
                                                              with_headers: bool, codec: CompressionType) -> None:
    rows = [(b"key-%04d" % k, None if delete else b"value-%d" % i) for i, (k, delete) in enumerate(ops)]
    half = (len(rows) // 2 // per_batch) * per_batch
    segs = [build_segment(rows[:half], per_batch, codec, with_headers),
            build_segment(rows[half:], per_batch, codec, with_headers, base=half)]
    segs = [s for s in segs if s.data]
    job = CleanJob(tuple(segs), 0, len(rows), T0 + DAY, segment_bytes=1 << 30)
    result = clean(job)
    verify_result(job, result.segments, result.map_end)
    last = {k: i for i, (k, _) in enumerate(rows)}
    want = [(i, k, v) for i, (k, v) in enumerate(rows) if last[k] == i]
    got = [(r.offset, r.key, r.value) for s in result.segments for r in iter_records(s.data)]
    assert got == want
    # after delete.retention.ms the tombstones go too
    later = CleanJob(tuple(SegmentData(s.base_offset, s.data) for s in result.segments), len(rows), len(rows),
                     T0 + 3 * DAY, segment_bytes=1 << 30)
    again = clean(later)
    verify_result(later, again.segments, again.map_end)
    assert [(r.offset, r.value) for s in again.segments for r in iter_records(s.data)] == [
        (i, v) for i, _, v in want if v is not None]


def test_a_rebuilt_log_append_time_batch_keeps_its_max_timestamp() -> None:
    b = BatchBuilder(timestamp_type=1)
    for i in range(5):
        b.append(b"v%d" % i, b"k%d" % i, T0 + i)
    raw = b.build(100, max_timestamp=T0 + 50)
    h = BatchHeader.parse(raw)
    assert h.max_timestamp == T0 + 50
    out = encode_kept(h, [101, 104], [T0 + 50] * 2, [b"k1", b"k4"], [b"v1", None], None, T0 + DAY)
    got = BatchHeader.parse(out)
    assert (got.max_timestamp, got.base_timestamp, got.has_delete_horizon, got.last_offset_delta) == (
        T0 + 50, T0 + DAY, True, 4)
    assert [(r.offset, r.timestamp, r.value) for r in iter_records(out)] == [(101, T0 + 50, b"v1"), (104, T0 + 50, None)]


def test_the_gapped_fast_path_encodes_as_append_with_offset() -> None:
    cols = ([T0 + 5, T0 + 2, T0 + 90_000], [b"a", None, b"c" * 300], [None, b"x", b"y" * 70_000], [0, 3, 70_000])
    fast = BatchBuilder(delete_horizon_ms=T0)
    fast.extend_columns(*cols[:3], offset_deltas=cols[3])
    slow = BatchBuilder(delete_horizon_ms=T0)
    for ts, k, v, d in zip(*cols, strict=True):
        slow.append_with_offset(d, v, k, ts)
    assert fast.build(7) == slow.build(7)
    with pytest.raises(ValueError, match="not above"):
        BatchBuilder().extend_columns([T0, T0], [b"a", b"b"], [b"1", b"2"], offset_deltas=[3, 3])


def test_the_hash_seed_changes_every_hash_but_no_decision() -> None:
    keys = [b"%016d" % i for i in range(50)]
    assert all(hash_key(k, 1) != hash_key(k, 2) != hash_key(k) for k in keys)
    rows = [(keys[i % 50], b"v%d" % i) for i in range(400)]
    seg = build_segment(rows, 40, CompressionType.NONE, False)
    plain = CleanJob((seg,), 0, 400, T0 + DAY)
    seeded = CleanJob((seg,), 0, 400, T0 + DAY, hash_seed=0xDEADBEEFCAFEF00D)
    a, b = clean(plain), clean(seeded)
    assert [s.data for s in a.segments] == [s.data for s in b.segments]
    verify_result(seeded, b.segments, b.map_end)


def test_an_empty_batch_with_bytes_is_corrupt() -> None:
    """A header-only batch (count 0) whose records section is not empty: not read as records of the next."""
    from shared.records.header import pack_header

    good = build_segment([(b"k%d" % i, b"v") for i in range(40)], 40, CompressionType.NONE, False, base=10)
    body = good.data[61:61 + 30]  # bytes that look like records
    empty = pack_header(body, base_offset=0, records_count=0, last_offset_delta=9, base_timestamp=T0,
                        max_timestamp=T0, attributes=0, producer_id=-1, producer_epoch=-1, base_sequence=-1,
                        partition_leader_epoch=-1) + body
    with pytest.raises(CorruptRecordError):
        scan_segment(empty + good.data)


@pytest.mark.parametrize("with_headers", [False, True])
def test_a_job_held_in_a_receive_buffer_or_mapped_files_cleans_as_bytes_do(tmp_path, with_headers: bool) -> None:
    """A worker's segments are views of its one receive buffer, the broker's check maps segment files:
    both are walked in place and must give the very result (and check) that bytes give."""
    import mmap

    rows = [(b"key-%d" % (i % 17), None if i % 9 == 0 else b"v" * (i % 50)) for i in range(300)]
    segs = [build_segment(rows[:150], 10, CompressionType.NONE, with_headers),
            build_segment(rows[150:], 10, CompressionType.NONE, with_headers, base=150)]
    buf = bytearray(b"x" * 5 + b"".join(s.data for s in segs) + b"y" * 5)  # views in the middle of it
    views, pos = [], 5
    for s in segs:
        views.append(SegmentData(s.base_offset, memoryview(buf)[pos:pos + s.size]))
        pos += s.size
    mapped = []
    for s in segs:
        path = tmp_path / f"{s.base_offset}.log"
        path.write_bytes(s.data)
        with open(path, "rb") as f:
            mapped.append(SegmentData(s.base_offset, mmap.mmap(f.fileno(), s.size, prot=mmap.PROT_READ)))
    want = clean(CleanJob(tuple(segs), 0, 300, T0 + DAY, segment_bytes=1 << 30, hash_seed=7))
    for held in (views, mapped):
        assert [sc.record(i) for sc in map(scan_segment, [s.data for s in held]) for i in range(len(sc))] == [
            sc.record(i) for sc in map(scan_segment, [s.data for s in segs]) for i in range(len(sc))]
        job = CleanJob(tuple(held), 0, 300, T0 + DAY, segment_bytes=1 << 30, hash_seed=7)
        got = clean(job)
        assert got.map_end == want.map_end and [(s.base_offset, s.replaces, bytes(s.data)) for s in got.segments] == [
            (s.base_offset, s.replaces, s.data) for s in want.segments]
        verify_result(job, want.segments, want.map_end)
