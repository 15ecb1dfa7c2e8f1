"""The segmented log: offsets, reads, rolls, indexes, retention, recovery after crashes."""

from __future__ import annotations

import os
import struct
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.broker.log import PartitionLog
from services.broker.log.partition_log import _FLUSHER, _write_checkpoint
from shared.config import LogConfig
from shared.errors import CorruptRecordError, OffsetOutOfRangeError, RecordTooLargeError
from shared.records.builder import encode_batch
from shared.records.decoder import decode_batch, iter_records
from shared.records.header import iter_batches


class FakeClock:
    def __init__(self, now: int = 1_700_000_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def batch(n: int, ts: int = 1_700_000_000_000, tag: str = "v", size: int = 20) -> bytes:
    return encode_batch([(ts + i, f"k{i}".encode(), f"{tag}{i}".encode().ljust(size, b"."), None) for i in range(n)])


def read_all(log: PartitionLog, start: int | None = None, max_offset: int | None = None) -> list[tuple[int, bytes]]:
    offset = log.log_start_offset if start is None else start
    out = []
    while True:
        data = log.read(offset, 4096, max_offset).records
        if not data:
            return out
        for r in iter_records(data):
            if r.offset >= offset:
                out.append((r.offset, r.value))
        offset = out[-1][0] + 1


def segment_files(path: str, suffix: str = ".log") -> list[str]:
    return sorted(n for n in os.listdir(path) if n.endswith(suffix))


def test_append_assigns_dense_offsets_and_reads_back(tmp_path) -> None:
    log = PartitionLog(str(tmp_path / "t-0"))
    a = log.append_as_leader(batch(3), leader_epoch=5)
    b = log.append_as_leader(batch(2, tag="w"))
    assert (a.first_offset, a.last_offset, b.first_offset, b.last_offset) == (0, 2, 3, 4)
    assert log.log_end_offset == 5
    got = read_all(log)
    assert [o for o, _ in got] == [0, 1, 2, 3, 4]
    first = log.read(0, 1 << 20).records
    header, _ = decode_batch(first)
    assert header.partition_leader_epoch == 5
    assert segment_files(str(tmp_path / "t-0")) == ["00000000000000000000.log"]


def test_read_returns_whole_batches_and_respects_max_offset(tmp_path) -> None:
    log = PartitionLog(str(tmp_path / "t-0"))
    for _ in range(10):
        log.append_as_leader(batch(10))
    data = log.read(0, 1).records  # smaller than one batch: still one whole batch
    assert len(list(iter_batches(data))) == 1
    data = log.read(15, 10_000, max_offset=40).records
    offsets = [h.base_offset for _, h in iter_batches(data)]
    assert offsets == [10, 20, 30]
    assert log.read(40, 10_000, max_offset=40).records == b""
    with pytest.raises(OffsetOutOfRangeError):
        log.read(101, 100)


def test_invalid_batches_are_rejected_whole_and_log_untouched(tmp_path) -> None:
    log = PartitionLog(str(tmp_path / "t-0"), LogConfig(max_message_bytes=2000))
    log.append_as_leader(batch(2))
    size = log.size
    good = batch(2)
    bad = bytearray(batch(2))
    bad[-1] ^= 1
    for payload, err in [
        (good + bytes(bad), CorruptRecordError),
        (good + good[:30], CorruptRecordError),
        (b"", CorruptRecordError),
        (batch(100, size=50), RecordTooLargeError),
    ]:
        with pytest.raises(err):
            log.append_as_leader(payload)
    assert log.size == size and log.log_end_offset == 2
    assert [o for o, _ in read_all(log)] == [0, 1]


def test_roll_by_size_and_time_and_index_lookup(tmp_path) -> None:
    clock = FakeClock()
    cfg = LogConfig(segment_bytes=2000, segment_ms=60_000, index_interval_bytes=100)
    log = PartitionLog(str(tmp_path / "t-0"), cfg, clock)
    for _ in range(20):
        log.append_as_leader(batch(5))
    assert len(log.segments) == 3  # 20 batches of 206 B, 9 per 2000 B segment
    clock.now += 61_000
    before = len(log.segments)
    log.append_as_leader(batch(5))
    assert len(log.segments) == before + 1  # rolled by segment.ms
    for off in range(0, log.log_end_offset, 7):
        data = log.read(off, 100).records
        h = next(iter(iter_batches(data)))[1]
        assert h.base_offset <= off <= h.last_offset


def test_offset_for_timestamp(tmp_path) -> None:
    log = PartitionLog(str(tmp_path / "t-0"), LogConfig(segment_bytes=1500, index_interval_bytes=50))
    for i in range(30):
        log.append_as_leader(batch(4, ts=1000 + i * 10))
    assert log.offset_for_timestamp(0) == (0, 1000)
    assert log.offset_for_timestamp(1000 + 15 * 10 + 2) == (15 * 4 + 2, 1152)
    assert log.offset_for_timestamp(1155) == (15 * 4 + 4, 1160)
    assert log.offset_for_timestamp(10_000) is None


def test_log_append_time(tmp_path) -> None:
    clock = FakeClock(5_000)
    log = PartitionLog(str(tmp_path / "t-0"), LogConfig(log_append_time=True), clock)
    info = log.append_as_leader(batch(3, ts=1))
    assert info.log_append_time == 5_000
    header, records = decode_batch(log.read(0, 10_000).records)
    assert header.timestamp_type == 1 and {r.timestamp for r in records} == {5_000}


def test_retention_by_time_and_bytes_never_deletes_active(tmp_path) -> None:
    clock = FakeClock(1_000_000)
    cfg = LogConfig(segment_bytes=1000, retention_ms=10_000)
    log = PartitionLog(str(tmp_path / "t-0"), cfg, clock)
    for i in range(10):
        log.append_as_leader(batch(5, ts=900_000 + i))
    n = len(log.segments)
    assert log.apply_retention() == n - 1
    assert len(log.segments) == 1 and log.log_start_offset == log.active.base_offset
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 100)
    log2 = PartitionLog(str(tmp_path / "t-1"), LogConfig(segment_bytes=1000, retention_bytes=2500), clock)
    for _ in range(30):
        log2.append_as_leader(batch(5, ts=clock.now))
    log2.apply_retention()
    assert log2.size <= 2500 + log2.segments[0].size
    assert log2.log_start_offset == log2.segments[0].base_offset > 0
    # reopen: the log start offset and data survive
    start = log2.log_start_offset
    log2.close()
    again = PartitionLog(str(tmp_path / "t-1"), LogConfig(segment_bytes=1000), clock)
    assert again.log_start_offset == start and again.log_end_offset == 150


def test_clean_reopen_keeps_everything(tmp_path) -> None:
    cfg = LogConfig(segment_bytes=1500, index_interval_bytes=64)
    log = PartitionLog(str(tmp_path / "t-0"), cfg)
    for _ in range(25):
        log.append_as_leader(batch(3))
    expected = read_all(log)
    log.close()
    again = PartitionLog(str(tmp_path / "t-0"), cfg)
    assert again.recovered_bytes == 0 and read_all(again) == expected


def _crash_copy(log: PartitionLog) -> None:
    """Simulate a crash: drop file handles without flushing checkpoints. A crashed process's background
    flush of a rolled segment dies with it: it must not write the recovery point into the directory the
    recovered log now owns (it would race with it on a busy machine)."""
    with log._recovery_lock:
        log._generation += 1  # what delete() does: a pending background flush then writes nothing
    for seg in log.segments:
        seg.close()


@pytest.mark.parametrize("damage", ["truncate", "garble", "zero-tail", "bad-length"])
def test_crash_recovery_truncates_to_last_valid_batch(tmp_path, damage: str) -> None:
    cfg = LogConfig(segment_bytes=100_000, index_interval_bytes=64)
    path = str(tmp_path / "t-0")
    log = PartitionLog(path, cfg)
    sizes = []
    for i in range(12):
        log.append_as_leader(batch(3, tag=f"b{i}-"))
        sizes.append(log.active.size)
    _crash_copy(log)
    seg_file = os.path.join(path, segment_files(path)[-1])
    last_good = sizes[8]  # damage lands in batch 9
    with open(seg_file, "r+b") as f:
        if damage == "truncate":
            f.truncate(last_good + 40)
        elif damage == "garble":
            f.seek(last_good + 70)
            f.write(b"\xff\xee")
        elif damage == "zero-tail":
            f.seek(last_good)
            f.write(b"\x00" * (sizes[-1] - last_good))
        else:
            f.seek(last_good + 8)
            f.write(struct.pack(">i", 10**9))
    os.unlink(os.path.join(path, segment_files(path, ".index")[-1]))  # and lose the index
    again = PartitionLog(path, cfg)
    assert again.log_end_offset == 27
    assert again.active.size == last_good
    assert [o for o, _ in read_all(again)] == list(range(27))
    assert len(again.active.offset_index) > 1  # rebuilt
    # the log keeps working after recovery
    info = again.append_as_leader(batch(2))
    assert info.first_offset == 27


def test_corrupt_index_is_rebuilt(tmp_path) -> None:
    cfg = LogConfig(segment_bytes=1000, index_interval_bytes=32)
    path = str(tmp_path / "t-0")
    log = PartitionLog(path, cfg)
    for _ in range(20):
        log.append_as_leader(batch(3))
    expected = read_all(log)
    log.close()
    idx = os.path.join(path, segment_files(path, ".index")[0])
    with open(idx, "r+b") as f:
        f.write(b"\x7f" * 5)
    again = PartitionLog(path, cfg)
    assert read_all(again) == expected


def test_truncate_to_for_followers(tmp_path) -> None:
    log = PartitionLog(str(tmp_path / "t-0"), LogConfig(segment_bytes=800))
    for _ in range(10):
        log.append_as_leader(batch(4))
    log.truncate_to(22)  # mid-batch: the whole batch holding 22 goes
    assert log.log_end_offset == 20
    assert [o for o, _ in read_all(log)] == list(range(20))
    log.append_as_follower(encode_batch([(1, None, b"x", None)] * 3, base_offset=20))
    assert log.log_end_offset == 23
    with pytest.raises(CorruptRecordError):
        log.append_as_follower(encode_batch([(1, None, b"x", None)], base_offset=5))


def _checkpoint(log: PartitionLog) -> int:
    with open(os.path.join(log.directory, "recovery-point")) as f:
        return int(f.read())


def test_rolled_segment_is_flushed_in_the_background_then_moves_the_recovery_point(tmp_path) -> None:
    log = PartitionLog(str(tmp_path / "t-0"), LogConfig(segment_bytes=800))
    gate = threading.Event()
    _FLUSHER.submit(gate.wait)  # hold the flusher: the roll must not wait for it
    for _ in range(5):
        log.append_as_leader(batch(4))
    assert len(log.segments) > 1
    assert log.recovery_point == 0  # nothing fsynced yet
    gate.set()
    log.wait_for_rolled_flush()
    assert log.recovery_point == log.segments[-1].base_offset == _checkpoint(log)


def test_a_flush_that_started_before_a_truncation_cannot_move_the_recovery_point_past_it(tmp_path) -> None:
    log = PartitionLog(str(tmp_path / "t-0"), LogConfig(segment_bytes=800))
    gate = threading.Event()
    _FLUSHER.submit(gate.wait)
    for _ in range(5):
        log.append_as_leader(batch(4))
    rolled_upto = log.segments[-1].base_offset
    log.truncate_to(2)
    gate.set()
    log.wait_for_rolled_flush()
    assert log.log_end_offset == 0 and rolled_upto > 0
    assert log.recovery_point == 0 == _checkpoint(log)


def test_deleting_a_log_with_a_flush_pending(tmp_path) -> None:
    log = PartitionLog(str(tmp_path / "t-0"), LogConfig(segment_bytes=800))
    gate = threading.Event()
    _FLUSHER.submit(gate.wait)
    for _ in range(5):
        log.append_as_leader(batch(4))
    log.delete()
    gate.set()
    log.wait_for_rolled_flush()  # the fsync ran on duplicated descriptors; nothing was written back
    assert not os.path.exists(log.directory)


ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 6)),
        st.tuples(st.just("retain"), st.integers(0, 3000)),
        st.tuples(st.just("reopen"), st.just(0)),
        st.tuples(st.just("crash"), st.integers(1, 200)),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops)
def test_log_property_offsets_dense_and_reads_correct(tmp_path_factory, operations) -> None:
    path = str(tmp_path_factory.mktemp("prop") / "t-0")
    clock = FakeClock()
    cfg = LogConfig(segment_bytes=600, index_interval_bytes=100, retention_bytes=-1)
    log = PartitionLog(path, cfg, clock)
    model: dict[int, bytes] = {}
    counter = 0
    for op, arg in operations:
        if op == "append":
            counter += 1
            info = log.append_as_leader(batch(arg, tag=f"{counter}-"))
            assert info.first_offset == (max(model) + 1 if model else log.log_end_offset - arg)
            for i in range(arg):
                model[info.first_offset + i] = f"{counter}-{i}".encode().ljust(20, b".")
        elif op == "retain":
            log.config = LogConfig(segment_bytes=600, index_interval_bytes=100, retention_bytes=arg)
            log.apply_retention()
            for o in [o for o in model if o < log.log_start_offset]:
                del model[o]
        elif op == "reopen":
            log.close()
            log = PartitionLog(path, cfg, clock)
        else:  # crash and cut off the last `arg` bytes of the active segment
            _crash_copy(log)
            seg = os.path.join(path, segment_files(path)[-1])
            size = os.path.getsize(seg)
            with open(seg, "r+b") as f:
                f.truncate(max(size - arg, 0))
            log = PartitionLog(path, cfg, clock)
            for o in [o for o in model if o >= log.log_end_offset]:
                del model[o]
        got = read_all(log)
        assert [o for o, _ in got] == sorted(model)
        assert dict(got) == model
        if got:
            assert [o for o, _ in got] == list(range(got[0][0], got[-1][0] + 1))
    log.close()


def test_concurrent_checkpoint_writes_never_collide(tmp_path) -> None:
    """The background flusher of rolled segments and the log's own thread both write the recovery-point
    checkpoint (and a log reopened after a crash writes it while the old one's flush may still finish):
    each write goes through its own temporary file, so no writer finds its file replaced by another's.
    With one shared ``recovery-point.tmp`` this failed with FileNotFoundError (the property test's flake)."""
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def writer(base: int) -> None:
        start.wait()
        try:
            for i in range(300):
                _write_checkpoint(str(tmp_path), "recovery-point", base + i)
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(k * 1000,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert [n for n in os.listdir(tmp_path) if n.endswith(".tmp")] == []
    with open(tmp_path / "recovery-point") as f:
        assert int(f.read()) % 1000 == 299
