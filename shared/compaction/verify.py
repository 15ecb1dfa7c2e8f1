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
  producer's last batch.

Pure: bytes in, an exception or None out. Uses the cleaning core's own retain rule.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from shared.compaction.cleaning import CleanedSegment, CleanJob, RetainRule, build_offset_map, dirty_record_count
from shared.compaction.codec import BatchHeader, Record, read_batches
from shared.compaction.offset_map import OffsetMap, buffer_bytes_for
from shared.errors import CorruptRecordError

_SAME_BATCH = ("base_offset", "last_offset_delta", "producer_id", "producer_epoch", "base_sequence")


class CleanVerificationError(Exception):
    """A cleaning result the broker refuses."""


def _key(r: Record, log_append_time: bool) -> tuple:
    return (r.offset, None if log_append_time else r.timestamp, r.key, r.value, list(r.headers))


def _cleaned_batches(data: bytes) -> Iterator[tuple[BatchHeader, list[Record]]]:
    try:
        for _, header, records in read_batches(data):
            yield header, records
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


def _check_batch(orig: BatchHeader, records: list[Record], got: BatchHeader, got_records: list[Record],
                 rule: RetainRule, job: CleanJob) -> None:
    where = f"batch at offset {orig.base_offset}"
    for name in _SAME_BATCH:
        if getattr(orig, name) != getattr(got, name):
            raise CleanVerificationError(f"{where}: {name} changed from {getattr(orig, name)} to {getattr(got, name)}")
    if got.records_count and got.compression != orig.compression:
        raise CleanVerificationError(f"{where}: compression changed")
    if orig.is_control:
        if got_records != records or got.attributes != orig.attributes:
            raise CleanVerificationError(f"{where}: a control batch changed")
        return
    lat = orig.timestamp_type == 1
    want = [_key(r, lat) for r in records if rule.keep(orig, r)]
    have = [_key(r, lat) for r in got_records]
    if have != want:
        extra = [k[0] for k in have if k not in want]
        missing = [k[0] for k in want if k not in have]
        raise CleanVerificationError(
            f"{where}: kept records differ from the originals (unexpected or changed at {extra[:5]}, "
            f"missing {missing[:5]})")
    if not want and not (orig.producer_id >= 0 and orig.last_offset in job.producer_last_offsets):
        raise CleanVerificationError(f"{where}: an empty batch kept for no producer")
    if any(r.value is None for r in got_records) and not got.has_delete_horizon:
        raise CleanVerificationError(f"{where}: tombstones kept without a delete horizon")


def verify_result(job: CleanJob, segments: Sequence[CleanedSegment], map_end: int) -> None:
    """Raise ``CleanVerificationError`` unless ``segments`` is a correct cleaning of ``job``."""
    _check_layout(job, segments, map_end)
    offsets = OffsetMap(buffer_bytes_for(dirty_record_count(job.segments, job.first_dirty, map_end), 2**62))
    try:
        covered = build_offset_map(job.segments, job.first_dirty, map_end, offsets)
    except Exception as exc:
        raise CleanVerificationError(f"cannot rebuild the offset map up to {map_end}: {exc}") from exc
    if covered < map_end:
        raise CleanVerificationError(f"the offset map cannot cover the dirty section up to {map_end}")
    rule = RetainRule(offsets, map_end, job.now_ms)
    originals = {s.base_offset: s for s in job.segments}
    for cleaned in segments:
        got = _cleaned_batches(cleaned.data)
        nxt = next(got, None)
        last_offset = -1
        for base in cleaned.replaces:
            for _, orig, records in read_batches(originals[base].data):
                if nxt is not None and nxt[0].base_offset == orig.base_offset:
                    _check_batch(orig, records, nxt[0], nxt[1], rule, job)
                    if nxt[0].base_offset <= last_offset:
                        raise CleanVerificationError(f"offsets go backwards at {nxt[0].base_offset}")
                    last_offset = nxt[0].last_offset
                    nxt = next(got, None)
                elif orig.is_control or any(rule.keep(orig, r) for r in records):
                    raise CleanVerificationError(f"batch at offset {orig.base_offset} is missing from the result")
                elif orig.producer_id >= 0 and orig.last_offset in job.producer_last_offsets:
                    raise CleanVerificationError(f"producer {orig.producer_id}'s last batch at "
                                                 f"{orig.base_offset} was dropped")
        if nxt is not None:
            raise CleanVerificationError(
                f"cleaned segment {cleaned.base_offset} holds a batch at {nxt[0].base_offset} "
                "that is not an original batch in its range, in order")
