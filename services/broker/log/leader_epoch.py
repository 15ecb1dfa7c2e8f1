"""Leader-epoch history of a partition: which epoch's leader wrote from which offset.

Kept in ``leader-epoch-checkpoint`` (one ``epoch start_offset`` line per
entry). The leader records ``(epoch, log end offset)`` when it first appends in
a new epoch; followers record the ``partitionLeaderEpoch`` of the batches they
copy. ``end_offset_for(epoch)`` answers Kafka's OffsetsForLeaderEpoch: the
offset after the last record of the largest epoch <= the one asked about.
"""

from __future__ import annotations

import os

from services.broker.replication_rules import epoch_end_offset

CHECKPOINT = "leader-epoch-checkpoint"


class LeaderEpochCache:
    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, CHECKPOINT)
        self.entries: list[tuple[int, int]] = []  # (epoch, start offset), both increasing
        self._unsynced = False  # the file holds entries not fsynced yet (see ``flush``)
        self._load()

    def _load(self) -> None:
        try:
            with open(self.path) as f:
                for line in f:
                    parts = line.split()
                    if len(parts) == 2:
                        self.entries.append((int(parts[0]), int(parts[1])))
        except (FileNotFoundError, ValueError):
            self.entries = []
        # Drop anything not strictly increasing (a torn write).
        clean: list[tuple[int, int]] = []
        for e, o in self.entries:
            if not clean or (e > clean[-1][0] and o >= clean[-1][1]):
                clean.append((e, o))
        self.entries = clean

    def _save(self, sync: bool = True) -> None:
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            f.writelines(f"{e} {o}\n" for e, o in self.entries)
            if sync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, self.path)
        self._unsynced = not sync

    def flush(self) -> None:
        """fsync what ``assign`` wrote. The log calls this before it moves its recovery point, so the
        file is durable for everything below it; above it, recovery re-assigns epochs from the batches.
        (May run on the log's background flush thread: the flag is cleared first, so an ``assign``
        racing with the fsync stays marked for the next flush.)"""
        if not self._unsynced:
            return
        self._unsynced = False
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else -1

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` starts at ``start_offset`` (no-op unless it is a newer epoch)."""
        if epoch < 0 or (self.entries and epoch <= self.entries[-1][0]):
            return
        # An older epoch starting at or after this offset wrote nothing that survives.
        while self.entries and self.entries[-1][1] >= start_offset:
            self.entries.pop()
        self.entries.append((epoch, start_offset))
        # No fsync here (unlike Kafka's LeaderEpochFileCache.assign): a leader or follower appending its
        # first batch in a new epoch to thousands of partitions at once did thousands of fsyncs on the
        # event loop, seconds long. ``flush`` makes it durable before the recovery point moves, and
        # recovery rebuilds the epochs past the recovery point from the batches' partition leader epochs.
        self._save(sync=False)

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """``(largest epoch <= epoch, its end offset)``; ``(-1, -1)`` if no such epoch."""
        return epoch_end_offset(self.entries, epoch, log_end_offset)

    def truncate_from_end(self, end_offset: int) -> None:
        """The log was truncated to ``end_offset``: drop epochs that start at or after it."""
        before = len(self.entries)
        self.entries = [(e, o) for e, o in self.entries if o < end_offset]
        if len(self.entries) != before:
            self._save()

    def truncate_from_start(self, start_offset: int) -> None:
        """Records below ``start_offset`` are gone: keep the epoch covering it, starting there."""
        keep: list[tuple[int, int]] = []
        for i, (e, o) in enumerate(self.entries):
            nxt = self.entries[i + 1][1] if i + 1 < len(self.entries) else None
            if nxt is not None and nxt <= start_offset:
                continue
            keep.append((e, max(o, start_offset)))
        if keep != self.entries:
            self.entries = keep
            self._save()

    def clear(self) -> None:
        self.entries = []
        self._save()
