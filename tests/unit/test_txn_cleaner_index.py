"""The cleaner and the aborted-transaction index (``.txnindex``): a cleaned segment lists only the aborts
whose data is still in the log (services/broker/log/segment_swap.py), and recovery rebuilds the same index
from the cleaned batches; retention takes a segment's index with it. Real files, no processes."""

from __future__ import annotations

import glob
import os

from services.broker.log import PartitionLog
from services.broker.log.compaction import clean_in_process
from services.broker.log.producer_snapshot import restore_producer_state
from services.broker.log.segment_swap import live_aborted_entry
from services.broker.log.txn_index import decode
from services.broker.txn_state import AbortedTxn
from shared.config import LogConfig
from shared.records.builder import build_control_batch, encode_batch
from shared.records.decoder import control_record_type, decode_batch
from shared.records.header import set_base_offset
from shared.records.read_committed import AbortedFilter
from shared.records.record import CONTROL_ABORT, CONTROL_COMMIT

T0 = 1_700_000_000_000


class Clock:
    now = T0

    def __call__(self) -> int:
        return self.now


def _at(raw: bytes, base: int) -> bytes:
    buf = bytearray(raw)
    set_base_offset(buf, 0, base, 0)
    return bytes(buf)


class Writer:
    """Batches appended as a follower would (offsets given), so the test decides every offset."""

    def __init__(self, log: PartitionLog) -> None:
        self.log = log
        self.seq: dict[int, int] = {}

    @property
    def next(self) -> int:
        return self.log.log_end_offset

    def txn(self, pid: int, rows: list[tuple[bytes, bytes]]) -> int:
        base = self.next
        seq = self.seq.get(pid, 0)
        self.seq[pid] = seq + len(rows)
        self.log.append_as_follower(_at(encode_batch([(T0, k, v, ()) for k, v in rows], producer_id=pid,
                                                     producer_epoch=0, base_sequence=seq, transactional=True), base))
        return base + len(rows) - 1

    def marker(self, pid: int, kind: int) -> int:
        base = self.next
        self.log.append_as_follower(_at(build_control_batch(kind, pid, 0, T0, coordinator_epoch=1), base))
        return base

    def plain(self, key: bytes, value: bytes) -> int:
        base = self.next
        self.log.append_as_follower(_at(encode_batch([(T0, key, value, ())]), base))
        return base


def txn_indexes(directory: str) -> dict[str, list[AbortedTxn]]:
    out = {}
    for path in sorted(glob.glob(os.path.join(directory, "*.txnindex"))):
        with open(path, "rb") as f:
            entries = decode(f.read())
        if entries:
            out[os.path.basename(path)] = entries
    return out


def all_entries(directory: str) -> list[AbortedTxn]:
    return [e for entries in txn_indexes(directory).values() for e in entries]


def read_committed(log: PartitionLog) -> dict[bytes, bytes]:
    """What a read_committed consumer reading the whole log keeps, by key (the broker's aborted list and the
    client's filter)."""
    f = AbortedFilter((e.producer_id, e.first_offset) for e in log.aborted_transactions(log.log_start_offset,
                                                                                         log.log_end_offset))
    out: dict[bytes, bytes] = {}
    for seg in log.segments:
        for bp in seg.scan_headers(0):
            h = bp.header
            _, recs = decode_batch(seg.read_at(bp.position, h.size), 0, validate=True)
            kind = control_record_type(recs[0]) if h.is_control and recs else None
            if f.keep(h, kind):
                for r in recs:
                    assert r.key is not None and r.value is not None
                    out[r.key] = r.value
    return out


def covers_data(log: PartitionLog, e: AbortedTxn) -> bool:
    """Whether a transactional data batch of ``e``'s producer is left in ``e``'s range."""
    return any(h.producer_id == e.producer_id and h.is_transactional and not h.is_control
               and e.first_offset <= h.base_offset and h.last_offset < e.last_offset for h in log.iter_headers())


def build(directory: str, clock: Clock) -> tuple[PartitionLog, dict[bytes, bytes], int]:
    cfg = LogConfig.from_topic_configs({"segment.bytes": "300", "cleanup.policy": "compact",
                                        "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "1000"})
    log = PartitionLog(directory, cfg, clock)
    w = Writer(log)
    expected: dict[bytes, bytes] = {}
    keys = [b"k%d" % i for i in range(4)]
    for i in range(3):
        committed, aborted = 10 + i, 20 + i
        w.txn(aborted, [(k, b"aborted-%d" % i) for k in keys])
        w.txn(committed, [(k, b"committed-%d" % i) for k in keys[:2]])
        w.marker(aborted, CONTROL_ABORT)
        w.txn(committed, [(k, b"committed-%d" % i) for k in keys[2:]])
        w.marker(committed, CONTROL_COMMIT)
        expected.update({k: b"committed-%d" % i for k in keys})
    # producer 30's aborted batch is its last data batch: the cleaner keeps it empty, so its abort stays indexed
    last_batch = w.txn(30, [(b"k0", b"aborted-last")])
    w.marker(30, CONTROL_ABORT)
    for i in range(12):  # roll segments past every marker
        w.plain(b"p%d" % (i % 3), b"plain-%d" % i)
        expected[b"p%d" % (i % 3)] = b"plain-%d" % i
    restore_producer_state(log)  # indexes the aborts from the markers, as a broker opening the log does
    return log, expected, last_batch


def test_cleaning_drops_index_entries_of_aborts_whose_data_is_gone_and_recovery_agrees(tmp_path) -> None:
    clock = Clock()
    log, expected, last_batch = build(str(tmp_path), clock)
    before = all_entries(str(tmp_path))
    assert sorted(e.producer_id for e in before) == [20, 21, 22, 30]
    assert read_committed(log) == expected

    result = clean_in_process(log, "t-0", log.log_end_offset, clock.now, producer_last_offsets=[last_batch],
                              force=True)
    assert result is not None and result.segments
    after = all_entries(str(tmp_path))
    # only producer 30's abort still covers data (its batch kept empty); its entry is unchanged
    assert after == [e for e in before if e.producer_id == 30]
    assert all(covers_data(log, e) for e in after)
    assert not [h for h in log.iter_headers() if h.producer_id in (20, 21, 22) and not h.is_control]
    assert log.aborted_transactions(0, log.log_end_offset) == after  # the open log agrees with the files
    assert read_committed(log) == expected

    # recovery (a broker restart with no producer snapshot) rebuilds the same index from the cleaned batches
    for seg in log.segments:
        seg.close()
    reopened = PartitionLog(str(tmp_path), log.config, clock)
    restore_producer_state(reopened)
    assert all_entries(str(tmp_path)) == after
    assert read_committed(reopened) == expected

    # the next cleaning gives the emptied aborts' markers a delete horizon, one past it removes them; the
    # index stays as it is
    w = Writer(reopened)
    for round_ in range(2):
        clock.now += 2000
        for i in range(6):  # new dirty data: a cleaning runs again
            w.plain(b"p%d" % (i % 3), b"again-%d-%d" % (round_, i))
            expected[b"p%d" % (i % 3)] = b"again-%d-%d" % (round_, i)
        assert clean_in_process(reopened, "t-0", reopened.log_end_offset, clock.now,
                                producer_last_offsets=[last_batch], force=True) is not None
        assert all_entries(str(tmp_path)) == after
        assert read_committed(reopened) == expected
    markers = [h.producer_id for h in reopened.iter_headers() if h.is_control]
    assert not {20, 21, 22} & set(markers) and 30 in markers


def test_live_aborted_entry_keeps_what_covers_data_and_tightens_to_the_first_batch_left() -> None:
    e = AbortedTxn(7, 10, 50, 51)
    assert live_aborted_entry(e, [], 0) is None  # every batch of it went
    assert live_aborted_entry(e, [(60, 61)], 0) is None  # a later transaction of the producer does not count
    assert live_aborted_entry(e, [(5, 6)], 0) is None  # nor an earlier one
    assert live_aborted_entry(e, [(30, 31), (20, 24)], 0) == AbortedTxn(7, 20, 50, 51)  # as recovery finds it
    assert live_aborted_entry(e, [], 20) == e  # it begins before the swapped segments: left alone


def test_retention_deletes_a_segments_abort_index_with_it(tmp_path) -> None:
    clock = Clock()
    cfg = LogConfig.from_topic_configs({"segment.bytes": "300", "retention.ms": "1000"})
    log = PartitionLog(str(tmp_path), cfg, clock)
    w = Writer(log)
    w.txn(5, [(b"a", b"x")])
    w.marker(5, CONTROL_ABORT)
    for i in range(8):
        w.plain(b"b", b"y%d" % i)
    restore_producer_state(log)
    first = log.segments[0].base_offset
    assert txn_indexes(str(tmp_path)) == {f"{first:020d}.txnindex": [AbortedTxn(5, 0, 1, 2)]}
    clock.now += 10_000
    assert log.apply_retention() > 0
    assert not glob.glob(os.path.join(str(tmp_path), "*.txnindex"))
    assert log.aborted_transactions(log.log_start_offset, log.log_end_offset) == []
