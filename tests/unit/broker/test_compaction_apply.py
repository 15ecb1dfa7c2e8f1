"""The broker swaps a cleaning result in only when it is right and the log did not change under it."""

from __future__ import annotations

import dataclasses
import os

import pytest

from services.broker.log import PartitionLog
from services.broker.log.compaction import (
    LogChangedError,
    apply_result,
    clean_in_process,
    log_state,
    make_job,
    read_cleaner_checkpoint,
)
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


def test_the_check_process_refuses_a_tampered_result_and_a_dead_child_refuses_then_is_replaced(tmp_path) -> None:
    """The broker's ``ResultChecker`` runs ``verify_result`` in a spawned child that reads the segment files
    itself: a forged value is refused there, a correct result passes, a killed child refuses its check."""
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

    async def run() -> None:
        with pytest.raises(CleanVerificationError, match="differ"):
            await checker.check(offered, tampered, result.map_end)
        await checker.check(offered, list(result.segments), result.map_end)
        assert checker._pool is not None
        (child,) = checker._pool._processes  # the one child, killed while it waits for work
        os.kill(child, signal.SIGKILL)
        with pytest.raises(CleanVerificationError, match="check process died"):
            await checker.check(offered, list(result.segments), result.map_end)
        await checker.check(offered, list(result.segments), result.map_end)  # a new child

    try:
        asyncio.run(run())
    finally:
        checker.close()
    apply_result(log, offered, result.segments, result.map_end, verify=False)
    assert read_cleaner_checkpoint(log) == result.map_end


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
