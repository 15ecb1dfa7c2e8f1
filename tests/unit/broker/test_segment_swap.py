"""Crash-safe segment replacement: a crash after every step leaves a valid log holding either
the old or the cleaned data for each replaced range; cleanup.policy and retention."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from services.broker.log import PartitionLog
from services.broker.log.replace import remove_expired_deletes, replace_segments
from services.broker.log.segment_swap import FAULT_ENV, swap_steps
from shared.config import LogConfig
from shared.errors import StorageError
from shared.records.builder import encode_batch
from shared.records.decoder import iter_records
from shared.records.header import iter_batches

T0 = 1_700_000_000_000
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


class FakeClock:
    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


class Crash(Exception):
    pass


def one(key: str, value: str, ts: int = T0) -> bytes:
    return encode_batch([(ts, key.encode(), value.encode().ljust(40, b"."), None)])


def records(log: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20).records
        if not data:
            break
        for _, h in iter_batches(data):
            offset = h.next_offset
        out.extend((r.offset, r.key, r.value) for r in iter_records(data))
    return out


def make_log(path: str, clock: FakeClock, policy: str = "compact") -> PartitionLog:
    cfg = LogConfig.from_topic_configs({"segment.bytes": "300", "cleanup.policy": policy,
                                        "file.delete.delay.ms": "1000"})
    log = PartitionLog(path, cfg, clock)
    for i in range(20):  # ~100-byte batches, 3 per segment: 7 segments, the last one active
        log.append_as_leader(one(f"k{i % 4}", f"v{i}"))
    return log


def cleaned_groups(log: PartitionLog) -> tuple[list[tuple[int, bytes]], list]:
    """Replace segments 0-3 by two cleaned segments (0+1, 2+3), dropping every other batch."""
    old = log.segments[:4]
    out = []
    for group in (old[:2], old[2:4]):
        kept = b""
        for seg in group:
            data = seg.read_at(0, seg.size)
            for pos, h in iter_batches(data):
                if h.base_offset % 2 == 0:
                    kept += data[pos : pos + h.size]
        out.append((group[0].base_offset, kept))
    return out, old


def close_all(log: PartitionLog) -> None:
    for seg in log.segments:
        seg.close()


def test_replace_keeps_offsets_and_drops_old_files_after_the_delay(tmp_path) -> None:
    clock = FakeClock()
    log = make_log(str(tmp_path / "t-0"), clock)
    before = records(log)
    cleaned, old = cleaned_groups(log)
    replaced_end = old[-1].next_offset
    replace_segments(log, cleaned, old, on_step=lambda step: None)
    after = records(log)
    expected = [r for r in before if r[0] >= replaced_end or r[0] % 2 == 0]
    assert after == expected
    assert log.read(1, 1 << 20).records  # an offset compacted away reads from the next record
    assert next(iter_records(log.read(1, 1 << 20).records)).offset == 2
    assert any(n.endswith(".deleted") for n in os.listdir(log.directory))
    clock.now += 999
    assert remove_expired_deletes(log) == 0
    clock.now += 1
    assert remove_expired_deletes(log) > 0
    assert not any(n.endswith(".deleted") for n in os.listdir(log.directory))
    log.append_as_leader(one("k9", "new"))
    log.close()
    reopened = PartitionLog(log.directory, log.config, clock)
    assert records(reopened)[: len(expected)] == expected
    assert records(reopened)[-1][0] == 20


def test_replacement_must_be_whole_consecutive_inactive_segments(tmp_path) -> None:
    log = make_log(str(tmp_path / "t-0"), FakeClock())
    data = log.segments[1].read_at(0, log.segments[1].size)
    with pytest.raises(StorageError):
        replace_segments(log, [(log.segments[1].base_offset, data)], [log.segments[0], log.segments[1]])
    with pytest.raises(StorageError):
        replace_segments(log, [(log.active.base_offset, b"")], [log.active])
    with pytest.raises(StorageError):
        replace_segments(log, [(log.segments[0].base_offset, data)], [log.segments[0], log.segments[2]])


@pytest.mark.parametrize("step", swap_steps(2, 4))
def test_a_crash_after_any_step_leaves_old_or_cleaned_data(tmp_path, step: str) -> None:
    clock = FakeClock()
    log = make_log(str(tmp_path / "t-0"), clock)
    before = records(log)
    cleaned, old = cleaned_groups(log)
    split, end = old[2].base_offset, old[-1].next_offset

    def crash(at: str) -> None:
        if at == step:
            raise Crash(at)

    with pytest.raises(Crash):
        replace_segments(log, cleaned, old, on_step=crash)
    close_all(log)
    reopened = PartitionLog(log.directory, log.config, clock)
    got = records(reopened)
    lower_old = [r for r in before if r[0] < split]
    lower_new = [r for r in lower_old if r[0] % 2 == 0]
    upper_old = [r for r in before if split <= r[0] < end]
    upper_new = [r for r in upper_old if r[0] % 2 == 0]
    rest = [r for r in before if r[0] >= end]
    if step.startswith("cleaned"):
        assert got == before
    elif step == "swap:0":  # only the highest cleaned segment had become .swap
        assert got == lower_old + upper_new + rest
    else:
        assert got == lower_new + upper_new + rest
    names = os.listdir(reopened.directory)
    assert not [n for n in names if n.endswith((".swap", ".cleaned", ".deleted"))]
    assert reopened.log_end_offset == 20
    reopened.append_as_leader(one("k1", "after"))
    assert records(reopened)[-1][0] == 20


def test_env_fault_point_kills_the_process_mid_swap_and_recovery_completes_it(tmp_path) -> None:
    path = str(tmp_path / "t-0")
    log = make_log(path, FakeClock())
    end = log.segments[3].next_offset
    log.close()
    script = f"""
import sys
sys.path.insert(0, {REPO!r})
from services.broker.log import PartitionLog
from services.broker.log.replace import replace_segments
from tests.unit.broker.test_segment_swap import FakeClock, cleaned_groups, make_log
from shared.config import LogConfig
cfg = LogConfig.from_topic_configs({{"segment.bytes": "300", "cleanup.policy": "compact"}})
log = PartitionLog({path!r}, cfg, FakeClock())
cleaned, old = cleaned_groups(log)
replace_segments(log, cleaned, old)
print("not killed")
"""
    env = dict(os.environ, **{FAULT_ENV: "delete:1"})
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == -9, proc.stderr
    assert any(n.endswith(".swap") for n in os.listdir(path))
    reopened = PartitionLog(path, LogConfig(cleanup_policy="compact", segment_bytes=300), FakeClock())
    got = records(reopened)
    assert [o for o, _, _ in got if o < end] == [o for o in range(end) if o % 2 == 0]
    assert got[-1][0] == 19


@pytest.mark.parametrize(("policy", "deletes"), [("delete", True), ("compact", False), ("compact,delete", True)])
def test_retention_follows_cleanup_policy(tmp_path, policy: str, deletes: bool) -> None:
    clock = FakeClock()
    cfg = LogConfig.from_topic_configs({"segment.bytes": "300", "cleanup.policy": policy, "retention.ms": "1000"})
    log = PartitionLog(str(tmp_path / "t-0"), cfg, clock)
    for i in range(10):
        log.append_as_leader(one(f"k{i}", "v"))
    clock.now += 5000
    assert (log.apply_retention() > 0) is deletes
    assert (log.log_start_offset > 0) is deletes


@pytest.mark.parametrize("step", ["none", *swap_steps(2, 4)])
def test_aborted_transaction_entries_follow_the_cleaned_segments_through_any_crash(tmp_path, step: str) -> None:
    from services.broker.txn_state import AbortedTxn

    clock = FakeClock()
    cfg = LogConfig.from_topic_configs({"segment.bytes": "300", "cleanup.policy": "compact",
                                        "file.delete.delay.ms": "1000"})
    log = PartitionLog(str(tmp_path / "t-0"), cfg, clock)
    for i in range(20):  # as make_log, each segment's batches transactional batches of one producer
        log.append_as_leader(encode_batch([(T0, b"k%d" % (i % 4), (b"v%d" % i).ljust(25, b"."), None)], producer_id=100 + i // 3,
                                          producer_epoch=0, base_sequence=i % 3, transactional=True))
    cleaned, old = cleaned_groups(log)
    assert [s.next_offset - s.base_offset for s in old] == [3, 3, 3, 3]
    # one aborted transaction indexed in each of the four old segments (markers at their last offsets), from
    # its first even offset: the cleaning keeps the even offsets, so each still covers data, unchanged
    entries = [AbortedTxn(100 + i, seg.base_offset + seg.base_offset % 2, seg.next_offset - 1, seg.next_offset)
               for i, seg in enumerate(old)]
    for e in entries:
        log.add_aborted(e)
    split = old[2].base_offset

    def crash(at: str) -> None:
        if at == step:
            raise Crash(at)

    if step == "none":
        replace_segments(log, cleaned, old, on_step=crash)
    else:
        with pytest.raises(Crash):
            replace_segments(log, cleaned, old, on_step=crash)
    close_all(log)
    reopened = PartitionLog(log.directory, log.config, clock)
    assert reopened.aborted_transactions(0, reopened.log_end_offset) == entries
    assert [e.producer_id for e in reopened.aborted_transactions(split, reopened.log_end_offset)] == [102, 103]
    assert not [n for n in os.listdir(reopened.directory) if n.endswith((".swap", ".cleaned", ".deleted"))]
