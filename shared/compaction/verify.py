"""The broker's check of a cleaning result before it swaps anything: it trusts no worker.

``verify_result`` replays the job's decisions from the original segments and refuses the
result (``CleanVerificationError``, naming the first problem) unless:

* the cleaned segments replace exactly the original segments below ``map_end``, in order,
  each starting at the base offset of the first segment it replaces;
* every cleaned batch has a good CRC and corresponds to an original batch with the same base
  offset, lastOffsetDelta, producer id, epoch, base sequence and codec, in offset order;
* each kept record is identical (key, value, headers, timestamp) to the original record at
  that offset, and no record is kept that a later record of the same key supersedes below
  ``map_end`` (or that is keyless, or a tombstone past its delete horizon);
* no record that must stay is missing, and a batch emptied of records stays only as its
  producer's last batch;
* transactions (the job's ``txn_plan``, from the broker's abort index entries): no record of an
  aborted transaction is kept (nor mapped: an aborted value cannot have removed a committed one);
  a marker is kept byte for byte, or given exactly the job's delete horizon once no data of its
  transaction is left, and is missing only when the plan drops it (past its horizon, no data left);
  the transactional and control flags of every batch are unchanged.

Pure: bytes in, an exception or None out. Uses the cleaning core's own scan and retain rule, so
a batch copied byte for byte is checked without decoding a record, and a rebuilt one record by
record against the original's kept records only.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator, Sequence

import numpy as np

from shared.compaction.cleaning import (
    CleanedSegment,
    CleanJob,
    RetainRule,
    Scans,
    build_offset_map,
    dirty_record_count,
)
from shared.compaction.offset_map import OffsetMap, buffer_bytes_for
from shared.compaction.scan import SegmentScan, scan_segment
from shared.compaction.txn import MarkerAction, TxnPlan
from shared.errors import CorruptRecordError

_SAME_BATCH = ("base_offset", "last_offset_delta", "producer_id", "producer_epoch", "base_sequence")


class CleanVerificationError(Exception):
    """A cleaning result the broker refuses."""


def _scan_cleaned(data: bytes) -> SegmentScan:
    try:
        return scan_segment(data, whole=True)
    except CorruptRecordError as exc:
        raise CleanVerificationError(f"cleaned segment is corrupt: {exc}") from exc


def _check_layout(job: CleanJob, segments: Sequence[CleanedSegment], map_end: int) -> None:
    if not job.first_dirty <= map_end <= job.end:
        raise CleanVerificationError(f"map end {map_end} outside the dirty section [{job.first_dirty}, {job.end}]")
    expected = [s.base_offset for s in job.segments if s.base_offset < map_end]
    replaced = [b for s in segments for b in s.replaces]
    if replaced != expected:
        raise CleanVerificationError(f"result replaces segments {replaced}, the job needs {expected}")
    for s in segments:
        if not s.replaces or s.base_offset != s.replaces[0]:
            raise CleanVerificationError(f"cleaned segment {s.base_offset} does not start its first old segment")


def _rows(sc: SegmentScan, b: int) -> np.ndarray:
    return np.arange(int(sc.first[b]), int(sc.first[b + 1]))


def _records(sc: SegmentScan, rows: np.ndarray, log_append_time: bool) -> list[tuple]:
    out = []
    for i in rows.tolist():
        off, ts, key, value, hdrs = sc.record(i)
        out.append((off, None if log_append_time else ts, key, value, hdrs))
    return out


def _headers_of(sc: SegmentScan, rows: np.ndarray) -> list[list]:
    hs = sc.record_headers
    return [list(hs[i]) if hs is not None else [] for i in rows.tolist()]


def _spans(sc: SegmentScan, rows: np.ndarray) -> Iterator[bytes]:
    """Each record's bytes from its key's first byte to its value's last: key, value length, value."""
    return map(sc.buf.__getitem__, map(slice, sc.key_start[rows].tolist(), sc.value_end[rows].tolist()))


def _same_records(orig: SegmentScan, kept: np.ndarray, got: SegmentScan, have: np.ndarray, lat: bool) -> bool:
    """Whether the records at ``have`` in ``got`` are those at ``kept`` in ``orig`` (offsets, timestamps
    unless LogAppendTime, keys, values, headers), compared column by column without a record object: with
    equal null flags and key and value lengths, one byte comparison per record covers its key and value."""
    if len(kept) != len(have):
        return False
    columns = [lambda sc: sc.offsets, lambda sc: sc.key_null, lambda sc: sc.value_null,
               lambda sc: sc.key_end - sc.key_start, lambda sc: sc.value_end - sc.value_start]
    if not lat:
        columns.append(lambda sc: sc.timestamps)
    if any(not np.array_equal(col(orig)[kept], col(got)[have]) for col in columns):
        return False
    if not all(map(operator.eq, _spans(orig, kept), _spans(got, have))):
        return False
    if orig.record_headers is not None or got.record_headers is not None:
        return _headers_of(orig, kept) == _headers_of(got, have)
    return True


def _check_batch(orig: SegmentScan, b: int, keep: np.ndarray, got: SegmentScan, g: int, job: CleanJob,
                 txn: TxnPlan) -> np.ndarray | None:
    """Check result batch ``g`` against original batch ``b``; return the original rows its records must
    equal (compared for all of a segment's batches at once by ``_compare_records``), or None."""
    oh, gh = orig.headers[b], got.headers[g]
    where = f"batch at offset {oh.base_offset}"
    for name in _SAME_BATCH:
        if getattr(oh, name) != getattr(gh, name):
            raise CleanVerificationError(f"{where}: {name} changed from {getattr(oh, name)} to {getattr(gh, name)}")
    if gh.records_count and gh.compression != oh.compression:
        raise CleanVerificationError(f"{where}: compression changed")
    if gh.is_control != oh.is_control or gh.is_transactional != oh.is_transactional:
        raise CleanVerificationError(f"{where}: its control or transactional flag changed")
    rows = _rows(orig, b)
    kept = rows[keep[rows]]
    same_bytes = orig.raw(b) == got.raw(g)
    if oh.is_control:
        action = txn.marker(oh.base_offset)
        if action is MarkerAction.DROP:
            raise CleanVerificationError(f"{where}: a marker past its delete horizon with no data left was kept")
        if action is MarkerAction.KEEP:
            if not same_bytes:
                raise CleanVerificationError(f"{where}: a control batch changed")
            return None
        if not gh.has_delete_horizon or gh.base_timestamp != txn.delete_horizon_ms:
            raise CleanVerificationError(f"{where}: a marker whose transaction has no data left needs the delete "
                                         f"horizon {txn.delete_horizon_ms}")
        return rows
    if oh.base_offset in txn.aborted_batches and gh.records_count:
        raise CleanVerificationError(f"{where}: keeps records of an aborted transaction")
    if not len(kept) and not (oh.producer_id >= 0 and oh.last_offset in job.producer_last_offsets):
        raise CleanVerificationError(f"{where}: an empty batch kept for no producer")
    if got.value_null[_rows(got, g)].any() and not gh.has_delete_horizon:
        raise CleanVerificationError(f"{where}: tombstones kept without a delete horizon")
    if same_bytes and len(kept) == len(rows):
        return None  # copied byte for byte, and every record stays
    return kept


def _compare_records(orig: SegmentScan, got: SegmentScan, pending: list[tuple[int, int, np.ndarray]]) -> None:
    """Check that each result batch ``g`` holds exactly the original records ``kept`` of batch ``b``, for
    every ``(b, g, kept)`` at once; on a difference, name the first batch that differs."""
    for lat in (False, True):
        group = [p for p in pending if (orig.headers[p[0]].log_append_time is not None) == lat]
        if not group or _same_records(orig, np.concatenate([k for _, _, k in group]), got,
                                      np.concatenate([_rows(got, g) for _, g, _ in group]), lat):
            continue
        for b, g, kept in group:
            if _same_records(orig, kept, got, _rows(got, g), lat):
                continue
            want = _records(orig, kept, lat)
            have = _records(got, _rows(got, g), lat)
            if have != want:  # not only a different encoding of the same records
                extra = [k[0] for k in have if k not in want]
                missing = [k[0] for k in want if k not in have]
                raise CleanVerificationError(
                    f"batch at offset {orig.headers[b].base_offset}: kept records differ from the originals "
                    f"(unexpected or changed at {extra[:5]}, missing {missing[:5]})")


def _must_stay(sc: SegmentScan, b: int, keep: np.ndarray, job: CleanJob, txn: TxnPlan) -> None:
    h = sc.headers[b]
    if h.is_control and txn.marker(h.base_offset) is not MarkerAction.DROP:
        raise CleanVerificationError(f"marker at offset {h.base_offset} was dropped while data of its transaction "
                                     "may remain or before its delete horizon")
    if keep[_rows(sc, b)].any():
        raise CleanVerificationError(f"batch at offset {h.base_offset} is missing from the result")
    if h.producer_id >= 0 and h.last_offset in job.producer_last_offsets:
        raise CleanVerificationError(f"producer {h.producer_id}'s last batch at {h.base_offset} was dropped")


def _check_segment(cleaned: CleanedSegment, job: CleanJob, rule: RetainRule, scans: Scans) -> None:
    got = _scan_cleaned(cleaned.data)
    originals = {s.base_offset: s for s in job.segments}
    g = 0
    last_offset = -1
    for base in cleaned.replaces:
        orig = scans.of(originals[base])
        keep = rule.keep_mask(orig)
        pending: list[tuple[int, int, np.ndarray]] = []
        for b, oh in enumerate(orig.headers):
            if g < len(got.headers) and got.headers[g].base_offset == oh.base_offset:
                kept = _check_batch(orig, b, keep, got, g, job, rule.txn)
                if kept is not None:
                    pending.append((b, g, kept))
                if got.headers[g].base_offset <= last_offset:
                    raise CleanVerificationError(f"offsets go backwards at {got.headers[g].base_offset}")
                last_offset = got.headers[g].last_offset
                g += 1
            else:
                _must_stay(orig, b, keep, job, rule.txn)
        _compare_records(orig, got, pending)
        scans.release(originals[base])
    if g < len(got.headers):
        raise CleanVerificationError(
            f"cleaned segment {cleaned.base_offset} holds a batch at {got.headers[g].base_offset} "
            "that is not an original batch in its range, in order")


def verify_result(job: CleanJob, segments: Sequence[CleanedSegment], map_end: int) -> None:
    """Raise ``CleanVerificationError`` unless ``segments`` is a correct cleaning of ``job``."""
    _check_layout(job, segments, map_end)
    offsets = OffsetMap(buffer_bytes_for(dirty_record_count(job.segments, job.first_dirty, map_end), 2**62))
    scans = Scans(job.hash_seed)
    try:
        txn = job.txn_plan()
        covered = build_offset_map(job.segments, job.first_dirty, map_end, offsets, scans, txn.aborted_batches)
    except Exception as exc:
        raise CleanVerificationError(f"cannot rebuild the offset map up to {map_end}: {exc}") from exc
    if covered < map_end:
        raise CleanVerificationError(f"the offset map cannot cover the dirty section up to {map_end}")
    rule = RetainRule(offsets, map_end, job.now_ms, txn)
    for cleaned in segments:
        _check_segment(cleaned, job, rule, scans)
