"""The broker refuses tampered cleaning results; cleanable-log selection by Kafka's rules."""

from __future__ import annotations

import dataclasses

import pytest

from shared.compaction.cleaning import CleanedSegment, clean
from shared.compaction.codec import encode_retained, read_batches
from shared.compaction.selection import LogState, SegmentInfo, assess, choose_filthiest
from shared.compaction.verify import CleanVerificationError, verify_result
from tests.unit.compaction.test_cleaning import DAY, T0, job, seg


def sample():
    rows = [(b"k%d" % (i % 5), b"v%d" % i) for i in range(30)] + [(b"k1", None)]
    segs = [seg(b, rows[b : b + 10], per_batch=2) for b in range(0, 30, 10)] + [seg(30, rows[30:])]
    j = job(segs, end=31, producer_last_offsets=frozenset())
    return j, clean(j)


def replace_data(res, data: bytes) -> list[CleanedSegment]:
    return [dataclasses.replace(res.segments[0], data=data)] + res.segments[1:]


def test_a_correct_result_passes() -> None:
    j, res = sample()
    verify_result(j, res.segments, res.map_end)


def test_a_changed_value_with_a_recomputed_crc_is_refused() -> None:
    j, res = sample()
    data = res.segments[0].data
    pos, h, recs = next(read_batches(data))
    recs[0].value = b"evil"
    tampered = encode_retained(h, recs, h.base_timestamp if h.has_delete_horizon else None)
    with pytest.raises(CleanVerificationError, match="differ"):
        verify_result(j, replace_data(res, tampered + data[pos + h.size :]), res.map_end)


def test_a_dropped_latest_record_is_refused() -> None:
    j, res = sample()
    data = res.segments[0].data
    batches = list(read_batches(data))
    pos, h, _ = batches[-1]
    with pytest.raises(CleanVerificationError, match="missing"):
        verify_result(j, replace_data(res, data[:pos]), res.map_end)


def test_shifted_offsets_and_a_bad_crc_are_refused() -> None:
    j, res = sample()
    data = bytearray(res.segments[0].data)
    shifted = bytearray(data)
    shifted[7] += 1  # baseOffset of the first batch (outside the CRC)
    with pytest.raises(CleanVerificationError):
        verify_result(j, replace_data(res, bytes(shifted)), res.map_end)
    data[-1] ^= 0xFF
    with pytest.raises(CleanVerificationError, match="corrupt"):
        verify_result(j, replace_data(res, bytes(data)), res.map_end)


def test_a_superseded_record_kept_or_a_wrong_layout_is_refused() -> None:
    j, res = sample()
    original_first = j.segments[0]
    keep_all = [dataclasses.replace(res.segments[0], data=original_first.data + res.segments[0].data)]
    with pytest.raises(CleanVerificationError):
        verify_result(j, keep_all + res.segments[1:], res.map_end)
    with pytest.raises(CleanVerificationError, match="replaces"):
        verify_result(j, res.segments[:-1], res.map_end)
    with pytest.raises(CleanVerificationError, match="map end"):
        verify_result(j, res.segments, 99)


def segs(*sizes: int, ts: int = T0) -> tuple[SegmentInfo, ...]:
    out, base = [], 0
    for size in sizes:
        out.append(SegmentInfo(base, base + 10, size, ts, ts))
        base += 10
    return tuple(out)


def test_dirty_ratio_never_the_active_segment_nor_above_the_high_watermark() -> None:
    log = LogState("t-0", segs(100, 100, 100, 100), 0, high_watermark=40, checkpoint=10)
    c = assess(log, T0)
    assert (c.first_dirty, c.first_uncleanable, c.clean_bytes, c.dirty_bytes) == (10, 30, 100, 200)
    assert c.dirty_ratio == pytest.approx(2 / 3) and c.cleanable
    low_hw = assess(dataclasses.replace(log, high_watermark=25), T0)
    assert low_hw.first_uncleanable == 20 and low_hw.dirty_bytes == 100 and not low_hw.cleanable  # 0.5, not > 0.5
    never = assess(dataclasses.replace(log, checkpoint=None), T0)
    assert never.first_dirty == 0 and never.dirty_ratio == 1.0
    assert not assess(dataclasses.replace(log, cleanup_policy="delete"), T0).cleanable


def test_compaction_lags() -> None:
    log = LogState("t-0", segs(100, 100, 100, 100), 0, high_watermark=40, checkpoint=20,
                   min_cleanable_dirty_ratio=0.9)
    assert not assess(log, T0).cleanable
    lagging = dataclasses.replace(log, max_compaction_lag_ms=DAY)
    c = assess(lagging, T0 + DAY + 5)
    assert c.compaction_delay_ms == 5 and c.cleanable
    young = dataclasses.replace(log, checkpoint=0, min_cleanable_dirty_ratio=0.1, min_compaction_lag_ms=DAY)
    assert assess(young, T0 + 10).first_uncleanable == 0
    assert assess(young, T0 + DAY + 1).first_uncleanable == 30


def test_the_filthiest_log_first_and_busy_logs_skipped() -> None:
    a = LogState("a-0", segs(100, 100, 100, 100), 0, 40, checkpoint=10)
    b = LogState("b-0", segs(100, 100, 100, 100), 0, 40, checkpoint=None)
    assert choose_filthiest([a, b], T0).name == "b-0"
    assert choose_filthiest([a, b], T0, busy={"b-0"}).name == "a-0"
    assert choose_filthiest([a], T0, busy={"a-0"}) is None
