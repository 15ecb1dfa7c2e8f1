"""The broker swaps a cleaning result in only when it is right and the log did not change under it."""

from __future__ import annotations

import dataclasses
import os

import pytest

from services.broker.log import PartitionLog
from services.broker.log.compaction import (
    LogChangedError,
    apply_files,
    apply_result,
    clean_in_process,
    log_state,
    make_job,
    read_cleaner_checkpoint,
)
from services.broker.log.segment_swap import CleanedFiles
from shared.compaction.cleaning import clean
from shared.compaction.codec import encode_retained, read_batches
from shared.compaction.selection import assess
from shared.compaction.verify import CleanVerificationError
from shared.config import LogConfig
from shared.records.builder import encode_batch

T0 = 1_700_000_000_000


class Clock:
    now = T0

    def __call__(self) -> int:
        return self.now


def make_log(path: str, policy: str = "compact") -> PartitionLog:
    cfg = LogConfig.from_topic_configs({"segment.bytes": "400", "cleanup.policy": policy, "retention.ms": "1000"})
    log = PartitionLog(path, cfg, Clock())
    for i in range(30):
        log.append_as_leader(encode_batch([(T0, b"k%d" % (i % 3), b"value-%d" % i, None)]))
    log.wait_for_rolled_flush()  # the recovery point moves no more
    return log


def files(path: str) -> dict[str, bytes]:
    out = {}
    for name in sorted(os.listdir(path)):
        with open(os.path.join(path, name), "rb") as f:
            out[name] = f.read()
    return out


def offer(log: PartitionLog):
    c = assess(log_state(log, "t-0", log.log_end_offset), T0)
    assert c.cleanable
    offered = make_job(log, c, T0)
    return offered, clean(offered.read())


def test_a_tampered_result_is_refused_and_the_log_untouched(tmp_path) -> None:
    log = make_log(str(tmp_path / "t-0"))
    offered, result = offer(log)
    before = files(log.directory)
    i, seg = next((i, s) for i, s in enumerate(result.segments) if s.data)
    pos, h, recs = next(read_batches(seg.data))
    recs[0].value = b"forged"
    forged = encode_retained(h, recs, None) + seg.data[pos + h.size :]
    tampered = list(result.segments)
    tampered[i] = dataclasses.replace(seg, data=forged)
    with pytest.raises(CleanVerificationError, match="differ"):
        apply_result(log, offered, tampered, result.map_end)
    assert files(log.directory) == before
    apply_result(log, offered, result.segments, result.map_end)
    assert read_cleaner_checkpoint(log) == result.map_end
    assert log.size < sum(len(v) for k, v in before.items() if k.endswith(".log"))


def test_a_log_truncated_or_shrunk_by_retention_under_the_job_refuses_the_result(tmp_path) -> None:
    log = make_log(str(tmp_path / "a"))
    offered, result = offer(log)
    log.truncate_to(log.segments[1].base_offset + 1)
    with pytest.raises(LogChangedError):
        apply_result(log, offered, result.segments, result.map_end)
    both = make_log(str(tmp_path / "b"), policy="compact,delete")
    offered, result = offer(both)
    both.clock.now = T0 + 5000
    assert both.apply_retention() > 0
    with pytest.raises(LogChangedError):
        apply_result(both, offered, result.segments, result.map_end)


def test_the_next_cleaning_starts_at_the_checkpoint(tmp_path) -> None:
    log = make_log(str(tmp_path / "t-0"))
    first = clean_in_process(log, "t-0", log.log_end_offset, T0)
    assert first is not None and read_cleaner_checkpoint(log) == first.map_end
    assert clean_in_process(log, "t-0", log.log_end_offset, T0) is None  # nothing dirty
    for i in range(30):
        log.append_as_leader(encode_batch([(T0, b"k%d" % (i % 3), b"again-%d" % i, None)]))
    c = assess(log_state(log, "t-0", log.log_end_offset), T0)
    assert c.first_dirty == first.map_end and c.cleanable


def written(log: PartitionLog, offered, segments) -> CleanedFiles:
    """A result as the broker receives it: streamed into ``.cleaned`` files, in pieces."""
    files = CleanedFiles(log.directory, [s.base_offset for s in offered.segments], 2 * offered.total_bytes)
    for seg in segments:
        for pos in range(0, max(len(seg.data), 1), 100):
            files.add(seg.base_offset, seg.replaces, seg.data[pos : pos + 100])
    return files


def test_the_check_process_refuses_a_tampered_result_and_a_dead_child_refuses_then_is_replaced(tmp_path) -> None:
    """The broker's ``ResultChecker`` runs ``verify_result`` in a spawned child that maps the job's segment
    files and the result's ``.cleaned`` files itself: a forged value is refused there, a correct result
    passes, a killed child refuses its check."""
    import asyncio
    import signal

    from services.broker.cleaner_check import ResultChecker

    log = make_log(str(tmp_path / "t-0"))
    offered, result = offer(log)
    i, seg = next((i, s) for i, s in enumerate(result.segments) if s.data)
    pos, h, recs = next(read_batches(seg.data))
    recs[0].value = b"forged"
    tampered = list(result.segments)
    tampered[i] = dataclasses.replace(seg, data=encode_retained(h, recs, None) + seg.data[pos + h.size :])
    checker = ResultChecker()
    before = files(log.directory)

    async def run() -> CleanedFiles:
        bad = written(log, offered, tampered)
        with pytest.raises(CleanVerificationError, match="differ"):
            await checker.check_files(offered, bad.entries(), result.map_end)
        bad.discard()
        assert files(log.directory) == before
        good = written(log, offered, result.segments)
        await checker.check_files(offered, good.entries(), result.map_end)
        assert checker._pool is not None
        (child,) = checker._pool._processes  # the one child, killed while it waits for work
        os.kill(child, signal.SIGKILL)
        with pytest.raises(CleanVerificationError, match="check process died"):
            await checker.check_files(offered, good.entries(), result.map_end)
        await checker.check_files(offered, good.entries(), result.map_end)  # a new child
        return good

    try:
        good = asyncio.run(run())
    finally:
        checker.close()
    good.sync(on_step=lambda step: None)
    apply_files(log, offered, good, result.map_end)
    assert read_cleaner_checkpoint(log) == result.map_end
    assert not [n for n in os.listdir(log.directory) if n.endswith(".cleaned")]
    new = b"".join(s.read_at(0, s.size) for s in log.segments[: len(result.segments)])
    assert new == b"".join(s.data for s in result.segments)


def test_result_files_take_only_the_job_segments_in_order_and_within_the_size_limit(tmp_path) -> None:
    log = make_log(str(tmp_path / "t-0"))
    offered, _ = offer(log)
    bases = [s.base_offset for s in offered.segments]
    before = files(log.directory)
    for pieces in ([(bases[0] + 1, b"x")],  # not a segment of the job: no file of that name is made
                   [(bases[1], b"x"), (bases[0], b"y")],  # backwards
                   [(bases[0], b"x" * 60), (bases[0], b"y" * 50)]):  # over the limit
        got = CleanedFiles(log.directory, bases, 100)
        with pytest.raises(ValueError):
            for base, data in pieces:
                got.add(base, (base,), data)
        got.discard()
        assert files(log.directory) == before


def test_the_check_maps_the_job_segments_and_a_shrunk_one_is_a_changed_log(tmp_path) -> None:
    from services.broker.cleaner_check import CheckSpec

    log = make_log(str(tmp_path / "t-0"))
    offered, result = offer(log)
    spec = CheckSpec.of(offered)
    job = spec.read()
    assert [bytes(s.data) for s in job.segments] == [s.data for s in offered.read().segments]
    os.truncate(spec.paths[0], spec.sizes[0] - 1)
    with pytest.raises(LogChangedError, match="shrank"):
        spec.read()


def test_a_late_worker_never_writes_into_the_files_of_the_one_that_holds_the_log_now(tmp_path) -> None:
    """Two results for one log received at once (the first worker's lease ran out while it streamed): each
    goes to its own files; discarding the late one leaves the other whole, and only a claimed one is swapped."""
    log = make_log(str(tmp_path / "t-0"))
    offered, result = offer(log)
    late = written(log, offered, result.segments)
    current = written(log, offered, result.segments)
    assert set(late.paths()).isdisjoint(current.paths())
    late.discard()
    assert all(os.path.exists(p) for p in current.paths())
    current.sync(on_step=lambda step: None)
    apply_files(log, offered, current, result.map_end)
    assert not [n for n in os.listdir(log.directory) if n.endswith(".cleaned")]
    assert b"".join(s.read_at(0, s.size) for s in log.segments[: len(result.segments)]) == b"".join(
        s.data for s in result.segments)
