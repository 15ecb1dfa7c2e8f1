"""The leader-epoch checkpoint is not fsynced on append (services/broker/log/leader_epoch.py): the log
fsyncs it before moving its recovery point, and recovery takes the epochs past the recovery point from
the batches, so a checkpoint that lost its newest entries (power loss) is completed on reopen."""

from __future__ import annotations

import os

from services.broker.log import PartitionLog
from services.broker.log.leader_epoch import CHECKPOINT
from shared.records.builder import encode_batch


def batch(n: int) -> bytes:
    return encode_batch([(1_700_000_000_000 + i, b"k", b"v", None) for i in range(n)])


def test_assign_does_not_fsync_and_flush_does(tmp_path, monkeypatch) -> None:
    synced: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real(fd)))
    log = PartitionLog(str(tmp_path / "t-0"))
    synced.clear()
    log.epochs.assign(3, 0)
    assert synced == []  # the append path: no fsync
    log.epochs.flush()
    assert len(synced) == 1
    log.epochs.flush()  # nothing new: nothing to sync
    assert len(synced) == 1


def test_epochs_past_the_recovery_point_are_rebuilt_from_the_batches(tmp_path) -> None:
    path = str(tmp_path / "t-0")
    log = PartitionLog(path)
    log.append_as_leader(batch(3), leader_epoch=1)
    log.flush()  # recovery point 3: epoch 1 durable
    log.append_as_leader(batch(2), leader_epoch=4)
    log.append_as_leader(batch(2), leader_epoch=6)
    assert log.epochs.entries == [(1, 0), (4, 3), (6, 5)]
    for seg in log.segments:
        seg.close()  # a crash: no flush
    with open(os.path.join(path, CHECKPOINT), "w") as f:
        f.write("1 0\n")  # power loss took the unsynced entries
    again = PartitionLog(path)
    assert again.log_end_offset == 7
    assert again.epochs.entries == [(1, 0), (4, 3), (6, 5)]
    assert again.epochs.end_offset_for(4, again.log_end_offset) == (4, 5)
