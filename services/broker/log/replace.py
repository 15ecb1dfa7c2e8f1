"""Swap cleaned segments into an open ``PartitionLog`` (the in-memory side of ``segment_swap``).

``replace_segments`` is the only function that changes which segments a log holds
besides appends, retention and truncation. The files move as ``segment_swap`` describes;
the segment list and indexes follow. Files only; no networking, no asyncio.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from services.broker.log.segment import LogSegment
from services.broker.log.segment_swap import StepHook, env_fault_hook, rename_files, write_cleaned
from shared.errors import StorageError

if TYPE_CHECKING:
    from services.broker.log.partition_log import PartitionLog

DEFAULT_FILE_DELETE_DELAY_MS = 60_000


def check_replacement(log: PartitionLog, new_bases: Sequence[int], old: Sequence[LogSegment]) -> None:
    """Refuse a replacement that is not whole, consecutive, inactive old segments, each cleaned
    segment starting where one of them starts (the condition crash recovery relies on)."""
    if not old or not new_bases:
        raise StorageError("a segment replacement needs old and new segments")
    try:
        first = log.segments.index(old[0])
    except ValueError:
        raise StorageError(f"segment {old[0].base_offset} is not in {log.directory}") from None
    if log.segments[first : first + len(old)] != list(old) or first + len(old) >= len(log.segments):
        raise StorageError("replaced segments must be consecutive and exclude the active segment")
    old_bases = [s.base_offset for s in old]
    if list(new_bases) != sorted(set(new_bases)) or new_bases[0] != old_bases[0]:
        raise StorageError("cleaned segments must be sorted and start at the first replaced segment")
    if not set(new_bases) <= set(old_bases):
        raise StorageError("each cleaned segment must start at the base offset of a replaced segment")


def replace_segments(
    log: PartitionLog,
    cleaned: Sequence[tuple[int, bytes | bytearray | memoryview | None]],
    old: Sequence[LogSegment],
    on_step: StepHook = env_fault_hook,
) -> list[LogSegment]:
    """Replace ``old`` (consecutive, inactive) by ``cleaned`` ``(base offset, segment bytes)``; ``None`` bytes:
    the caller already wrote and fsynced that ``.cleaned`` file (``CleanedFiles``).

    Crash-safe at every step (see ``segment_swap``); the in-memory log changes only after
    the files are in place. Returns the new segments."""
    new_bases = [b for b, _ in cleaned]
    check_replacement(log, new_bases, old)
    for i, (base, data) in enumerate(cleaned):
        if data is not None:
            write_cleaned(log.directory, base, data)
            on_step(f"cleaned:{i}")
    first = log.segments.index(old[0])
    for seg in old:
        seg.close()
    deleted = rename_files(log.directory, new_bases, [s.base_offset for s in old], on_step)
    now = log.clock()
    new_segments = []
    for base in new_bases:
        seg = LogSegment(log.directory, base, log.config.index_interval_bytes, now)
        seg.recover()  # validates every batch and rebuilds both indexes
        seg.flush()
        new_segments.append(seg)
    log.segments[first : first + len(old)] = new_segments
    log._bases = [s.base_offset for s in log.segments]
    delay = int(log.config.extra.get("file.delete.delay.ms", DEFAULT_FILE_DELETE_DELAY_MS))
    log.pending_deletes.append((now + delay, deleted))
    return new_segments


def remove_expired_deletes(log: PartitionLog, now: int | None = None) -> int:
    """Remove the ``.deleted`` files whose ``file.delete.delay.ms`` has passed; return how many."""
    now = log.clock() if now is None else now
    due = [paths for at, paths in log.pending_deletes if at <= now]
    log.pending_deletes = [(at, paths) for at, paths in log.pending_deletes if at > now]
    removed = 0
    for paths in due:
        for path in paths:
            try:
                os.unlink(path)
                removed += 1
            except FileNotFoundError:
                pass
    return removed
