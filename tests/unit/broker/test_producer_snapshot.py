"""Producer-state snapshots at segment roll: restoring the state needs no batch below the snapshot."""

from __future__ import annotations

import os

from services.broker.log import PartitionLog
from services.broker.log.producer_snapshot import read_snapshot, snapshot_offsets, snapshot_path
from services.broker.log.replace import replace_segments
from services.broker.partition import Partition
from shared.config import LogConfig
from shared.records.builder import encode_batch
from shared.records.header import BatchHeader
from shared.types import TopicPartition

T0 = 1_700_000_000_000


def clock() -> int:
    return T0


def idem(pid: int, seq: int, n: int = 1) -> bytes:
    return encode_batch([(T0, b"k%d" % i, b"v" * 40, None) for i in range(n)], producer_id=pid, producer_epoch=0,
                        base_sequence=seq)


def open_partition(path: str) -> Partition:
    cfg = LogConfig.from_topic_configs({"segment.bytes": "250", "cleanup.policy": "compact"})
    part = Partition(TopicPartition("t", 0), PartitionLog(path, cfg, clock), 1, clock)
    part.update_state(1, 0, [1], [1], 0, 1)
    return part


def test_state_survives_compaction_of_the_batches_it_came_from(tmp_path) -> None:
    path = str(tmp_path / "t-0")
    part = open_partition(path)
    for seq in range(6):
        part.append_as_leader(idem(7, seq), acks=1)
    for seq in range(4):
        part.append_as_leader(idem(8, seq), acks=1)
    assert snapshot_offsets(path)  # one per roll
    before = {pid: list(e.batches) for pid, e in part.producers.producers.items()}
    # compaction removes every batch of producer 7 (all in old segments)
    old = [s for s in part.log.segments[:-1] if s.next_offset <= 6]
    replace_segments(part.log, [(old[0].base_offset, b"")], old, on_step=lambda step: None)
    assert all(h.producer_id != 7 for h in part.log.iter_headers())
    part.log.close()
    again = open_partition(path)
    assert {pid: list(e.batches) for pid, e in again.producers.producers.items()} == before
    dup = again.producers.check(BatchHeader.parse(idem(7, 5)))
    assert dup is not None and dup.first_offset == 5


def test_a_damaged_snapshot_is_ignored_and_truncation_drops_later_ones(tmp_path) -> None:
    path = str(tmp_path / "t-0")
    part = open_partition(path)
    for seq in range(8):
        part.append_as_leader(idem(7, seq), acks=1)
    offsets = snapshot_offsets(path)
    assert len(offsets) >= 2
    with open(snapshot_path(path, offsets[-1]), "r+") as f:
        f.write("{garbage")
    assert read_snapshot(path, offsets[-1]) is None
    part.truncate_to(offsets[0])
    assert snapshot_offsets(path) == offsets[:1]
    assert part.producers.producers[7].last_seq == offsets[0] - 1
    part.append_as_leader(idem(7, offsets[0]), acks=1)  # the next sequence is accepted
    part.truncate_fully_and_start_at(100)
    assert not [n for n in os.listdir(path) if n.endswith(".snapshot")]
