"""Compaction of a log holding transactions: aborted data dropped, markers kept while data of their
transaction is left and removed only past their delete horizon, the broker's check refusing results
that break either rule, and the cleanable range stopping at the last stable offset."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.compaction.cleaning import CleanedSegment, CleanJob, SegmentData, clean
from shared.compaction.selection import LogState, SegmentInfo, assess
from shared.compaction.txn import AbortedRange, MarkerAction
from shared.compaction.verify import CleanVerificationError, verify_result
from shared.records.builder import build_control_batch, encode_batch
from shared.records.decoder import decode_batch
from shared.records.header import iter_batches, set_base_offset
from shared.records.record import CONTROL_ABORT, CONTROL_COMMIT

T0 = 1_700_000_000_000
RETENTION = 1_000


@dataclass
class Log:
    """A log built batch by batch, with what a reader should see of it."""

    batches: list[bytes] = field(default_factory=list)
    next_offset: int = 0
    open: dict[int, int] = field(default_factory=dict)  # producer -> first offset of its open transaction
    txn_offsets: dict[int, list[int]] = field(default_factory=dict)  # producer -> data offsets, open txn
    aborted: list[AbortedRange] = field(default_factory=list)
    aborted_offsets: set[int] = field(default_factory=set)
    markers: dict[int, list[int]] = field(default_factory=dict)  # marker offset -> its transaction's data
    last_data: dict[int, int] = field(default_factory=dict)  # producer -> last offset of its last data batch

    def plain(self, rows: list[tuple[bytes, bytes | None]]) -> None:
        self._add(encode_batch([(T0 + self.next_offset + i, k, v, []) for i, (k, v) in enumerate(rows)],
                               base_offset=self.next_offset), len(rows))

    def txn(self, pid: int, rows: list[tuple[bytes, bytes | None]]) -> None:
        self.open.setdefault(pid, self.next_offset)
        self.txn_offsets.setdefault(pid, []).extend(range(self.next_offset, self.next_offset + len(rows)))
        self.last_data[pid] = self.next_offset + len(rows) - 1
        self._add(encode_batch([(T0 + self.next_offset + i, k, v, []) for i, (k, v) in enumerate(rows)],
                               base_offset=self.next_offset, producer_id=pid, producer_epoch=0, base_sequence=0,
                               transactional=True), len(rows))

    def end(self, pid: int, commit: bool) -> None:
        first = self.open.pop(pid)
        data = self.txn_offsets.pop(pid)
        marker = self.next_offset
        batch = bytearray(build_control_batch(CONTROL_COMMIT if commit else CONTROL_ABORT, pid, 0, T0 + marker))
        set_base_offset(batch, 0, marker, -1)
        self._add(bytes(batch), 1)
        self.markers[marker] = data
        if not commit:
            self.aborted.append(AbortedRange(first, marker, pid))
            self.aborted_offsets.update(data)

    def _add(self, batch: bytes, n: int) -> None:
        self.batches.append(batch)
        self.next_offset += n

    def segments(self, per_segment: int) -> tuple[SegmentData, ...]:
        out = []
        for i in range(0, len(self.batches), per_segment):
            data = b"".join(self.batches[i:i + per_segment])
            out.append(SegmentData(next(iter_batches(data))[1].base_offset, data))
        return tuple(out)


def batches_of(segments) -> list[tuple]:
    """``(header, records)`` of every batch of ``segments``, in order."""
    out = []
    for s in segments:
        data = bytes(s.data)
        for pos, h in iter_batches(data):
            out.append((h, decode_batch(data, pos)[1]))
    return out


def committed_view(segments, aborted: list[AbortedRange]) -> dict[bytes, bytes]:
    """What a read_committed reader ends up with, by key (last value wins; a tombstone removes)."""
    view: dict[bytes, bytes | None] = {}
    for h, recs in batches_of(segments):
        if h.is_control:
            continue
        for r in recs:
            if h.is_transactional and any(a.producer_id == h.producer_id and a.first_offset <= r.offset
                                          <= a.last_offset for a in aborted):
                continue
            view[r.key] = r.value
    return {k: v for k, v in view.items() if v is not None}


def job_of(segments, log: Log, now_ms: int, first_dirty: int = 0) -> CleanJob:
    return CleanJob(tuple(segments), first_dirty, log.next_offset, now_ms, delete_retention_ms=RETENTION,
                    aborted_txns=tuple(log.aborted), producer_last_offsets=frozenset(log.last_data.values()))


def run(segments, log: Log, now_ms: int) -> tuple[SegmentData, ...]:
    """One cleaning of the whole log, checked by the broker's check, as the new segments."""
    job = job_of(segments, log, now_ms)
    result = clean(job)
    verify_result(job, result.segments, result.map_end)
    kept = {b for c in result.segments for b in c.replaces}
    return tuple(sorted([SegmentData(c.base_offset, c.data) for c in result.segments]
                        + [s for s in segments if s.base_offset not in kept], key=lambda s: s.base_offset))


def offsets_in(segments) -> set[int]:
    return {r.offset for _, recs in batches_of(segments) for r in recs}


def marker_headers(segments) -> dict[int, object]:
    return {h.base_offset: h for h, _ in batches_of(segments) if h.is_control}


def example() -> Log:
    log = Log()
    log.plain([(b"a", b"a0"), (b"b", b"b0")])
    log.txn(7, [(b"a", b"a-aborted"), (b"c", b"c-aborted")])
    log.txn(8, [(b"b", b"b-committed")])
    log.end(7, commit=False)
    log.end(8, commit=True)
    # both producers go on: their last batches (kept, if emptied, for producer state) are later ones
    log.txn(7, [(b"x", b"x")])
    log.end(7, commit=True)
    log.txn(8, [(b"y", b"y")])
    log.end(8, commit=True)
    log.plain([(b"d", b"d0")])
    return log


def test_aborted_data_goes_and_never_supersedes_committed_values() -> None:
    log = example()
    segs = log.segments(2)
    before = committed_view(segs, log.aborted)
    after = run(segs, log, T0)
    assert committed_view(after, log.aborted) == before == {b"a": b"a0", b"b": b"b-committed", b"x": b"x",
                                                            b"y": b"y", b"d": b"d0"}
    assert not offsets_in(after) & log.aborted_offsets
    assert offsets_in(after) >= {0, 4, 11}  # a0 stays: the aborted a-value is not in the offset map
    # every marker stays this time: the abort's data was just removed, the commits' data is still there
    assert set(marker_headers(after)) == {5, 6, 8, 10}


def test_markers_get_a_horizon_then_go_once_past_it() -> None:
    log = Log()
    log.txn(7, [(b"a", b"x")])
    log.end(7, commit=False)
    log.txn(8, [(b"b", b"y")])
    log.end(8, commit=True)
    log.txn(7, [(b"f", b"f")])  # the producers' last batches, with data: their markers (5, 7) stay
    log.end(7, commit=True)
    log.txn(8, [(b"g", b"g")])
    log.end(8, commit=True)
    log.plain([(b"b", b"z")])  # supersedes the committed value: that transaction's data goes
    log.plain([(b"e", b"e")])
    segs = log.segments(1)
    first = run(segs, log, T0)
    marks = marker_headers(first)
    assert set(marks) == {1, 3, 5, 7} and not any(h.has_delete_horizon for h in marks.values())
    second = run(first, log, T0 + 10)
    marks = marker_headers(second)
    assert set(marks) == {1, 3, 5, 7}
    assert all(marks[m].has_delete_horizon and marks[m].base_timestamp == T0 + 10 + RETENTION for m in (1, 3))
    assert not marks[5].has_delete_horizon and not marks[7].has_delete_horizon
    assert set(marker_headers(run(second, log, T0 + 10 + RETENTION - 1))) == {1, 3, 5, 7}
    third = run(second, log, T0 + 10 + RETENTION)
    assert set(marker_headers(third)) == {5, 7}
    assert committed_view(third, log.aborted) == {b"b": b"z", b"e": b"e", b"f": b"f", b"g": b"g"}


def test_a_marker_stays_while_its_producers_emptied_last_batch_does() -> None:
    log = Log()
    log.txn(7, [(b"a", b"x")])
    log.end(7, commit=False)
    log.plain([(b"e", b"e")])
    segs = log.segments(1)
    for now in (T0, T0 + 10, T0 + 10 * RETENTION):
        segs = run(segs, log, now)
        (empty, _) = batches_of(segs)[0]
        assert empty.base_offset == 0 and empty.records_count == 0  # kept empty for producer state
        assert set(marker_headers(segs)) == {1}


def _without_batch(seg: CleanedSegment, base_offset: int) -> CleanedSegment:
    data = bytes(seg.data)
    kept = b"".join(data[pos:pos + h.size] for pos, h in iter_batches(data) if h.base_offset != base_offset)
    return dataclasses.replace(seg, data=kept)


def _refused(job: CleanJob, segments, map_end: int) -> str:
    try:
        verify_result(job, segments, map_end)
    except CleanVerificationError as exc:
        return str(exc)
    raise AssertionError("the check accepted a wrong result")


def test_the_check_refuses_a_kept_aborted_record() -> None:
    log = example()
    segs = log.segments(2)
    job = job_of(segs, log, T0)
    blind = clean(dataclasses.replace(job, aborted_txns=()))  # a worker blind to the aborts
    assert offsets_in([SegmentData(c.base_offset, c.data) for c in blind.segments]) & log.aborted_offsets
    assert "missing" in _refused(job, blind.segments, blind.map_end)  # it also removed a0, superseded by an abort
    log = Log()
    log.plain([(b"a", b"a0")])
    log.txn(7, [(b"x", b"aborted")])
    log.end(7, commit=False)
    log.plain([(b"b", b"b0")])
    job = job_of(log.segments(1), log, T0)
    blind = clean(dataclasses.replace(job, aborted_txns=()))
    assert "batch at offset 1: keeps records of an aborted transaction" in _refused(job, blind.segments, blind.map_end)


def test_the_check_refuses_a_marker_dropped_too_early() -> None:
    log = example()
    segs = run(log.segments(2), log, T0)  # the aborted data went: the abort marker may now get a horizon
    job = job_of(segs, log, T0 + 5)
    assert job.txn_plan().marker(5) is MarkerAction.SET_HORIZON
    result = clean(job)
    verify_result(job, result.segments, result.map_end)
    tampered = [_without_batch(c, 5) if 5 in offsets_in([c]) else c for c in result.segments]
    try:
        verify_result(job, tampered, result.map_end)
    except CleanVerificationError as exc:
        assert "marker at offset 5" in str(exc)
    else:
        raise AssertionError("a marker dropped before its delete horizon was accepted")
    # the original marker bytes, without the horizon the plan asks for, are refused too
    stale = [dataclasses.replace(c, data=b"".join(
        s.data for s in segs if s.base_offset in c.replaces)) for c in result.segments]
    try:
        verify_result(job, stale, result.map_end)
    except CleanVerificationError as exc:
        assert "horizon" in str(exc) or "differ" in str(exc)
    else:
        raise AssertionError("a marker without its delete horizon was accepted")


def test_an_abort_index_entry_without_its_marker_does_not_abort_a_later_transaction() -> None:
    log = Log()
    log.txn(7, [(b"a", b"x")])
    log.end(7, commit=False)
    log.txn(7, [(b"a", b"later")])  # the producer's next transaction, committed
    log.end(7, commit=True)
    log.plain([(b"z", b"z")])
    segs = log.segments(1)
    no_marker = tuple(s for s in segs if s.base_offset != 1)  # as if an earlier cleaning removed it
    job = CleanJob(no_marker, 0, log.next_offset, T0, delete_retention_ms=RETENTION, aborted_txns=tuple(log.aborted))
    assert job.txn_plan().aborted_batches == {0}


def test_the_cleanable_range_stops_at_the_last_stable_offset() -> None:
    segs = tuple(SegmentInfo(b, b + 10, 1000, T0, T0) for b in range(0, 50, 10))
    log = LogState("t-0", segs, 0, 50, None, min_cleanable_dirty_ratio=0.0)
    assert assess(log, T0).first_uncleanable == 40  # the active segment
    assert assess(dataclasses.replace(log, last_stable_offset=25), T0).first_uncleanable == 20
    assert assess(dataclasses.replace(log, last_stable_offset=20), T0).first_uncleanable == 20
    assert assess(dataclasses.replace(log, last_stable_offset=0), T0).first_uncleanable == 0


KEYS = st.sampled_from([b"k0", b"k1", b"k2", b"k3"])
VALUES = st.one_of(st.none(), st.binary(min_size=1, max_size=3))
ROWS = st.lists(st.tuples(KEYS, VALUES), min_size=1, max_size=3)
OPS = st.lists(st.one_of(
    st.tuples(st.just("plain"), st.just(0), ROWS),
    st.tuples(st.just("txn"), st.integers(1, 3), ROWS),
    st.tuples(st.just("end"), st.integers(1, 3), st.booleans()),
), min_size=1, max_size=30)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPS, st.integers(1, 4), st.lists(st.integers(0, 2 * RETENTION), min_size=1, max_size=4))
def test_cleaning_keeps_the_committed_view_and_drops_aborted_data(ops, per_segment, steps) -> None:
    log = Log()
    for kind, pid, arg in ops:
        if kind == "plain":
            log.plain(arg)
        elif kind == "txn":
            log.txn(pid, arg)
        elif pid in log.open:
            log.end(pid, commit=arg)
    for pid in sorted(log.open):  # every transaction below the job's end is decided (the LSO bound)
        log.end(pid, commit=pid % 2 == 0)
    segs = log.segments(per_segment)
    view = committed_view(segs, log.aborted)
    now = T0
    horizons: dict[int, int] = {}
    for step in steps:
        now += step
        segs = run(segs, log, now)
        assert committed_view(segs, log.aborted) == view
        assert not offsets_in(segs) & log.aborted_offsets
        present = offsets_in(segs)
        bases = {h.base_offset for h, _ in batches_of(segs)}  # emptied batches too
        assert {o for o in log.last_data.values() if o not in log.aborted_offsets} <= present | {
            h.last_offset for h, _ in batches_of(segs)}
        marks = marker_headers(segs)
        for marker, data in log.markers.items():
            if marker in marks:
                if marks[marker].has_delete_horizon:
                    horizons[marker] = marks[marker].base_timestamp
                continue
            assert not (present | bases) & set(data), f"marker {marker} went while its transaction's data remains"
            assert marker in horizons and horizons[marker] <= now, f"marker {marker} went before its horizon"
