"""``Consumer.poll_arrow`` returns, as Arrow columns, exactly what ``poll`` returns record by record.

Batches are built with the record builder and handed to the consumer as completed fetches (the
fetcher thread never starts), so both polls go through the consumer's own decode path.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

import pyarrow as pa
import pytest

from shared.client import Consumer, TopicPartition
from shared.client import consumer as consumer_module
from shared.errors import UnreadableBatchError
from shared.records.builder import BatchBuilder, build_control_batch
from shared.records.compression import CompressionType
from shared.records.header import crc32c, set_base_offset, set_log_append_time
from shared.records.record import CONTROL_ABORT, CONTROL_COMMIT

TP = TopicPartition("t", 0)
TS = 1_700_000_000_000


@pytest.fixture
def make_consumer() -> Iterator:
    made: list[Consumer] = []

    def make(**kw: object) -> Consumer:
        c = Consumer("127.0.0.1:1", **kw)  # nothing listens there: no fetcher thread is started
        st = consumer_module.PartitionState()
        st.position = 0  # fetch_position None: _pump sends nothing
        c._states = {TP: st}
        made.append(c)
        return c

    yield make
    for c in made:
        c._closed = True
        c.cluster.close()


def feed(c: Consumer, data: bytes, aborted: list[tuple[int, int]] | None = None) -> None:
    st = c._states[TP]
    c._completed.append(consumer_module.Completed(TP, st.generation, st.position or 0, data, 0, len(data),
                                                  high_watermark=10**9, log_start_offset=0, aborted=aborted))


def batch(base: int, records: list[tuple], *, compression: CompressionType = CompressionType.NONE,
          gaps: bool = False, log_append: int | None = None, **kw: object) -> bytes:
    """``records``: (key, value, headers) or, with ``gaps``, (offset delta, key, value, headers)."""
    b = BatchBuilder(compression, **kw)
    for i, r in enumerate(records):
        if gaps:
            delta, key, value, headers = r
            b.append_with_offset(delta, value, key, TS + i, headers)
        else:
            key, value, headers = r
            b.append(value, key, TS + i * 7, headers)
    out = bytearray(b.build(base))
    if log_append is not None:
        set_log_append_time(out, 0, log_append)
    return bytes(out)


def control(base: int, kind: int, pid: int) -> bytes:
    out = bytearray(build_control_batch(kind, pid, 0, TS))
    set_base_offset(out, 0, base, 0)
    return bytes(out)


def plain(n: int, size: int = 10) -> list[tuple]:
    return [(b"k%d" % i, bytes([i % 251]) * (size + i % 3), None) for i in range(n)]


def all_records(c: Consumer, max_records: int | None = None) -> list:
    out = []
    while True:
        got = list(c.poll(0, max_records))
        if not got:
            return out
        out.extend(got)


def all_rows(c: Consumer, max_records: int | None = None) -> pa.Table:
    tables = []
    while True:
        t = c.poll_arrow(0, max_records)
        if not t.num_rows:
            return pa.concat_tables(tables) if tables else t
        assert t.schema == consumer_module.arrow_table_schema()
        tables.append(t)


def as_tuples(table: pa.Table) -> list[tuple]:
    cols = table.to_pydict()
    stamps = table.column("timestamp").cast(pa.int64()).to_pylist()
    return [(t, p, o, ts // 1000, tt, k, v, [(h["key"], h["value"]) for h in hs])
            for t, p, o, ts, tt, k, v, hs in zip(cols["topic"], cols["partition"], cols["offset"], stamps,
                                                 cols["timestampType"], cols["key"], cols["value"], cols["headers"],
                                                 strict=True)]


def rec_tuples(records: list) -> list[tuple]:
    return [(r.topic, r.partition, r.offset, r.timestamp, r.timestamp_type, r.key, r.value, list(r.headers))
            for r in records]


def same_both_ways(make_consumer, chunks: list[tuple[bytes, list | None]], position: int = 0,
                   max_records: int | None = None, **kw: object) -> list[tuple]:
    """Feed the same fetches to two consumers; poll one, poll_arrow the other; return the records."""
    a, b = make_consumer(**kw), make_consumer(**kw)
    for c in (a, b):
        c._states[TP].position = position
        for data, aborted in chunks:
            feed(c, data, aborted)
    recs = rec_tuples(all_records(a, max_records))
    rows = as_tuples(all_rows(b, max_records))
    assert rows == recs
    assert a.position(TP) == b.position(TP)
    return recs


def test_plain_batches_big_and_small(make_consumer) -> None:
    data = batch(0, plain(100)) + batch(100, plain(5)) + batch(105, plain(40, 300))
    recs = same_both_ways(make_consumer, [(data, None)])
    assert [r[2] for r in recs] == list(range(145))


def test_from_a_position_inside_a_batch_and_with_max_records(make_consumer) -> None:
    data = batch(0, plain(100)) + batch(100, plain(50))
    recs = same_both_ways(make_consumer, [(data, None)], position=37, max_records=30)
    assert [r[2] for r in recs] == list(range(37, 150))


@pytest.mark.parametrize("codec", [CompressionType.GZIP, CompressionType.LZ4, CompressionType.ZSTD])
def test_compressed(make_consumer, codec: CompressionType) -> None:
    data = batch(0, plain(64), compression=codec) + batch(64, plain(3), compression=codec) + batch(67, plain(20))
    recs = same_both_ways(make_consumer, [(data, None), (batch(87, plain(30), compression=codec), None)])
    assert len(recs) == 117


def test_headers_and_null_keys_and_values(make_consumer) -> None:
    records = [(None if i % 3 == 0 else b"k%d" % i, None if i % 5 == 0 else b"v" * i,
                [("h", b"x"), ("n", None)] if i % 4 == 0 else None) for i in range(60)]
    plain_nulls = [(None if i % 2 else b"key", None if i % 7 == 0 else b"v" * 20, None) for i in range(40)]
    recs = same_both_ways(make_consumer, [(batch(0, records) + batch(60, plain_nulls), None)])
    assert recs[0][5] is None and recs[0][6] is None and recs[0][7] == [("h", b"x"), ("n", None)]
    assert recs[61][5] is None


def test_log_append_time(make_consumer) -> None:
    recs = same_both_ways(make_consumer, [(batch(0, plain(30), log_append=TS + 999), None)])
    assert {r[3] for r in recs} == {TS + 999} and {r[4] for r in recs} == {1}
    mixed = batch(0, plain(20)) + batch(20, plain(30), log_append=TS + 5) + batch(50, plain(3))
    recs = same_both_ways(make_consumer, [(mixed, None)])
    assert [r[4] for r in recs] == [0] * 20 + [1] * 30 + [0] * 3 and recs[25][3] == TS + 5


def test_compacted_gaps(make_consumer) -> None:
    gapped = [(d, b"k%d" % d, b"v%d" % d, None) for d in range(0, 80, 3)]
    data = batch(0, gapped, gaps=True) + batch(100, [(1, b"a", b"b", None), (4, b"c", None, None)], gaps=True)
    recs = same_both_ways(make_consumer, [(data, None)], position=4)
    assert [r[2] for r in recs] == [*range(6, 80, 3), 101, 104]


def test_read_committed_leaves_out_aborted_transactions_and_markers(make_consumer) -> None:
    txn = {"producer_id": 7, "producer_epoch": 0, "transactional": True}
    data = (batch(0, plain(20), **txn) + control(20, CONTROL_ABORT, 7)
            + batch(21, plain(30), **txn) + control(51, CONTROL_COMMIT, 7) + batch(52, plain(3)))
    recs = same_both_ways(make_consumer, [(data, [(7, 0)])], isolation_level="read_committed")
    assert [r[2] for r in recs] == list(range(21, 51)) + [52, 53, 54]
    a = make_consumer(isolation_level="read_committed")
    feed(a, data, [(7, 0)])
    all_rows(a)
    assert a.position(TP) == 55
    recs = same_both_ways(make_consumer, [(data, [(7, 0)])])  # read_uncommitted: every record, no marker
    assert [r[2] for r in recs] == list(range(20)) + list(range(21, 51)) + [52, 53, 54]


def test_poll_and_poll_arrow_mixed_hand_out_each_record_once(make_consumer) -> None:
    data = batch(0, plain(100)) + batch(100, plain(7)) + batch(107, plain(50), compression=CompressionType.LZ4)
    c = make_consumer()
    feed(c, data)
    seen: list[int] = []
    for i in range(100):
        if i % 2:
            got = [r.offset for r in c.poll(0, 13)]
        else:
            got = c.poll_arrow(0, 17).column("offset").to_pylist()
        if not got and i > 2:
            break
        seen.extend(got)
    assert seen == list(range(157))
    assert c.position(TP) == 157


def _corrupt_records(data: bytes) -> bytes:
    """The batch with its last record's length grown by one, and a CRC that matches again."""
    out = bytearray(data)
    out[61] += 2  # the first record's length varint (zigzag): now it overruns
    struct.pack_into(">I", out, 17, crc32c(memoryview(out)[21:]))
    return bytes(out)


@pytest.mark.parametrize("how", ["crc", "records"])
def test_unreadable_batch_after_good_ones(make_consumer, how: str) -> None:
    bad = batch(30, plain(20))
    bad = bad[:-3] + b"\0\0\0" if how == "crc" else _corrupt_records(bad)
    data = batch(0, plain(30)) + bad
    for poll in ("poll", "poll_arrow"):
        c = make_consumer()
        feed(c, data)
        got = c.poll(0) if poll == "poll" else c.poll_arrow(0)
        assert len(got) == 30
        with pytest.raises(UnreadableBatchError) as err:
            c.poll(0) if poll == "poll" else c.poll_arrow(0)
        assert err.value.offset == 30 and c.position(TP) == 30
        # An application that seeks past the bad batch before polling again is not told of it any more.
        c = make_consumer()
        feed(c, data)
        assert len(c.poll(0) if poll == "poll" else c.poll_arrow(0)) == 30
        c.seek(TP, 50)
        assert len(c.poll(0) if poll == "poll" else c.poll_arrow(0)) == 0


TP1 = TopicPartition("t", 1)


def _records_then_out_of_range(c: Consumer) -> consumer_module.PartitionState:
    """Three records of t-0, then an OFFSET_OUT_OF_RANGE fetch of t-1 (position 0, log start 5)."""
    from shared.errors import ErrorCode

    c._pump = lambda: None  # type: ignore[method-assign]
    st1 = consumer_module.PartitionState()
    st1.position = 0
    c._states[TP1] = st1
    feed(c, batch(0, plain(3)))
    c._completed.append(consumer_module.Completed(TP1, st1.generation, 0, b"", 0, 0, high_watermark=10,
                                                  log_start_offset=5, error=ErrorCode.OFFSET_OUT_OF_RANGE))
    return st1


def _poll(c: Consumer, how: str, timeout_ms: int = 100) -> int:
    return len(c.poll(timeout_ms) if how == "poll" else c.poll_arrow(timeout_ms))


@pytest.mark.parametrize("how", ["poll", "poll_arrow"])
def test_an_error_of_one_partition_after_records_of_another(make_consumer, how: str) -> None:
    """Records already taken from one partition are returned, and another partition's OFFSET_OUT_OF_RANGE
    (auto_offset_reset=none) is raised by the next poll, as Kafka's consumer throws only when it has
    collected nothing: raising at once would lose them (their position has moved past them)."""
    from shared.errors import OffsetOutOfRangeError

    c = make_consumer(auto_offset_reset="none")
    _records_then_out_of_range(c)
    assert _poll(c, how) == 3 and c.position(TP) == 3
    with pytest.raises(OffsetOutOfRangeError, match="t-1: offset 0"):
        _poll(c, how)


@pytest.mark.parametrize("how", ["poll", "poll_arrow"])
def test_a_deferred_error_is_dropped_by_a_seek_and_survives_another_error(make_consumer, how: str) -> None:
    from shared.errors import ErrorCode, OffsetOutOfRangeError, TidelogError, error_for

    c = make_consumer(auto_offset_reset="none")
    _records_then_out_of_range(c)
    assert _poll(c, how) == 3
    c.seek(TP1, 7)  # the application moved t-1 on: the fetch for offset 0 no longer applies (Kafka drops it)
    assert _poll(c, how, 0) == 0

    c = make_consumer(auto_offset_reset="none")
    _records_then_out_of_range(c)
    assert _poll(c, how) == 3
    c._pending_error = error_for(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "t2")  # set by the fetch thread meanwhile
    with pytest.raises(TidelogError, match="TOPIC_AUTHORIZATION_FAILED"):
        _poll(c, how)
    with pytest.raises(OffsetOutOfRangeError, match="t-1"):  # not lost behind the other error
        _poll(c, how)


@pytest.mark.parametrize("how", ["poll", "poll_arrow"])
def test_a_failed_reset_does_not_lose_records_taken(make_consumer, how: str) -> None:
    """With a reset policy the reset (a ListOffsets call) runs in the next poll: if it fails there, the
    records of the poll before have been returned already."""
    from shared.errors import ErrorCode, TidelogError

    c = make_consumer(auto_offset_reset="earliest")
    _records_then_out_of_range(c)

    def timed_out(*args: object, **kw: object) -> None:
        raise TidelogError("ListOffsets timed out", code=ErrorCode.REQUEST_TIMED_OUT)

    c._list_offsets = timed_out  # type: ignore[method-assign]
    assert _poll(c, how) == 3 and c.position(TP) == 3
    with pytest.raises(TidelogError, match="timed out"):
        _poll(c, how)
